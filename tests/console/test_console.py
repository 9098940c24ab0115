"""The admin console through ASGI calls (Starlette's test client): sign-in, CSRF, escaping,
strictness, conflicts, zips, renames, overrides, rollback, the user view, live updates and
error pages.

The browser flows are in test_console_browser.py; these run in milliseconds and pin down what
the server side promises whatever the page's JavaScript does.
"""

from __future__ import annotations

import io
import json
import re
import threading
import uuid
import zipfile
from collections.abc import Iterator
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

import skillfs
from skillfs.auth import Tokens, tokens_document
from skillfs.console import make_app
from skillfs.console.app import Console
from skillfs.console.archive import ZipLimits, read_zip
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidPath, TooLarge
from skillfs.model import File, Put, Remove, Scope

ADMIN = "admin-token-0123456789"
READER = "reader-token-0123456789"
AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "skills"

GOOD_MD = b"---\nname: greeter\ndescription: Greets people politely.\n---\n\n# Greeter\n\nSay hi.\n"
OTHER_MD = GOOD_MD.replace(b"name: greeter", b"name: other")


class Reply:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers  # names in lower case, as the ASGI server sends them
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode()

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """Drives the ASGI app like a browser: cookies kept, redirects followed on request."""

    def __init__(self, app: Console) -> None:
        self.app = app
        self.http = TestClient(app, follow_redirects=False)
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    def cookie_header(self) -> dict[str, str]:
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes = b"",
        content_type: str = "",
        headers: dict[str, str] | None = None,
        follow: bool = True,
    ) -> Reply:
        sent = {**self.cookie_header(), **(headers or {})}
        if content_type:
            sent["Content-Type"] = content_type
        self.http.cookies.clear()  # this client keeps its own, to see what the app sets
        got = self.http.request(method, url, content=body, headers=sent)
        reply = Reply(
            got.status_code, [(k.lower(), v) for k, v in got.headers.multi_items()], got.content
        )
        for k, v in reply.headers:
            if k == "set-cookie":
                name, _, rest = v.partition("=")
                value = rest.split(";", 1)[0]
                if "Max-Age=0" in v:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = value
        html = (reply.header("Content-Type") or "").startswith("text/html")
        found = re.search(r'data-csrf="([^"]+)"', reply.text) if html else None
        if found:
            self.csrf = found.group(1)
        if follow and reply.status in (302, 303):
            return self.get(reply.header("Location") or "/")
        return reply

    def get(self, url: str, **kw: Any) -> Reply:
        return self.request("GET", url, **kw)

    def post(self, url: str, form: dict[str, str], *, csrf: bool = True, **kw: Any) -> Reply:
        data = {"csrf": self.csrf, **form} if csrf else form
        return self.request(
            "POST",
            url,
            body=urlencode(data).encode(),
            content_type="application/x-www-form-urlencoded",
            **kw,
        )

    def upload(self, url: str, form: dict[str, str], files: dict[str, tuple[str, bytes]]) -> Reply:
        boundary = uuid.uuid4().hex
        out = io.BytesIO()
        for k, v in {"csrf": self.csrf, **form}.items():
            out.write(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'.encode()
            )
            out.write(v.encode() + b"\r\n")
        for k, (name, data) in files.items():
            out.write(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"; '
                f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
            )
            out.write(data + b"\r\n")
        out.write(f"--{boundary}--\r\n".encode())
        return self.request(
            "POST",
            url,
            body=out.getvalue(),
            content_type=f"multipart/form-data; boundary={boundary}",
        )

    def sign_in(self, token: str = ADMIN) -> Reply:
        page = self.get("/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
        assert nonce
        return self.post("/login", {"nonce": nonce.group(1), "token": token}, csrf=False)


def example_files(name: str) -> dict[str, File]:
    root = EXAMPLES / name
    return {
        p.relative_to(root).as_posix(): File(p.read_bytes(), mode=p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(name="store")
def console_store() -> Iterator[skillfs.Store]:
    """A memory store with two shared skills (the other console tests use it too)."""
    s = skillfs.open_store(f"memory://{uuid.uuid4().hex[:10]}")
    s.publish(SHARED, "code-reviewer", example_files("code-reviewer"))
    s.publish(SHARED, "release-notes", example_files("release-notes"))
    yield s
    s.close()


@pytest.fixture
def tokens() -> Tokens:
    return Tokens(
        text=tokens_document(
            [("ops", ADMIN, ["*:admin"]), ("auditor", READER, [f"agent:{AGENT}:read"])],
            "receipts",
        )
    )


@pytest.fixture
def app(store: skillfs.Store, tokens: Tokens) -> Iterator[Console]:
    console = make_app(store, tokens)
    yield console
    console.close()


@pytest.fixture
def client(app: Console) -> Client:
    c = Client(app)
    c.sign_in()
    return c


def skill_url(skill: str, action: str = "", scope: Scope = SHARED) -> str:
    return "/" + scope.prefix + skill + "/" + action


def md_text(
    store: skillfs.Store, skill: str, scope: Scope = SHARED, version: int | None = None
) -> str:
    return store.read(scope, skill, "SKILL.md", version=version).decode()


# ---------------------------------------------------------------------- sign-in and CSRF


def test_pages_need_a_session(app: Console) -> None:
    c = Client(app)
    r = c.get("/agents/support-bot/", follow=False)
    assert r.status == 303 and r.header("Location") == "/login?next=/agents/support-bot/"
    assert c.request("POST", "/api/validate", follow=False).status == 401


def test_sign_in_with_a_token_and_out_again(app: Console) -> None:
    c = Client(app)
    assert "Unknown or revoked token" in c.sign_in("not-a-token-at-all").text
    home = c.sign_in()
    assert home.status == 200 and "support-bot" in home.text and "ops" in home.text
    assert "skillfs_session" in c.cookies
    out = c.post("/logout", {})
    assert "Sign in" in out.text and "skillfs_session" not in c.cookies
    assert c.get("/", follow=False).status == 303


def test_sign_in_form_needs_its_nonce(app: Console) -> None:
    c = Client(app)
    c.get("/login")
    r = c.post("/login", {"nonce": "forged", "token": ADMIN}, csrf=False)
    assert r.status == 403 and "skillfs_session" not in c.cookies


def test_sign_in_never_redirects_off_site(app: Console) -> None:
    c = Client(app)
    page = c.get("/login?next=//evil.example/x")
    nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
    assert nonce
    r = c.post(
        "/login",
        {"nonce": nonce.group(1), "token": ADMIN, "next": "https://evil.example/"},
        csrf=False,
        follow=False,
    )
    assert r.header("Location") == "/"
    session = next(v for k, v in r.headers if k == "set-cookie" and "skillfs_session=" in v)
    assert "HttpOnly" in session and "SameSite=Lax" in session


def test_every_post_needs_the_csrf_token(client: Client, store: skillfs.Store) -> None:
    before = store.manifest(SHARED, "code-reviewer").version
    r = client.post(skill_url("code-reviewer", "delete"), {"expected": str(before), "csrf": "x"})
    assert r.status == 403 and "CSRF" in r.text
    r = client.post(skill_url("code-reviewer", "delete"), {"expected": str(before)}, csrf=False)
    assert r.status == 403
    assert store.manifest(SHARED, "code-reviewer").version == before


def test_revoked_token_ends_the_session(app: Console, tokens: Tokens, store: skillfs.Store) -> None:
    c = Client(app)
    c.sign_in()
    assert c.get("/").status == 200
    tokens._config = tokens.config.model_copy(update={"principals": {}})
    assert c.get("/", follow=False).status == 303


def test_grants_decide_what_a_token_may_do(app: Console, store: skillfs.Store) -> None:
    c = Client(app)
    c.sign_in(READER)
    page = c.get(skill_url("code-reviewer", "files/SKILL.md"))
    assert page.status == 200 and "readonly" in page.text and 'id="save"' not in page.text
    version = store.manifest(SHARED, "code-reviewer").version
    r = c.post(
        skill_url("code-reviewer", "save"),
        {"path": "SKILL.md", "content": "x", "base": str(version), "expected": str(version)},
    )
    assert r.status == 403 and "may not write" in r.text
    assert store.manifest(SHARED, "code-reviewer").version == version
    assert c.get("/markets/team/skills/").status == 403


def _scoped_client(store: skillfs.Store, grants: list[str]) -> Client:
    token = "scoped-token-0123456789"
    tokens = Tokens(text=tokens_document([("scoped", token, grants)], "receipts"))
    c = Client(make_app(store, tokens))
    c.sign_in(token)
    return c


def test_pages_offer_only_what_the_token_may_do(store: skillfs.Store) -> None:
    for user in ("alice", "bob"):
        store.publish(Scope.user(AGENT, user), "greeter", {"SKILL.md": GOOD_MD})
    store.publish(Scope.market("team"), "greeter", {"SKILL.md": GOOD_MD})
    reader = _scoped_client(store, [f"agent:{AGENT}/shared:read", f"agent:{AGENT}/user:alice:read"])
    home = reader.get("/").text
    users = re.search(r"<b>([^<]*)</b><span>users with skills</span>", home)
    assert users and users.group(1) == "1"  # alice; bob's scope is not the token's to count
    assert "team" not in home and "None you can read." in home  # a market it may not read
    assert "none you can read" in home  # the sidebar's markets
    agent = reader.get(f"/agents/{AGENT}/").text
    assert "Manage shared skills" not in agent and "bob" not in agent and "alice" in agent
    skill = reader.get(skill_url("code-reviewer")).text
    assert "Create override" not in skill and "Override for one user" not in skill
    assert "bob" not in skill

    # a token that may write alice's scope is offered the override, for alice only
    writer = _scoped_client(
        store, [f"agent:{AGENT}/shared:read", f"agent:{AGENT}/user:alice:write"]
    )
    skill = writer.get(skill_url("code-reviewer")).text
    assert "Create override" in skill
    assert '<option value="alice">' in skill and '<option value="bob">' not in skill
    assert "Manage shared skills" not in writer.get(f"/agents/{AGENT}/").text

    # an admin sees everything there is
    admin = _scoped_client(store, ["*:admin"])
    home = admin.get("/").text
    users = re.search(r"<b>([^<]*)</b><span>users with skills</span>", home)
    assert users and users.group(1) == "2" and "team" in home
    assert "Manage shared skills" in admin.get(f"/agents/{AGENT}/").text
    assert '<option value="bob">' in admin.get(skill_url("code-reviewer")).text


def test_one_severity_and_counted_nouns_everywhere(client: Client, store: skillfs.Store) -> None:
    md = b"---\nname: other\ndescription: Greets people.\n---\n\nSay hi.\n"
    store.publish(SHARED, "greeter", {"SKILL.md": md})  # usable, with one error finding
    skill = client.get(skill_url("greeter")).text
    assert '<span class="badge error"' in skill and ">1 error</span>" in skill
    assert "· 1 file ·" in skill and "1 files" not in skill
    view = client.get(f"/agents/{AGENT}/users/alice/").text
    badge = re.search(r'<span class="badge (\w+)"[^>]*>([^<]*)</span>', view)
    assert badge and badge.groups() == ("error", "1 error")  # the same as on the skill page
    assert "warning" not in view
    history = client.get(skill_url("greeter", "history")).text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", history)  # the zone is shown


def test_pages_send_security_headers(client: Client) -> None:
    r = client.get("/")
    csp = r.header("Content-Security-Policy") or ""
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert r.header("X-Content-Type-Options") == "nosniff"
    assert "no-store" in (r.header("Cache-Control") or "")


# ---------------------------------------------------------------------- browsing and escaping


def test_browse_agents_scopes_skills_files(client: Client) -> None:
    assert "code-reviewer" in client.get("/agents/support-bot/").text
    scope = client.get("/agents/support-bot/shared/skills/")
    assert "release-notes" in scope.text and "valid" in scope.text
    skill = client.get(skill_url("code-reviewer"))
    assert "checklist.md" in skill.text and "diff-stats.sh" in skill.text and "755" in skill.text
    editor = client.get(skill_url("code-reviewer", "files/references/checklist.md"))
    assert editor.status == 200 and 'id="content"' in editor.text


def test_the_skill_page_shows_the_frontmatter_as_mcp_hosts_read_it(
    client: Client, store: skillfs.Store
) -> None:
    """The typed reading beside the textual one (docs/validation.md, "Two readings"), and
    why a skill with a YAML date is left out of MCP's skills/list."""
    typed = b"---\nname: typed\ndescription: Typed values.\nversion: 2.0\nlive: false\n---\nB\n"
    dated = b"---\nname: dated\ndescription: A date.\nupdated: 2025-10-20\n---\nB\n"
    store.publish(SHARED, "typed", {"SKILL.md": typed})
    store.publish(SHARED, "dated", {"SKILL.md": dated})
    page = unescape(client.get(skill_url("typed")).text)
    panel = page[page.index('id="typed"') :]
    assert "<code>2.0</code>" in panel and "<code>false</code>" in panel
    assert "<dd>2.0</dd>" in page  # the textual reading, as written
    page = unescape(client.get(skill_url("dated")).text)
    assert "Left out of MCP's skills/list:" in page and "a YAML date" in page


def test_skill_content_is_escaped_everywhere(client: Client, store: skillfs.Store) -> None:
    evil = "<script>alert(1)</script>"
    md = f"---\nname: evil\ndescription: '{evil}'\n---\n\n</textarea>{evil}\n".encode()
    store.publish(SHARED, "evil", {"SKILL.md": md, "references/<img src=x>.md": evil.encode()})
    for url in [
        "/agents/support-bot/",
        "/agents/support-bot/shared/skills/",
        skill_url("evil"),
        skill_url("evil", "files/SKILL.md"),
        skill_url("evil", "history"),
        "/agents/support-bot/users/alice/",
    ]:
        page = client.get(url).text
        assert "<script>alert" not in page, url
        assert "<img src=x>" not in page, url
    editor = client.get(skill_url("evil", "files/SKILL.md")).text
    assert editor.count("</textarea>") == 1  # the content's own one is escaped
    assert "&lt;/textarea&gt;&lt;script&gt;" in editor


def test_downloads_are_attachments(client: Client, store: skillfs.Store) -> None:
    store.publish(SHARED, "web", {"SKILL.md": GOOD_MD, "assets/page.html": b"<script>1</script>"})
    r = client.get(skill_url("web", "raw/assets/page.html"))
    assert r.body == b"<script>1</script>"
    assert r.header("Content-Type") == "application/octet-stream"
    assert (r.header("Content-Disposition") or "").startswith("attachment;")


def test_binary_files_upload_and_download(client: Client, store: skillfs.Store) -> None:
    version = store.manifest(SHARED, "code-reviewer").version
    blob = bytes(range(256)) * 40
    r = client.upload(
        skill_url("code-reviewer", "upload"),
        {"expected": str(version), "dir": "assets"},
        {"file": ("logo.png", blob)},
    )
    assert r.status == 200 and "Uploaded assets/logo.png" in r.text
    assert store.read(SHARED, "code-reviewer", "assets/logo.png") == blob
    page = client.get(skill_url("code-reviewer", "files/assets/logo.png"))
    assert "Binary or large file" in page.text
    assert client.get(skill_url("code-reviewer", "raw/assets/logo.png")).body == blob


def test_unknown_skill_and_bad_paths_get_clear_pages(client: Client) -> None:
    r = client.get(skill_url("no-such-skill"))
    assert r.status == 404 and "does not exist" in r.text and "code-reviewer" in r.text
    r = client.get("/agents/_reserved/")
    assert r.status == 400 and "reserved" in r.text
    assert client.get("/nowhere/at/all").status == 404
    assert client.get(skill_url("code-reviewer", "files/nope.md")).status == 200  # a new file


def test_store_down_is_reported_as_such(tokens: Tokens) -> None:
    store = skillfs.open_store("redis://127.0.0.1:1/0", retry_for=0.2)
    app = make_app(store, tokens)
    c = Client(app)
    c.sign_in()
    r = c.get("/agents/support-bot/shared/skills/")
    assert r.status == 503 and "The store is not answering" in r.text
    assert "127.0.0.1:1" in r.text
    assert "Nothing was written" not in r.text and "reload this page" in r.text  # only a GET
    r = c.post(skill_url("code-reviewer", "delete"), {"expected": "1"})
    assert r.status == 503 and "Nothing was written." in r.text
    app.close()


def test_a_version_not_kept_links_to_the_history_page(client: Client, store: skillfs.Store) -> None:
    r = client.get(skill_url("code-reviewer", "zip?version=9"))
    assert r.status == 404
    assert "version 9 of shared:support-bot/code-reviewer is not kept" in r.text
    assert "`history`" not in r.text and "Nothing was written" not in r.text  # not a CLI page
    history = skill_url("code-reviewer", "history")
    assert f'<a class="btn primary" href="{history}">History of code-reviewer</a>' in r.text
    unknown = client.get(skill_url("no-such-skill", "zip?version=2"))
    assert unknown.status == 404 and "History of" not in unknown.text


# ---------------------------------------------------------------------- editing


def _save(client: Client, skill: str, content: str, version: int, **extra: str) -> Reply:
    form = {"path": "SKILL.md", "content": content, "base": str(version), "expected": str(version)}
    return client.post(skill_url(skill, "save"), {**form, **extra})


def test_save_sends_the_loaded_version(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "code-reviewer")
    text = md_text(store, "code-reviewer").replace("# Code reviewer", "# Code reviewer (v2)")
    r = _save(client, "code-reviewer", text.replace("\n", "\r\n"), m.version)
    assert r.status == 200 and f"is now version {m.version + 1}" in r.text
    assert md_text(store, "code-reviewer") == text  # browsers' CRLF back to the file's LF
    after = store.manifest(SHARED, "code-reviewer")
    assert after.files["scripts/diff-stats.sh"].mode == 0o755  # other files untouched


def test_off_spec_save_needs_save_anyway(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "code-reviewer")
    bad = md_text(store, "code-reviewer").replace("name: code-reviewer", "name: Code_Reviewer")
    r = _save(client, "code-reviewer", bad, m.version)
    assert r.status == 422 and "Save anyway" in r.text and "Not saved" in r.text
    assert "Code_Reviewer" in unescape(r.text)  # the operator's text is kept
    assert store.manifest(SHARED, "code-reviewer").version == m.version
    r = _save(client, "code-reviewer", bad, m.version, force="1")
    assert r.status == 200
    stored = store.manifest(SHARED, "code-reviewer")
    assert stored.version == m.version + 1 and stored.errors


def test_validate_api_finds_errors_with_lines(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "code-reviewer")
    body = {
        "scope": str(SHARED),
        "skill": "code-reviewer",
        "path": "SKILL.md",
        "base": m.version,
    }

    def validate(content: str, csrf: bool = True) -> Reply:
        headers = {"X-CSRF-Token": client.csrf} if csrf else {}
        data = json.dumps({**body, "content": content}).encode()
        return client.request(
            "POST", "/api/validate", body=data, content_type="application/json", headers=headers
        )

    result = validate("---\nname: code-reviewer\ndescription: ok\nfoo: 1\n---\nbody\n").json()
    assert result["errors"] == 1
    assert result["findings"][0]["line"] == 4 and "foo" in result["findings"][0]["message"]
    valid = "---\nname: code-reviewer\ndescription: ok\n---\nbody\n"
    assert validate(valid).json()["errors"] == 0
    assert validate(valid, csrf=False).status == 403

    def raw(data: bytes) -> Reply:
        return client.request(
            "POST", "/api/validate", body=data, content_type="application/json",
            headers={"X-CSRF-Token": client.csrf},
        )  # fmt: skip

    # bad requests are answered in JSON, saying what is wrong (outside testing: a 500 and
    # HTML pages before)
    text = json.dumps({**body, "content": valid})
    for base in ("1e400", '"abc"', "-1", "true"):
        r = raw(text.replace(f'"base": {m.version}', f'"base": {base}').encode())
        assert r.status == 400 and "the version the edit began from" in r.json()["error"]
    r = raw(json.dumps({**body, "skill": "nope", "content": valid}).encode())
    assert r.status == 404 and "nope" in r.json()["error"]
    assert raw(b"[]").status == 400 and "JSON object" in raw(b"[]").json()["error"]
    r = raw(b"{not json")  # outside testing: this one was an HTML page
    assert r.status == 400 and "does not parse" in r.json()["error"]


def test_a_wrong_method_is_told_the_methods_the_page_takes(client: Client) -> None:
    """Outside testing: a 405 carried no `Allow` header (RFC 9110 §15.5.6)."""
    r = client.request("GET", "/logout", follow=False)
    assert r.status == 405 and r.header("allow") == "POST"
    r = client.request("DELETE", skill_url("code-reviewer"), follow=False)
    assert r.status == 405 and "GET" in (r.header("allow") or "")


def test_a_stopped_save_shows_what_changed_then_merges_or_overwrites(
    client: Client, store: skillfs.Store
) -> None:
    """ "Stop and show me" (`edit_file(on_conflict=FAIL)`): nothing is written and the page
    shows their change; **Merge with version N** sends the edit again under the merge policy,
    **Overwrite with my text** under the retry policy, both from the version loaded."""
    loaded = store.manifest(SHARED, "code-reviewer")
    original = md_text(store, "code-reviewer")
    theirs = original.replace("## Steps", "## Steps (theirs)")
    store.publish(
        SHARED,
        "code-reviewer",
        {**example_files("code-reviewer"), "SKILL.md": theirs.encode()},
        expected_version=loaded.version,
    )
    current = loaded.version + 1
    mine = original.replace("# Code reviewer", "# Code reviewer (mine)")
    r = _save(client, "code-reviewer", mine, loaded.version, on_conflict="fail")
    assert r.status == 409 and 'data-kind="stopped"' in r.text
    assert "changed while you were editing" in r.text and "Nothing was saved" in r.text
    assert "## Steps (theirs)" in unescape(r.text)  # the diff of what they changed
    assert f">Merge with version {current}<" in r.text and "Overwrite with my text" in r.text
    assert ">Save<" not in r.text and _editor_text(r) == mine
    assert md_text(store, "code-reviewer") == theirs
    fields = _form_fields(r)  # sent again on the version loaded, as it was
    assert fields["expected"] == fields["base"] == str(loaded.version)
    assert "on_conflict" not in fields and "mine" not in fields
    merged = client.post(skill_url("code-reviewer", "save"), fields)
    both = theirs.replace("# Code reviewer", "# Code reviewer (mine)")
    assert merged.status == 200 and md_text(store, "code-reviewer") == both
    assert f"on top of version {current}" in merged.text and "their changes kept" in merged.text

    # stopped again (their version is now `both`), then overwritten with the operator's text
    r = _save(client, "code-reviewer", mine, loaded.version, on_conflict="fail")
    assert r.status == 409 and 'data-kind="stopped"' in r.text
    r = client.post(skill_url("code-reviewer", "save"), {**_form_fields(r), "use": "mine"})
    assert r.status == 200 and md_text(store, "code-reviewer") == mine
    assert "your text replaced theirs of SKILL.md" in r.text
    assert store.manifest(SHARED, "code-reviewer").version == current + 2


def test_a_bad_conflict_policy_is_refused(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "code-reviewer")
    r = _save(client, "code-reviewer", "x", m.version, on_conflict="retry")
    assert r.status == 400 and "merge or fail" in r.text
    assert store.manifest(SHARED, "code-reviewer").version == m.version


@pytest.mark.parametrize("policy", ["merge", "fail"])
def test_a_change_to_another_file_is_kept_under_either_policy(
    client: Client, store: skillfs.Store, policy: str
) -> None:
    """Their change to another file never stops a save: it is written on their version."""
    loaded = store.manifest(SHARED, "code-reviewer")
    files = example_files("code-reviewer")
    files["references/checklist.md"] = File(b"their checklist\n")
    store.publish(SHARED, "code-reviewer", files, expected_version=loaded.version)
    mine = md_text(store, "code-reviewer") + "\nmore\n"
    r = _save(client, "code-reviewer", mine, loaded.version, on_conflict=policy)
    assert r.status == 200 and f"on top of version {loaded.version + 1}" in r.text
    assert store.read(SHARED, "code-reviewer", "references/checklist.md") == b"their checklist\n"
    assert md_text(store, "code-reviewer") == mine


def test_a_file_that_is_no_longer_text_is_overwritten_or_reloaded(
    client: Client, store: skillfs.Store
) -> None:
    """Their version of the file is not text: the merge policy cannot merge it, so nothing is
    written and the page's one button overwrites it (the retry policy)."""
    loaded = store.manifest(SHARED, "code-reviewer")
    files = example_files("code-reviewer")
    files["references/checklist.md"] = File(b"\xff\xfe not text")
    store.publish(SHARED, "code-reviewer", files, expected_version=loaded.version)
    form = {"path": "references/checklist.md", "content": "mine\n", "base": str(loaded.version),
            "expected": str(loaded.version)}  # fmt: skip
    r = client.post(skill_url("code-reviewer", "save"), form)
    assert r.status == 409 and 'data-kind="unmerged"' in r.text
    assert "cannot be merged as text" in r.text and 'id="overwrite"' not in r.text
    assert re.search(r'id="save"[^>]*name="use" value="mine"[^>]*>Overwrite with my text<', r.text)
    checklist = "references/checklist.md"
    assert store.read(SHARED, "code-reviewer", checklist) == b"\xff\xfe not text"
    fields = _form_fields(r)
    r = client.post(skill_url("code-reviewer", "save"), {**fields, "use": "mine"})
    assert r.status == 200 and store.read(SHARED, "code-reviewer", checklist) == b"mine\n"


@pytest.mark.parametrize("policy", ["merge", "fail"])
def test_a_skill_deleted_meanwhile_is_recreated_or_left(
    client: Client, store: skillfs.Store, policy: str
) -> None:
    loaded = store.manifest(SHARED, "release-notes")
    store.delete(SHARED, "release-notes")
    mine = md_text(store, "release-notes", version=loaded.version) + "mine\n"
    r = _save(client, "release-notes", mine, loaded.version, on_conflict=policy)
    assert r.status == 409 and "was deleted while you were editing" in r.text
    assert ">Re-create with my text<" in r.text and "Leave it deleted" in r.text
    assert "release-notes" not in store.skills(SHARED)
    fields = _form_fields(r)
    assert fields["expected"] == "0" and fields["content"] == mine
    r = client.post(skill_url("release-notes", "save"), {**fields, "message": "still needed"})
    assert r.status == 200 and md_text(store, "release-notes") == mine
    now = store.manifest(SHARED, "release-notes")
    assert set(now.files) == set(loaded.files) and now.message == "still needed"


def test_new_file_and_remove_file(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "release-notes")
    page = client.get(skill_url("release-notes", "files?path=references/extra.md"))
    assert "new file" in page.text
    r = client.post(
        skill_url("release-notes", "save"),
        {
            "path": "references/extra.md",
            "content": "extra\n",
            "base": str(m.version),
            "expected": str(m.version),
        },
    )
    assert r.status == 200
    assert store.read(SHARED, "release-notes", "references/extra.md") == b"extra\n"
    r = client.post(
        skill_url("release-notes", "rmfile"),
        {"path": "references/extra.md", "expected": str(m.version + 1)},
    )
    assert (
        r.status == 200
        and "references/extra.md" not in store.manifest(SHARED, "release-notes").files
    )
    r = client.post(
        skill_url("release-notes", "rmfile"), {"path": "SKILL.md", "expected": str(m.version + 2)}
    )
    assert r.status == 422 and "Do it anyway" in r.text  # no SKILL.md breaks the spec


# ---------------------------------------------------------------------- skills


#: New skill's instructions, the template's placeholder lines replaced.
OWN = "Use it when a customer asks for a refund.\n\n## Instructions\n\n1. Check the order.\n"


def test_create_from_template(client: Client, store: skillfs.Store) -> None:
    r = client.post(
        "/agents/support-bot/shared/skills/",
        {"op": "new", "name": "refund-policy", "description": "Explains refunds: when, how much.",
         "instructions": OWN},
    )  # fmt: skip
    assert r.status == 200 and "Created refund-policy" in r.text
    m = store.manifest(SHARED, "refund-policy")
    assert m.version == 1 and not m.findings
    assert m.frontmatter and m.frontmatter["description"] == "Explains refunds: when, how much."
    assert md_text(store, "refund-policy").endswith("# Refund policy\n\n" + OWN)
    again = client.post(
        "/agents/support-bot/shared/skills/",
        {"op": "new", "name": "refund-policy", "description": "x", "instructions": OWN},
    )
    assert again.status == 409
    bad = client.post(
        "/agents/support-bot/shared/skills/",
        {"op": "new", "name": "Bad_Name", "description": "x", "instructions": OWN},
    )
    assert bad.status == 422 and "Do it anyway" in bad.text
    assert "Bad_Name" not in store.skills(SHARED)
    forced = client.post(
        "/agents/support-bot/shared/skills/",
        {"op": "new", "name": "Bad_Name", "description": "x", "force": "1"},
    )
    assert forced.status == 200 and "Bad_Name" in store.skills(SHARED)


def test_new_skill_refuses_the_templates_text_unless_a_draft(
    client: Client, store: skillfs.Store
) -> None:
    """The template's placeholder instructions never go live or canary by a plain click
    (skillfs.spec.template, as `skillfs edit` refuses them); "Do it anyway" writes them, and a
    draft may hold them: it lands in the review queue, nobody sees it."""
    scope = "/" + SHARED.prefix
    form = {"op": "new", "name": "half-done", "description": "Half done.", "message": "start"}
    for how in ("live", "canary"):
        r = client.post(scope, {**form, "create": how, "users": "alice"})
        assert r.status == 422, (how, r.text[-1500:])
        said = unescape(r.text)
        assert "half-done still holds the template's text" in said
        assert "is still the template's placeholder ('1. First step.')" in said
        assert "Do it anyway" in said and 'value="start"' in r.text  # the message kept
    assert "half-done" not in store.skills(SHARED)
    assert store.drafts.list(SHARED) == []
    r = client.post(scope, {**form, "create": "draft"})
    assert r.status == 200 and "Proposed half-done as a draft" in r.text
    (draft,) = store.drafts.list(SHARED)
    assert draft.name == "half-done" and "half-done" not in store.skills(SHARED)
    assert store.versions(SHARED, "_drafts/half-done")[0].message == "start"
    r = client.post(scope, {**form, "name": "canary-one", "instructions": OWN, "create": "canary",
                            "users": "alice", "percent": "10"})  # fmt: skip
    assert r.status == 200 and "Staged canary-one" in r.text, r.text[-1500:]
    m = store.manifest(SHARED, "canary-one")
    assert m.candidate is not None and m.candidate.rollout.users == ("alice",)
    assert m.candidate.rollout.fraction == 0.1
    r = client.post(scope, {**form, "create": "live", "force": "1"})
    assert r.status == 200 and "1. First step." in md_text(store, "half-done")
    assert client.post(scope, {**form, "name": "x", "create": "everyone"}).status == 400


def _zip(entries: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            if modes and name in modes:
                info.external_attr = modes[name] << 16
            z.writestr(info, data)
    return buf.getvalue()


def test_upload_zip_of_a_skill_directory(client: Client, store: skillfs.Store) -> None:
    data = _zip(
        {
            "greeter/SKILL.md": GOOD_MD,
            "greeter/scripts/run.sh": b"#!/bin/sh\necho hi\n",
            "__MACOSX/greeter/._SKILL.md": b"junk",
        },
        {"greeter/scripts/run.sh": 0o100755},
    )
    r = client.upload(
        "/agents/support-bot/shared/skills/", {"op": "import"}, {"archive": ("g.zip", data)}
    )
    assert r.status == 200 and "Imported greeter" in r.text
    m = store.manifest(SHARED, "greeter")
    assert sorted(m.files) == ["SKILL.md", "scripts/run.sh"]
    assert m.files["scripts/run.sh"].mode == 0o755
    # the same files again: nothing to write (`store.edits.import_skills` leaves them)
    again = client.upload(
        "/agents/support-bot/shared/skills/", {"op": "import"}, {"archive": ("g.zip", data)}
    )
    assert again.status == 200 and "greeter already held these files" in again.text
    assert store.manifest(SHARED, "greeter").version == 1
    # the zip moved on and nobody changed greeter: the upload updates what it wrote
    changed = _zip({"greeter/SKILL.md": GOOD_MD + b"\nMore.\n"})
    r = client.upload(
        "/agents/support-bot/shared/skills/", {"op": "import"}, {"archive": ("g.zip", changed)}
    )
    assert r.status == 200 and store.manifest(SHARED, "greeter").version == 2
    # another operator edits greeter: the default policy, update, writes nothing, naming them
    store.publish(SHARED, "greeter", {"SKILL.md": GOOD_MD + b"\nB's fix.\n"}, actor="operator-b")
    newer = _zip({"greeter/SKILL.md": GOOD_MD + b"\nEven more.\n", "other/SKILL.md": OTHER_MD})
    before = store.revision("support-bot")
    refused = client.upload(
        "/agents/support-bot/shared/skills/", {"op": "import"}, {"archive": ("g.zip", newer)}
    )
    text = unescape(refused.text)
    assert refused.status == 409 and "Not possible now" in text
    assert "from zip:g.zip would overwrite 1 skill" in text
    assert "greeter (version 3 by operator-b)" in text and "Nothing was written" in text
    assert store.revision("support-bot") == before and "other" not in store.skills(SHARED)
    kept = client.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import", "policy": "keep"},
        {"archive": ("g.zip", newer)},
    )
    assert kept.status == 200 and "Imported other" in kept.text and "kept greeter" in kept.text
    assert store.manifest(SHARED, "greeter").version == 3 and "other" in store.skills(SHARED)
    replaced = client.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import", "policy": "replace"},
        {"archive": ("g.zip", newer)},
    )
    assert replaced.status == 200 and store.manifest(SHARED, "greeter").version == 4
    assert "already held these files" in replaced.text  # other: the same files
    bad = client.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import", "policy": "overwrite"},
        {"archive": ("g.zip", newer)},
    )
    assert bad.status == 400 and "update, keep, replace" in bad.text


def test_a_typo_in_an_agent_or_user_asks_did_you_mean(client: Client, store: skillfs.Store) -> None:
    """Outside testing: `suport-bot` in "Open or start an agent" opened an empty new agent, and
    a typo'd user a full view. An id close to one the store holds asks first, as the CLI's
    `ls` does (skillfs.util.suggest); an id like none starts (or shows) it at once."""
    store.publish(Scope.user(AGENT, "alice"), "greeter", {"SKILL.md": GOOD_MD})
    r = client.get("/agents?agent=suport-bot")
    said = unescape(r.text)
    assert r.status == 200 and "No agent “suport-bot” yet. Did you mean support-bot?" in said
    assert 'href="/agents/support-bot/" id="use-near"' in r.text
    assert 'href="/agents/suport-bot/shared/skills/" id="use-typed"' in r.text
    assert "Start agent suport-bot" in said
    for typed, to in (("support-bot", "/agents/support-bot/shared/skills/"),
                      ("billing-agent", "/agents/billing-agent/shared/skills/")):  # fmt: skip
        r = client.get(f"/agents?agent={typed}", follow=False)
        assert (r.status, r.header("Location")) == (303, to)
    r = client.get(f"/agents/{AGENT}/users?user=alcie")
    assert r.status == 200 and "No user “alcie” yet. Did you mean alice?" in unescape(r.text)
    assert f'href="/agents/{AGENT}/users/alice/" id="use-near"' in r.text
    r = client.get(f"/agents/{AGENT}/users?user=bob", follow=False)
    assert (r.status, r.header("Location")) == (303, f"/agents/{AGENT}/users/bob/")


def test_a_zip_holding_a_folder_takes_the_typed_name(client: Client, store: skillfs.Store) -> None:
    """Outside testing: the typed name was ignored for a zip holding a folder, which went to
    the folder's name (an existing skill there). The one folder takes the typed name, its
    SKILL.md's `name` following as a rename's; a name typed for several skills is refused."""
    scope = "/" + SHARED.prefix
    folder = {"greeter/SKILL.md": GOOD_MD, "greeter/notes.md": b"n\n"}
    r = client.upload(
        scope, {"op": "import", "name": "hello"}, {"archive": ("z.zip", _zip(folder))}
    )
    assert r.status == 200 and "Imported hello from z.zip" in r.text
    assert sorted(store.manifest(SHARED, "hello").files) == ["SKILL.md", "notes.md"]
    assert "name: hello\n" in md_text(store, "hello") and "greeter" not in store.skills(SHARED)
    two = {**folder, "other/SKILL.md": GOOD_MD.replace(b"greeter", b"other")}
    r = client.upload(scope, {"op": "import", "name": "hi"}, {"archive": ("z.zip", _zip(two))})
    assert r.status == 400 and "Nothing was written" in r.text
    assert "the zip holds 2 skills (greeter, other), so it cannot be named 'hi'" in unescape(r.text)
    assert "hi" not in store.skills(SHARED)


def test_hidden_directories_are_no_skills_in_a_zip_nor_in_the_store(
    client: Client, store: skillfs.Store
) -> None:
    """A zip's `.git/` or `_build/` is left out, as an import from disk leaves it out; a skill
    named so is refused on every surface, since no worker would see it (outside testing:
    `.git` was imported as a skill, listed with an error, and export wrote it)."""
    found = read_zip(
        _zip({".git/SKILL.md": GOOD_MD, "_build/x": b"x", "greeter/SKILL.md": GOOD_MD}),
        ZipLimits(),
    )
    assert list(found) == ["greeter"]
    with pytest.raises(InvalidPath, match="a name starting with '_' or '\\.' is a directory"):
        store.publish(SHARED, "_foo", {"SKILL.md": GOOD_MD})
    r = client.post(
        "/agents/support-bot/shared/skills/", {"op": "new", "name": ".git2", "force": "1"}
    )
    assert r.status == 400 and "starting with" in unescape(r.text)
    assert store.skills(SHARED) == ["code-reviewer", "release-notes"]


@pytest.mark.parametrize(
    "name", ["ok\nnext", "tab\there", "a\u202egnp.exe", "bell\x07", "nel\x85x"]
)
def test_a_name_that_reads_otherwise_is_refused(
    client: Client, store: skillfs.Store, name: str
) -> None:
    """A name and the same name with a line break after it looked alike in every table
    (outside testing): control characters, line breaks and text-direction overrides are
    refused in a new name, on every surface."""
    bad = next(c for c in name if not c.isprintable())
    with pytest.raises(InvalidPath, match=rf"holds U\+{ord(bad):04X}"):
        store.publish(SHARED, name, {"SKILL.md": GOOD_MD})
    r = client.post("/agents/support-bot/shared/skills/", {"op": "new", "name": name, "force": "1"})
    assert r.status == 400 and "control character" in unescape(r.text)
    assert store.skills(SHARED) == ["code-reviewer", "release-notes"]


def test_a_file_path_that_reads_otherwise_is_refused(client: Client, store: skillfs.Store) -> None:
    """Outside testing: the editor saved `notes\nmore.md`, then its page and download were
    a bare 404 (no route matches a line break). A new file's path follows the name rule;
    a file stored before it is still carried by edits of its skill."""
    version = store.manifest(SHARED, "code-reviewer").version
    r = client.post(
        skill_url("code-reviewer", "save"),
        {"path": "notes\nmore.md", "content": "x", "base": str(version), "expected": str(version)},
    )
    assert r.status == 400 and "holds U+000A" in unescape(r.text)
    r = client.upload(
        skill_url("code-reviewer", "upload"),
        {"expected": str(version), "dir": ""},
        {"file": ("a\x1b[31mred.txt", b"x")},
    )
    assert r.status == 400 and "holds U+001B" in unescape(r.text)
    assert store.manifest(SHARED, "code-reviewer").version == version
    legacy = store.manifest(SHARED, "code-reviewer").files["SKILL.md"]
    store.publish(SHARED, "old", {"SKILL.md": GOOD_MD})
    old = store.manifest(SHARED, "old")
    carried = {"SKILL.md": old.files["SKILL.md"], "tab\there.md": legacy}
    before_the_rule = old.model_copy(update={"version": 2, "files": carried})
    store.engine.commit(SHARED.domain, [CommitOp(scope=SHARED, manifest=before_the_rule, expect=1)])
    store.publish(SHARED, "old", {**carried, "new.md": b"y"})  # an edit carries it
    assert store.read(SHARED, "old", "tab\there.md") == store.read(
        SHARED, "code-reviewer", "SKILL.md"
    )
    # ...and a move of the skill (a rename: one commit); but a stored file copied or moved to
    # a new path is a new path (review: fsspec's cp and mv wrote any path that way)
    store.commit([Remove(SHARED, "old"), Put(SHARED, "renamed", {**carried, "new.md": b"y"})])
    for bad in ({"tab\tthere.md": legacy}, {"x\u202eevil.md": legacy}):
        with pytest.raises(InvalidPath, match="holds U\\+"):
            store.publish(SHARED, "renamed", {**carried, **bad})
        with pytest.raises(InvalidPath, match="holds U\\+"):
            store.publish(SHARED, "copy", {"SKILL.md": GOOD_MD, **bad})
    assert store.manifest(SHARED, "renamed").version == 1 and "copy" not in store.skills(SHARED)


def test_zip_download_round_trips(client: Client, store: skillfs.Store) -> None:
    r = client.get(skill_url("code-reviewer", "zip"))
    skills = read_zip(r.body, ZipLimits())
    original = example_files("code-reviewer")
    assert {p: (f.data, f.mode) for p, f in skills["code-reviewer"].items()} == {
        p: (f.data, f.mode) for p, f in original.items()
    }


def test_zip_slip_and_symlinks_are_refused(client: Client, store: skillfs.Store) -> None:
    for name in ["../evil/SKILL.md", "/etc/SKILL.md", "a\\..\\SKILL.md", "x/../../SKILL.md"]:
        with pytest.raises(InvalidPath):
            read_zip(_zip({name: GOOD_MD, "SKILL.md": GOOD_MD}), ZipLimits(), "x")
    link = _zip({"greeter/SKILL.md": GOOD_MD, "greeter/l": b"/etc/passwd"}, {"greeter/l": 0o120777})
    with pytest.raises(InvalidPath, match="symbolic link"):
        read_zip(link, ZipLimits())
    # a NUL in a member's name: Python's zipfile reads the name cut there, another path
    marked = _zip({"greeter/SKILL.md": GOOD_MD, "greeter/ok.md<NUL>.sh": b"x"})
    nul = marked.replace(b"<NUL>", b"\0NUL>")  # in both the local and the central header
    with pytest.raises(InvalidPath, match="holds a NUL character"):
        read_zip(nul, ZipLimits())
    r = client.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import"},
        {"archive": ("evil.zip", _zip({"../../x/SKILL.md": GOOD_MD}))},
    )
    assert r.status == 400 and ".." in r.text
    assert store.skills(SHARED) == ["code-reviewer", "release-notes"]


def test_zip_bombs_stop_at_the_limit() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("SKILL.md", GOOD_MD)
        z.writestr("big.bin", b"\0" * 5_000_000)
    assert len(buf.getvalue()) < 50_000
    with pytest.raises(TooLarge) as refused:
        read_zip(buf.getvalue(), ZipLimits(max_total_bytes=1_000_000), "greeter")
    said = str(refused.value)  # the limit, and where the zip passed it
    assert "more than 976.6 KiB, the store's limit for one skill" in said
    assert "'big.bin'" in said and "bytes left" not in said


def test_upload_over_the_request_limit_is_refused(store: skillfs.Store, tokens: Tokens) -> None:
    app = make_app(store, tokens, max_upload=10_000)
    c = Client(app)
    c.sign_in()
    r = c.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import"},
        {"archive": ("z.zip", b"0" * 20_000)},
    )
    assert r.status == 413 and "at most 10000 bytes" in r.text


def test_off_spec_zip_needs_import_anyway(client: Client, store: skillfs.Store) -> None:
    data = _zip({"SKILL.md": b"---\nname: other\ndescription: x\n---\n"})
    r = client.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import", "name": "greeter"},
        {"archive": ("g.zip", data)},
    )
    assert r.status == 422 and "Nothing was imported" in r.text
    assert "greeter" not in store.skills(SHARED)
    r = client.upload(
        "/agents/support-bot/shared/skills/",
        {"op": "import", "name": "greeter", "force": "1"},
        {"archive": ("g.zip", data)},
    )
    assert r.status == 200 and "greeter" in store.skills(SHARED)


def test_rename_is_one_commit_and_follows_the_name(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "release-notes")
    rev = store.revision(AGENT)
    assert rev is not None
    r = client.post(
        skill_url("release-notes", "rename"), {"new_name": "changelog", "expected": str(m.version)}
    )
    assert r.status == 200 and "Renamed release-notes to changelog" in r.text
    assert "release-notes" not in store.skills(SHARED)
    new = store.manifest(SHARED, "changelog")
    assert new.frontmatter and new.frontmatter["name"] == "changelog" and not new.errors
    others = {p: e for p, e in m.files.items() if p != "SKILL.md"}
    assert others and {p: e for p, e in new.files.items() if p != "SKILL.md"} == others
    changes = list(store.changes.follow(AGENT, rev, timeout=0.5))
    assert len({c.revision for c in changes}) == 1  # both halves in one revision
    taken = client.post(
        skill_url("changelog", "rename"),
        {"new_name": "code-reviewer", "expected": str(new.version)},
    )
    assert taken.status == 409 and "taken" in taken.text
    # a disabled skill renamed would be served again under its new name: refused
    store.governance.disable(SHARED, "changelog", reason="wrong dates")
    off = store.manifest(SHARED, "changelog")
    refused = client.post(
        skill_url("changelog", "rename"), {"new_name": "notes", "expected": str(off.version)}
    )
    assert refused.status == 409 and "is disabled (wrong dates)" in unescape(refused.text)
    assert "notes" not in store.skills(SHARED) and store.manifest(SHARED, "changelog").disabled


def test_delete_and_restore(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "release-notes")
    stale = client.post(skill_url("release-notes", "delete"), {"expected": str(m.version - 1)})
    assert stale.status == 409 and "release-notes" in store.skills(SHARED)
    r = client.post(skill_url("release-notes", "delete"), {"expected": str(m.version)})
    assert r.status == 200 and "Deleted release-notes" in r.text
    page = client.get(skill_url("release-notes"))
    assert "deleted" in page.text and f"Restore version {m.version}" in page.text
    r = client.post(
        skill_url("release-notes", "rollback"), {"version": str(m.version), "expected": "0"}
    )
    assert r.status == 200 and "release-notes" in store.skills(SHARED)


def test_per_user_override(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "code-reviewer")
    r = client.post(
        skill_url("code-reviewer", "override"), {"user": "alice", "expected": str(m.version)}
    )
    assert r.status == 200 and "Created alice" in r.text
    alice = Scope.user(AGENT, "alice")
    assert store.read(alice, "code-reviewer", "SKILL.md") == store.read(
        SHARED, "code-reviewer", "SKILL.md"
    )
    assert store.manifest(alice, "code-reviewer").files == m.files  # every file, mode and time
    shared_page = client.get(skill_url("code-reviewer"))
    assert "/agents/support-bot/users/alice/skills/code-reviewer/" in shared_page.text
    user_page = client.get(skill_url("code-reviewer", scope=alice))
    assert "Overrides the shared" in user_page.text and "Compare with shared" in user_page.text
    again = client.post(
        skill_url("code-reviewer", "override"), {"user": "alice", "expected": str(m.version)}
    )
    assert again.status == 409
    diff = client.get(skill_url("code-reviewer", "diff?base=shared", scope=alice))
    assert diff.status == 200 and "The two versions hold the same files" in diff.text


def test_override_from_a_users_skill_is_bad_input(client: Client, store: skillfs.Store) -> None:
    """An override copies a shared skill: asked on a user's skill, it is a 400 (bad input,
    as `store.edits.override` raises InvalidArgument for a scope not a user's), nothing
    written."""
    alice = Scope.user(AGENT, "alice")
    store.publish(alice, "greeter", {"SKILL.md": GOOD_MD})
    before = store.revision(AGENT)
    r = client.post(skill_url("greeter", "override", scope=alice), {"user": "bob"})
    assert r.status == 400 and "from an agent's shared skills" in unescape(r.text)
    assert store.revision(AGENT) == before


def test_history_diff_and_rollback(client: Client, store: skillfs.Store) -> None:
    v1 = store.manifest(SHARED, "code-reviewer").version
    text = md_text(store, "code-reviewer")
    _save(client, "code-reviewer", text.replace("## Steps", "## Steps to follow"), v1)
    history = client.get(skill_url("code-reviewer", "history"))
    assert f"v{v1 + 1}" in history.text and "Roll back to v1" in history.text
    diff = client.get(skill_url("code-reviewer", f"diff?a={v1}&b={v1 + 1}"))
    assert "−## Steps" in unescape(diff.text) and "+## Steps to follow" in unescape(diff.text)
    r = client.post(
        skill_url("code-reviewer", "rollback"), {"version": str(v1), "expected": str(v1 + 1)}
    )
    assert r.status == 200 and f"now version {v1 + 2}" in r.text
    assert md_text(store, "code-reviewer") == text


def test_user_view_shows_the_runtime_prompt(client: Client, store: skillfs.Store) -> None:
    alice = Scope.user(AGENT, "alice")
    store.publish(alice, "greeter", {"SKILL.md": GOOD_MD})
    store.publish(
        alice,
        "code-reviewer",
        {"SKILL.md": b"---\nname: code-reviewer\ndescription: Alice's <own>.\n---\n"},
    )
    page = client.get("/agents/support-bot/users/alice/")
    with skillfs.Skills(store, AGENT, "alice") as skills:
        prompt = skills.snapshot().prompt()
    block = re.search(r'<pre class="prompt" id="prompt-block">(.*?)</pre>', page.text, re.S)
    assert block and unescape(block.group(1)) == prompt
    assert "Alice&#39;s &amp;lt;own&amp;gt;." in page.text  # XML-escaped, then HTML-escaped
    assert "shadows shared:support-bot" in page.text
    redirect = client.get("/agents/support-bot/users/?user=alice", follow=False)
    assert redirect.header("Location") == "/agents/support-bot/users/alice/"


# ---------------------------------------------------------------------- live updates


def sse_events(chunks: Iterator[bytes]) -> Iterator[str]:
    """The events (and comments) of a Server-Sent Events body, one at a time as they come."""
    buffer = ""
    for chunk in chunks:
        buffer += chunk.decode()
        while "\n\n" in buffer:
            event, buffer = buffer.split("\n\n", 1)
            yield event + "\n\n"


def test_events_stream_revisions_as_they_commit(
    client: Client, app: Console, store: skillfs.Store
) -> None:
    url = "/events?domain=agents/support-bot"
    with client.http.stream("GET", url, headers=client.cookie_header()) as r:
        stream = sse_events(r.iter_raw())
        assert next(stream) == "retry: 3000\n\n"
        first = next(stream)
        assert first.startswith("event: revision")

        def write_soon() -> None:
            store.publish(SHARED, "greeter", {"SKILL.md": GOOD_MD})

        threading.Timer(0.2, write_soon).start()
        change = next(stream)
        assert change.startswith("event: change")
        data = json.loads(change.split("data: ", 1)[1])
        assert data["skill"] == "greeter" and data["op"] == "put" and data["scope"] == str(SHARED)
        revision = store.revision(AGENT)
        assert revision is not None and data["revision"]["counter"] == revision.counter
        app.close()
        assert "".join(stream) in ("", ": keep-alive\n\n")  # ends once the console closes


@pytest.mark.timeout(30)  # a change dropped would leave the stream waiting
@pytest.mark.parametrize("engine", ["sqlite", "redis", "etcd"])
def test_events_stream_every_change_of_one_commit(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path, tokens: Tokens
) -> None:
    """A commit's changes share its revision: each is streamed (the stream showed the first
    of a rename or of a two-skill commit and dropped the rest as already shown)."""
    from tests.stores import url_for

    real = skillfs.open_store(url_for(request, engine, tmp_path))
    real.publish(SHARED, "greeter", {"SKILL.md": GOOD_MD})  # the store's epoch begun
    app = make_app(real, tokens)
    try:
        c = Client(app)
        c.sign_in()
        with c.http.stream(
            "GET", "/events?domain=agents/support-bot", headers=c.cookie_header()
        ) as r:
            stream = sse_events(r.iter_raw())
            assert next(stream) == "retry: 3000\n\n"
            assert next(stream).startswith("event: revision")

            def write_soon() -> None:
                md = GOOD_MD.replace(b"greeter", b"{}")
                real.commit(
                    [
                        skillfs.Put(SHARED, n, {"SKILL.md": md.replace(b"{}", n.encode())})
                        for n in ("one", "two")
                    ]
                )
                real.edits.rename(SHARED, "one", "uno")

            threading.Timer(0.2, write_soon).start()
            got = []
            for event in stream:
                if event.startswith("event: change"):
                    data = json.loads(event.split("data: ", 1)[1])
                    got.append((data["op"], data["skill"], data["revision"]["counter"]))
                if len(got) == 4:
                    break
            assert sorted(got[:2]) == [("put", "one", got[0][2]), ("put", "two", got[0][2])]
            assert sorted(got[2:]) == [("put", "uno", got[2][2]), ("remove", "one", got[2][2])]
            assert got[2][2] > got[0][2]
    finally:
        app.close()
        real.close()


@pytest.mark.parametrize("engine", ["sqlite", "redis", "etcd"])
def test_save_and_conflict_on_real_engines(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path, tokens: Tokens
) -> None:
    """The console only uses the Store API, so one round of save and conflict per engine."""
    from tests.stores import url_for

    real = skillfs.open_store(url_for(request, engine, tmp_path))
    app = make_app(real, tokens)
    try:
        real.publish(SHARED, "code-reviewer", example_files("code-reviewer"))
        c = Client(app)
        c.sign_in()
        text = md_text(real, "code-reviewer")
        assert _save(c, "code-reviewer", text + "\nv2\n", 1).status == 200
        assert _save(c, "code-reviewer", text + "\nstale\n", 1).status == 409
        assert md_text(real, "code-reviewer") == text + "\nv2\n"
        page = c.get("/agents/support-bot/users/alice/").text
        assert "<skill-id>code-reviewer</skill-id>" in unescape(page)
    finally:
        app.close()
        real.close()


# ---------------------------------------------------------------------- long lists (issue 15)


def _many(store: skillfs.Store, scope: Scope, n: int) -> None:
    """`n` small skills, `skill-00000`…, one commit."""
    store.commit(
        [
            skillfs.Put(
                scope,
                f"skill-{i:05d}",
                {
                    "SKILL.md": File(
                        f"---\nname: skill-{i:05d}\ndescription: Task {i % 7}.\n---\n".encode()
                    )
                },
            )
            for i in range(n)
        ]
    )


def _rows(html: str, table: str) -> list[str]:
    """The skill links of one table of a page."""
    part = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'class="skill-link" href="[^"]+">([^<]+)<', part)


def test_scope_page_is_paged_and_filtered_on_the_server(
    client: Client, store: skillfs.Store
) -> None:
    _many(store, SHARED, 250)  # and the two examples: 252 skills
    first = client.get("/" + SHARED.prefix)
    assert len(_rows(first.text, "skills")) == 100
    assert "1–100 of 252 skills" in first.text and "page 1 of 3" in first.text
    assert 'href="?page=2"' in first.text and 'data-filter="skills"' in first.text
    last = client.get("/" + SHARED.prefix + "?page=3")
    assert _rows(last.text, "skills")[-1] == "skill-00249" and "201–252 of 252" in last.text
    assert len(_rows(client.get("/" + SHARED.prefix + "?page=99").text, "skills")) == 52
    assert len(_rows(client.get("/" + SHARED.prefix + "?page=x").text, "skills")) == 100
    # ?q= matches every word in the name or the description, over all pages
    found = client.get("/" + SHARED.prefix + "?q=task+3.")
    names = _rows(found.text, "skills")
    assert len(names) == 36 and all(int(n[-5:]) % 7 == 3 for n in names)
    assert "matching “task 3.”" in unescape(found.text) and "Search all 252 skills" in found.text
    assert "page=2" not in found.text  # one page of matches
    none = client.get("/" + SHARED.prefix + "?q=nothing-like-this")
    assert "No skill matches" in unescape(none.text) and "none of the 252" in none.text
    assert _rows(client.get(f"/agents/{AGENT}/?q=reviewer").text, "skills") == ["code-reviewer"]


def test_scope_page_leaves_out_drafts_and_archived_skills(
    client: Client, store: skillfs.Store
) -> None:
    """They are entries of the scope, not skills (docs/governance.md): no row, no link."""
    store.drafts.propose(SHARED, "proposed", {"SKILL.md": GOOD_MD})
    store.drafts.propose(SHARED, "gone", {"SKILL.md": GOOD_MD})
    store.drafts.reject(SHARED, "gone")
    store.publish(SHARED, "old", {"SKILL.md": GOOD_MD})
    store.archive.add(SHARED, "old")
    page = client.get("/" + SHARED.prefix)
    assert "_drafts" not in page.text and ".archive" not in page.text
    assert "proposed" not in _rows(page.text, "skills")


def test_sidebar_and_agents_page_are_capped(client: Client, store: skillfs.Store) -> None:
    for i in range(30):
        store.publish(Scope.shared(f"agent-{i:02d}"), "x", {"SKILL.md": GOOD_MD})
    page = client.get("/agents/agent-29/")
    sidebar = page.text.split('class="sidebar"', 1)[1].split("</nav>", 1)[0]
    assert sidebar.count('class="nav-item') == 13  # 12, and the page's own agent
    assert 'nav-item active" href="/agents/agent-29/"' in sidebar
    assert "all 31 agents…" in sidebar and 'name="q"' in sidebar
    home = client.get("/?q=agent-1")
    assert home.text.count('class="card agent-card"') == 10  # agent-10 … agent-19


def test_deleted_skills_listed_with_restore(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, "release-notes")
    store.delete(SHARED, "release-notes", expected_version=m.version)
    page = client.get("/" + SHARED.prefix)
    assert 'id="deleted"' in page.text and "Deleted skills" in page.text
    section = page.text.split('id="deleted"', 1)[1]
    assert f'href="{skill_url("release-notes")}"' in section  # the deleted skill's own page
    assert f"v{m.version + 1}" in section and "UTC" in section  # when, as which version
    assert f'action="{skill_url("release-notes", "restore")}"' in section
    stale = client.post(skill_url("release-notes", "restore"), {"deleted": str(m.version)})
    assert stale.status == 409 and "release-notes" not in store.skills(SHARED)
    r = client.post(skill_url("release-notes", "restore"), {"deleted": str(m.version + 1)})
    assert r.status == 200 and f"Restored release-notes from version {m.version}" in r.text
    restored = store.manifest(SHARED, "release-notes")
    assert restored.version == m.version + 2 and set(restored.files) == set(m.files)
    assert 'id="deleted"' not in client.get("/" + SHARED.prefix).text
    # a reader sees the list without the button
    store.delete(SHARED, "release-notes")
    reader = Client(client.app)
    reader.sign_in(READER)
    listed = reader.get("/" + SHARED.prefix)
    assert "Deleted skills" in listed.text and "/restore" not in listed.text


def test_restore_is_strict(client: Client, store: skillfs.Store) -> None:
    store.publish(SHARED, "Bad_One", {"SKILL.md": b"---\nname: Bad_One\ndescription: d\n---\n"})
    store.delete(SHARED, "Bad_One")
    tomb = store.history(SHARED, "Bad_One")[0].version
    r = client.post(skill_url("Bad_One", "restore"), {"deleted": str(tomb)})
    assert r.status == 422 and "Do it anyway" in r.text and "Bad_One" not in store.skills(SHARED)
    r = client.post(skill_url("Bad_One", "restore"), {"deleted": str(tomb), "force": "1"})
    assert r.status == 200 and "Bad_One" in store.skills(SHARED)


def test_skill_page_folds_directories_and_names_files_in_full(
    client: Client, store: skillfs.Store
) -> None:
    files = example_files("code-reviewer")
    long = "references/" + "a-very-long-reference-name-" * 3 + ".md"
    files.update({f"references/r{i:02d}.md": File(b"r\n") for i in range(40)})
    files[long] = File(b"x\n")
    store.publish(SHARED, "code-reviewer", files)
    page = client.get(skill_url("code-reviewer")).text
    assert 'id="files" data-tree data-folded' in page  # over 30 files: folded at first
    assert 'data-dir="references"' in page and "42 files" in page
    assert f'data-in="references" data-path="{long}"' in page and f'title="{long}"' in page
    assert 'data-filter="files"' in page
    editor = client.get(skill_url("code-reviewer", "files/" + long)).text
    assert f'data-keep="{long}"' in editor and f'title="{long}"' in editor


def test_editor_wraps_prose_and_lists_errors_first(client: Client, store: skillfs.Store) -> None:
    md = client.get(skill_url("code-reviewer", "files/SKILL.md")).text
    assert 'wrap="soft"' in md and 'class="editor wrap"' in md
    script = client.get(skill_url("code-reviewer", "files/scripts/diff-stats.sh")).text
    assert 'wrap="off"' in script and 'class="editor"' in script
    m = store.manifest(SHARED, "code-reviewer")
    bad = "---\nname: code-reviewer\ndescription: ok\nfoo: 1\nname2: x\n---\n"
    r = _save(
        client, "code-reviewer", bad.replace("name: code-reviewer", "name: Bad_Name"), m.version
    )
    severities = re.findall(r'<li class="finding (error|warning)"', r.text)
    assert "error" in severities and "warning" in severities
    assert severities == sorted(severities)  # every error before any warning


def _edit_after_theirs(
    client: Client, store: skillfs.Store, theirs: tuple[str, str], mine: tuple[str, str]
) -> tuple[Reply, str, str, int]:
    """Someone commits code-reviewer's SKILL.md with `theirs` replaced; the operator, who loaded
    the version before, then saves it with `mine` replaced. The reply, the loaded text, the
    operator's text and the version now current."""
    loaded = store.manifest(SHARED, "code-reviewer")
    original = md_text(store, "code-reviewer")
    their_text = original.replace(*theirs)
    store.publish(
        SHARED,
        "code-reviewer",
        {**example_files("code-reviewer"), "SKILL.md": their_text.encode()},
    )
    my_text = original.replace(*mine)
    return (
        _save(client, "code-reviewer", my_text, loaded.version),
        original,
        my_text,
        (loaded.version + 1),
    )


def _editor_text(reply: Reply) -> str:
    """The editor's text in a page (the newline after <textarea> is not part of it)."""
    html = reply.text.split('id="content"', 1)[1].split(">", 1)[1].split("</textarea>")[0]
    return unescape(html).removeprefix("\n")


def test_a_save_merges_into_their_change_of_the_same_file(
    client: Client, store: skillfs.Store
) -> None:
    """The editor's default policy, merge (`edit_file(on_conflict=MERGE)`): their change on
    other lines and the operator's are both written, on their version, in one save."""
    r, original, _, current = _edit_after_theirs(
        client,
        store,
        ("## Steps", "## Steps (theirs)"),
        ("# Code reviewer", "# Code reviewer (mine)"),
    )
    merged = original.replace("## Steps", "## Steps (theirs)").replace(
        "# Code reviewer", "# Code reviewer (mine)"
    )
    assert r.status == 200 and md_text(store, "code-reviewer") == merged
    assert f"on top of version {current}" in r.text and "their changes kept" in r.text
    assert store.manifest(SHARED, "code-reviewer").version == current + 1


def test_conflict_on_the_same_lines_has_markers_and_overwrite_keeps_mine(
    client: Client, store: skillfs.Store
) -> None:
    r, original, mine, current = _edit_after_theirs(
        client,
        store,
        ("# Code reviewer", "# Code reviewer (theirs)"),
        ("# Code reviewer", "# Code reviewer (mine)"),
    )
    theirs = original.replace("# Code reviewer", "# Code reviewer (theirs)")
    text = unescape(r.text)
    # the store's merge (`EditConflict.merged`), saved on their version
    assert r.status == 409 and "the same lines" in text and 'data-kind="markers"' in r.text
    assert "<<<<<<< your edit\n# Code reviewer (mine)\n=======\n# Code reviewer (theirs)\n" in text
    assert f">>>>>>> version {current}" in text
    assert 'name="mine"' in r.text and "Overwrite with my text" in r.text
    fields = _form_fields(r)
    assert fields["base"] == fields["expected"] == str(current)
    with_markers = _editor_text(r)
    # saving the markers is refused (Save anyway offered), and nothing is written
    refused = _save(client, "code-reviewer", with_markers, current)
    assert refused.status == 422 and "conflict markers" in refused.text
    assert "Save anyway" in refused.text and md_text(store, "code-reviewer") == theirs
    # resolved: saved on their version
    resolved = original.replace("# Code reviewer", "# Code reviewer (both)")
    r = client.post(skill_url("code-reviewer", "save"), {**fields, "content": resolved})
    assert r.status == 200 and md_text(store, "code-reviewer") == resolved
    assert f"is now version {current + 1}" in r.text and "on top of" not in r.text
    # Overwrite with my text: the operator's own text, as typed before the merge, written
    # over whatever is there by then (the retry policy)
    r = client.post(skill_url("code-reviewer", "save"), {**fields, "use": "mine"})
    assert r.status == 200 and md_text(store, "code-reviewer") == mine
    assert "your text replaced theirs of SKILL.md" in r.text


class _FormFields(HTMLParser):
    """The fields a browser posts with one form of a page: its named inputs and textareas
    (the button pressed adds its own)."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id, self.inside, self.fields = form_id, False, {}
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        elif self.inside and tag == "input" and a.get("name"):
            self.fields[a["name"] or ""] = a.get("value") or ""
        elif self.inside and tag == "textarea":
            self.textarea = a.get("name")
            self.fields[self.textarea or ""] = ""

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.fields[self.textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self.textarea:
            self.fields[self.textarea] = self.fields[self.textarea].removeprefix("\n")
            self.textarea = None
        elif tag == "form":
            self.inside = False


def _form_fields(reply: Reply, form_id: str = "editor-form") -> dict[str, str]:
    parser = _FormFields(form_id)
    parser.feed(reply.text)
    return {k: v for k, v in parser.fields.items() if k != "csrf"}


def test_a_refused_save_from_a_conflict_keeps_the_conflict(
    client: Client, store: skillfs.Store
) -> None:
    r, _, mine, current = _edit_after_theirs(
        client,
        store,
        ("# Code reviewer", "# Code reviewer (theirs)"),
        ("# Code reviewer", "# Code reviewer (mine)"),
    )
    assert r.status == 409
    # Save merged text, markers and all, as the browser posts the conflict page's form
    refused = client.post(skill_url("code-reviewer", "save"), _form_fields(r))
    assert refused.status == 422 and "still holds conflict markers" in refused.text
    assert "changed while you were editing" in refused.text
    assert f"Reload version {current}" in refused.text and "Overwrite with my text" in refused.text
    # their change, shown as theirs: their line added, never in red as if saving dropped it
    assert (
        "What they changed, from version" in refused.text and "(merging keeps it)" in refused.text
    )
    assert re.search(r'<tr class="add">(?:(?!</tr>).)*\(theirs\)', refused.text, re.S)
    assert not re.search(r'<tr class="remove">(?:(?!</tr>).)*\(theirs\)', refused.text, re.S)
    assert ">Save merged text<" in refused.text and ">Save<" not in refused.text
    fields = _form_fields(refused)
    assert fields["mine"] == mine and "<<<<<<< your edit" in fields["content"]
    # the operator's pre-merge text is still there for Overwrite with my text
    r = client.post(skill_url("code-reviewer", "save"), {**fields, "use": "mine"})
    assert r.status == 200 and md_text(store, "code-reviewer") == mine


def test_bad_new_name_suggests_a_valid_one(client: Client, store: skillfs.Store) -> None:
    form = {"op": "new", "name": "Refund Policy", "description": "Explains refunds.",
            "instructions": OWN}  # fmt: skip
    r = client.post("/" + SHARED.prefix, form)
    assert r.status == 422 and "Do it anyway" in r.text
    assert "Use “refund-policy”" in unescape(r.text)
    assert '<input type="hidden" name="name" value="refund-policy">' in r.text
    assert "Refund Policy" not in store.skills(SHARED)
    r = client.post("/" + SHARED.prefix, {**form, "name": "refund-policy"})
    assert r.status == 200 and "refund-policy" in store.skills(SHARED)
    renamed = client.post(
        skill_url("refund-policy", "rename"), {"new_name": "Refunds!", "expected": "1"}
    )
    assert renamed.status == 422 and "Use “refunds”" in unescape(renamed.text)


def test_renaming_to_its_own_name_says_so(client: Client, store: skillfs.Store) -> None:
    v = str(store.manifest(SHARED, "release-notes").version)
    for typed in ("release-notes", "Release Notes"):  # as it is, or as the spec makes it
        r = client.post(skill_url("release-notes", "rename"), {"new_name": typed, "expected": v})
        assert r.status == 200 and "Not renamed: “release-notes” is already its name" in r.text
        assert "Use “release-notes”" not in r.text
    assert store.manifest(SHARED, "release-notes").version == int(v)


def test_suggest_name() -> None:
    from skillfs.spec.validation import suggest_name

    assert suggest_name("Refund Policy") == "refund-policy"
    assert suggest_name("Café  Menu!") == "cafe-menu"
    assert suggest_name("Code_Reviewer") == "code-reviewer"
    assert suggest_name("refund-policy") == "refund-policy"
    assert suggest_name("--") is None
    assert len(suggest_name("a" * 80) or "") == 64


def test_markets_are_not_under_agents(client: Client, store: skillfs.Store) -> None:
    market = Scope.market("team")
    store.publish(market, "code-reviewer", example_files("code-reviewer"))
    for url in ("/markets/team/skills/", "/markets/team/skills/code-reviewer/"):
        crumbs = client.get(url).text.split('class="crumbs"', 1)[1].split("</div>", 1)[0]
        assert 'href="/#markets">Markets</a>' in crumbs and ">Agents<" not in crumbs


@pytest.mark.parametrize(("profiles", "status"), [(None, 422), (["claude-code"], 200)])
def test_the_console_validates_with_the_stores_profiles(
    tokens: Tokens, profiles: list[str] | None, status: int
) -> None:
    """Under a store accepting Claude Code's profile its fields save without "Save anyway"
    (docs/validation.md, "Host profiles"); under `spec` alone they are errors."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}", profiles=profiles)
    store.publish(SHARED, "greeter", {"SKILL.md": GOOD_MD})
    console = make_app(store, tokens)
    try:
        client = Client(console)
        client.sign_in()
        text = GOOD_MD.decode().replace("---\n\n", "disable-model-invocation: true\n---\n\n", 1)
        r = _save(client, "greeter", text, store.manifest(SHARED, "greeter").version)
        assert r.status == status, r.text
        if status == 200:
            assert not store.manifest(SHARED, "greeter").errors
    finally:
        console.close()
