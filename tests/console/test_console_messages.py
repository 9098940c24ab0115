"""Every console write takes a message (docs/console.md, "Governed change"): each form that
writes has a message field, and what the operator types there is the commit's message, in the
audit and on the History page. The forms are enumerated twice, so a new one without a message
field fails here: read from the templates' source, and rendered from pages that show every
form, whose actions must reach every route that writes. The browser flow (typing a message and
reading it on the Activity page) is in test_console_browser.py."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import skillfs
from skillfs.console.routes import PAGES, Page
from skillfs.model import File, Rollout, Scope
from skillfs.model.names import archive_entry, draft_entry
from tests.console.test_console import (
    AGENT,
    GOOD_MD,
    SHARED,
    Client,
    Reply,
    _zip,
    console_store,  # noqa: F401  (a fixture)
    md_text,
    skill_url,
)
from tests.console.test_console_governance import ops_client  # noqa: F401  (a fixture)

TEMPLATES = Path(__file__).resolve().parents[2] / "skillfs" / "console" / "templates"
ALICE = Scope.user(AGENT, "alice")
MARKET = Scope.market("team")
#: Forms that post but write nothing to the store.
NOT_WRITES = {"/login", "/logout"}
BINARY = bytes(range(256)) * 4


# ---------------------------------------------------------------------- the forms, from source


def test_every_form_that_posts_in_the_templates_has_a_message_field() -> None:
    """Each `<form method="post">` of a template holds a message field (the `why` macro, or
    an input named `message`), or one outside it names it (`form=`), unless it is sign-in or
    sign-out."""
    missing = []
    for path in sorted(TEMPLATES.glob("*.html")):
        source = path.read_text()
        for found in re.finditer(r"<form\b[^>]*>(.*?)</form>", source, re.S):
            tag = found.group(0).split(">", 1)[0]
            if 'method="post"' not in tag:
                continue
            action = re.search(r'action="([^"]*)"', tag)
            if action and action.group(1) in NOT_WRITES:
                continue
            body = found.group(1)
            if "why(" in body or 'name="message"' in body:
                continue
            named = re.search(r'id="([^"{]+)', tag)  # a literal id, or its literal start
            if named and re.search(rf"why\([^)]*form='{re.escape(named.group(1))}", source):
                continue
            line = source[: found.start()].count("\n") + 1
            missing.append(f"{path.name}:{line}")
    assert not missing, f"forms that post without a message field: {missing}"


# ---------------------------------------------------------------------- the forms, rendered


@dataclass
class PostForm:
    action: str
    id: str
    fields: set[str] = field(default_factory=set)


class _PostForms(HTMLParser):
    """The forms of a page that post, each with the names of its fields: those inside it and
    those outside that name it (`form="id"`)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[PostForm] = []
        self.inside: PostForm | None = None
        self.outside: list[tuple[str, str]] = []  # (form id, field name)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = None
            if a.get("method", "get").lower() == "post":
                self.inside = PostForm(a.get("action", ""), a.get("id", ""))
                self.forms.append(self.inside)
        elif tag in ("input", "textarea", "select") and a.get("name"):
            if a.get("form"):
                self.outside.append((a["form"], a["name"]))
            elif self.inside is not None:
                self.inside.fields.add(a["name"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = None

    def post_forms(self) -> list[PostForm]:
        for form_id, name in self.outside:
            for f in self.forms:
                if f.id == form_id:
                    f.fields.add(name)
        return self.forms


def _route_of(action: str) -> Page | None:
    """The POST route a form's action reaches (the first that matches, as the router's)."""
    path = action.split("?", 1)[0].rstrip("/") or "/"
    for page in PAGES:
        if page.method != "POST":
            continue
        for pattern, _ in page.paths():
            regex = re.sub(r"\{\w+:path\}", ".+", pattern)
            regex = re.sub(r"\{\w+\}", "[^/]+", regex)
            if re.fullmatch(regex, path):
                return page
    return None


def _every_form(client: Client, store: skillfs.Store) -> dict[str, Reply]:
    """Pages that between them show every form of the console that writes, by name."""
    pages: dict[str, Reply] = {}
    scope = "/" + SHARED.prefix
    # a skill page with everything under Manage, a staged candidate's rollout panel, a file
    # to remove, an upload and Create override
    store.publish(SHARED, "code-reviewer", {"SKILL.md": md_text(store, "code-reviewer") + "v2\n",
                                            "assets/logo.bin": BINARY})  # fmt: skip
    store.rollouts.stage(
        SHARED, "code-reviewer", {"SKILL.md": md_text(store, "code-reviewer") + "canary\n"},
        Rollout(users=["alice"]),
    )  # fmt: skip
    pages["skill"] = client.get(skill_url("code-reviewer"))
    pages["history"] = client.get(skill_url("code-reviewer", "history"))
    pages["editor"] = client.get(skill_url("code-reviewer", "files/SKILL.md"))
    pages["binary"] = client.get(skill_url("code-reviewer", "files/assets/logo.bin"))
    # a disabled skill's banner (Enable)
    store.governance.disable(SHARED, "release-notes", reason="off")
    pages["disabled"] = client.get(skill_url("release-notes"))
    # a deleted skill: its page, and the scope page's Deleted skills; New skill, Upload zip
    store.publish(SHARED, "gone", {"SKILL.md": GOOD_MD.replace(b"greeter", b"gone")})
    store.delete(SHARED, "gone")
    pages["deleted"] = client.get(skill_url("gone"))
    pages["scope"] = client.get(scope)
    # a user's hiding entry: its page, the user's scope page, and What U sees
    store.governance.disable(ALICE, "code-reviewer", reason="not for alice")
    store.publish(ALICE, "greeter", {"SKILL.md": GOOD_MD})
    pages["hidden"] = client.get(skill_url("code-reviewer", scope=ALICE))
    pages["user scope"] = client.get("/" + ALICE.prefix)
    pages["worker"] = client.get(f"/agents/{AGENT}/users/alice/")
    pages["user skill"] = client.get(skill_url("greeter", scope=ALICE))
    # a draft's decisions
    store.drafts.propose(ALICE, "greeter", {"SKILL.md": File(GOOD_MD + b"More.\n")})
    pages["draft"] = client.get("/" + ALICE.prefix + "_drafts/greeter/")
    # the "breaks the spec" page, with a valid name to use instead
    pages["confirm"] = client.post(scope, {"op": "new", "name": "Refund Policy",
                                           "description": "Refunds."})  # fmt: skip
    # a refused zip import and a refused upload
    bad = GOOD_MD.replace(b"name: greeter", b"name: Bad_Name")
    pages["import rejected"] = client.upload(
        scope, {"op": "import"}, {"archive": ("z.zip", _zip({"greeter/SKILL.md": bad}))}
    )
    v = store.manifest(SHARED, "code-reviewer").version
    pages["upload rejected"] = client.upload(
        skill_url("code-reviewer", "upload"),
        {"expected": str(v), "path": "SKILL.md"},
        {"file": ("SKILL.md", bad)},
    )
    # a conflict page (both changed the same lines)
    store.governance.enable(SHARED, "release-notes")
    loaded, v = (
        md_text(store, "release-notes"),
        str(store.manifest(SHARED, "release-notes").version),
    )
    store.publish(SHARED, "release-notes", {"SKILL.md": loaded + "theirs\n"})
    pages["conflict"] = client.post(
        skill_url("release-notes", "save"),
        {"path": "SKILL.md", "content": loaded + "mine\n", "base": v, "expected": v},
    )
    # the archive's Restore, and the curation reports' Archive these N, of an agent and a market
    store.publish(MARKET, "greeter", {"SKILL.md": GOOD_MD})
    store.publish(SHARED, "old", {"SKILL.md": GOOD_MD.replace(b"greeter", b"old")})
    store.archive.add(SHARED, "old")
    later = time.time() + 400 * 86400
    store.clock = lambda: later
    pages["curation"] = client.get(f"/agents/{AGENT}/curation")
    pages["market curation"] = client.get("/markets/team/curation")
    return pages


def test_every_rendered_form_that_writes_has_a_message_field(
    client: Client, store: skillfs.Store
) -> None:
    """The pages above show every form that posts; each has a message field, and together
    they reach every route that writes (a new route needs a page here, and its form a
    message)."""
    pages = _every_form(client, store)
    statuses = {name: r.status for name, r in pages.items()}
    assert statuses == {
        **{name: 200 for name in pages},
        "confirm": 422, "import rejected": 422, "upload rejected": 422, "conflict": 409,
    }, statuses  # fmt: skip
    reached: set[str] = set()
    missing, unknown = [], []
    for name, reply in pages.items():
        parser = _PostForms()
        parser.feed(reply.text)
        for form in parser.post_forms():
            if form.action in NOT_WRITES:
                continue
            route = _route_of(form.action)
            if route is None:
                unknown.append(f"{name}: {form.action}")
                continue
            reached.add(route.path)
            if "message" not in form.fields:
                missing.append(f"{name}: {form.id or form.action} {sorted(form.fields)}")
    assert not unknown, f"forms posting to no route: {unknown}"
    assert not missing, f"forms that write without a message field: {missing}"
    writes = {p.path for p in PAGES if p.method == "POST" and p.body != "json"}
    assert writes - reached == set(), f"routes no page here posts to: {writes - reached}"


# ---------------------------------------------------------------------- the audit


def _said(store: skillfs.Store) -> dict[str, list[tuple[str, str, str]]]:
    """The audit of the agent and the market by message: [(scope, skill, action)]."""
    found: dict[str, list[tuple[str, str, str]]] = {}
    entries = store.governance.audit(AGENT) + store.governance.audit("markets/team")
    for e in entries:
        found.setdefault(e.message, []).append((str(e.scope), e.skill, e.action))
    return found


def test_each_forms_message_is_the_commits_message(client: Client, store: skillfs.Store) -> None:
    """One write of every kind, each with its own message: the audit has it on the versions
    that write made, and the History page shows it with the token's name."""
    scope, shared = "/" + SHARED.prefix, str(SHARED)

    def version(skill: str, where: Scope = SHARED) -> str:
        """The skill's version now (a deleted skill's: its tombstone's)."""
        return str(store.versions(where, skill)[0].version)

    def post(url: str, form: dict[str, str], status: int = 200) -> Reply:
        r = client.post(url, form)
        assert r.status == status, (url, form, r.text[-2000:])
        return r

    post(
        scope,
        {
            "op": "new",
            "name": "greeter",
            "description": "Greets.",
            "message": "new",
            "instructions": "Greet.",
        },
    )
    text = md_text(store, "greeter") + "\nMore.\n"
    post(skill_url("greeter", "save"), {"path": "SKILL.md", "content": text, "base": "1",
                                        "expected": "1", "message": "save"})  # fmt: skip
    r = client.upload(
        skill_url("greeter", "upload"),
        {"expected": version("greeter"), "message": "upload"},
        {"file": ("notes.md", b"n\n")},
    )
    assert r.status == 200
    post(skill_url("greeter", "rmfile"),
         {"path": "notes.md", "expected": version("greeter"), "message": "rmfile"})  # fmt: skip
    post(skill_url("greeter", "rollback"),
         {"version": "1", "expected": version("greeter"), "message": "rollback"})  # fmt: skip
    post(skill_url("greeter", "disable"), {"expected": version("greeter"), "message": "disable"})
    post(skill_url("greeter", "enable"), {"expected": version("greeter"), "message": "enable"})
    post(skill_url("greeter", "rename"),
         {"new_name": "hello", "expected": version("greeter"), "message": "rename"})  # fmt: skip
    post(skill_url("hello", "override"),
         {"user": "alice", "expected": version("hello"), "message": "override"})  # fmt: skip
    post(skill_url("hello", "delete"), {"expected": version("hello"), "message": "delete"})
    post(skill_url("hello", "restore"), {"deleted": version("hello"), "message": "restore"})
    r = client.upload(
        scope, {"op": "import", "message": "import"},
        {"archive": ("z.zip", _zip({"SKILL.md": GOOD_MD.replace(b"greeter", b"zipped")}))},
    )  # fmt: skip
    assert r.status == 200
    canary = {"path": "SKILL.md", "content": md_text(store, "hello") + "canary\n",
              "canary": "1", "users": "alice"}  # fmt: skip
    v = version("hello")
    post(skill_url("hello", "save"), {**canary, "base": v, "expected": v, "message": "stage"})
    post(skill_url("hello", "widen"),
         {"expected": version("hello"), "users": "alice, bob", "message": "widen"})  # fmt: skip
    post(skill_url("hello", "promote"), {"expected": version("hello"), "message": "promote"})
    v = version("hello")
    post(skill_url("hello", "save"), {**canary, "base": v, "expected": v, "message": "again"})
    post(skill_url("hello", "abort"), {"expected": version("hello"), "message": "abort"})
    # hide a shared skill from alice, and show it again
    post(skill_url("zipped", "disable", scope=ALICE),
         {"expected": "0", "message": "hide", "back": "user"})  # fmt: skip
    post(skill_url("zipped", "enable", scope=ALICE),
         {"expected": version("zipped", ALICE), "message": "unhide"})  # fmt: skip
    # archive and restore
    post(skill_url("zipped", "archive"), {"expected": version("zipped"), "message": "archive"})
    restore = scope + ".archive/zipped/restore"
    post(restore, {"expected": str(store.manifest(SHARED, archive_entry("zipped")).version),
                   "message": "unarchive"})  # fmt: skip
    # a draft approved, one approved as a canary, one rejected
    drafts = scope + "_drafts/"
    for name, decision, form in (
        ("release-notes", "approve", {}),
        ("code-reviewer", "approve", {"canary": "1", "users": "alice"}),
        ("zipped", "reject", {}),
    ):
        md = md_text(store, name) + "\nDrafted.\n"
        store.drafts.propose(SHARED, name, {"SKILL.md": md.encode()})
        v = str(store.manifest(SHARED, draft_entry(name)).version)
        post(f"{drafts}{name}/{decision}", {"expected": v, "message": f"{decision} {name}", **form})
    # "Do it anyway" keeps the message (editable) of the write it repeats
    form = {"path": "SKILL.md", "expected": version("code-reviewer"), "message": "why not"}
    refused = post(skill_url("code-reviewer", "rmfile"), form, status=422)
    assert 'name="message" value="why not"' in refused.text and "Do it anyway" in refused.text
    post(skill_url("code-reviewer", "rmfile"), {**form, "message": "anyway", "force": "1"})
    # curation, last: seen 400 days on, every skill is idle
    later = time.time() + 400 * 86400
    store.clock = lambda: later
    post(f"/agents/{AGENT}/curation",
         {"stale_after": "30d", "archive_after": "90d", "message": "tidy"})  # fmt: skip

    said = _said(store)
    alice = str(ALICE)
    expected = {
        "new": [(shared, "greeter", "publish")],
        "save": [(shared, "greeter", "publish")],
        "upload": [(shared, "greeter", "publish")],
        "rmfile": [(shared, "greeter", "publish")],
        "rollback": [(shared, "greeter", "publish")],
        "disable": [(shared, "greeter", "disable")],
        "enable": [(shared, "greeter", "enable")],
        "rename": [(shared, "greeter", "delete"), (shared, "hello", "publish")],
        "override": [(alice, "hello", "publish")],
        "delete": [(shared, "hello", "delete")],
        "restore": [(shared, "hello", "publish")],
        "import": [(shared, "zipped", "publish")],
        "stage": [(shared, "hello", "stage")],
        "widen": [(shared, "hello", "widen")],
        "promote": [(shared, "hello", "promote")],
        "again": [(shared, "hello", "stage")],
        "abort": [(shared, "hello", "abort")],
        "hide": [(alice, "zipped", "disable")],
        "unhide": [(alice, "zipped", "enable")],
        "archive": [(shared, "zipped", "archive")],
        "unarchive": [(shared, "zipped", "restore")],
        "approve release-notes": [(shared, "release-notes", "approve")],
        "approve code-reviewer": [(shared, "code-reviewer", "approve")],
        "reject zipped": [(shared, "_drafts/zipped", "reject")],
        "anyway": [(shared, "code-reviewer", "publish")],
    }
    for message, where in expected.items():  # (a side entry, `.archive/x`, `_drafts/x`, too)
        assert set(where) <= set(said.get(message, [])), (message, said.get(message))
    curated = {m: w for m, w in said.items() if m.startswith("tidy — curation: idle")}
    assert curated and all(a == "archive" for w in curated.values() for _, _, a in w), said
    assert "why not" not in said  # refused: nothing written

    history = client.get(skill_url("greeter", "history")).text
    rows = re.findall(r'<td class="actor">([^<]*)</td>\s*<td class="desc">([^<]*)</td>', history)
    assert ("ops", "rename") in rows and ("ops", "save") in rows and ("ops", "new") in rows
    assert unescape(history).count("rollback") >= 1


def test_a_message_the_store_refuses_writes_nothing(client: Client, store: skillfs.Store) -> None:
    """A message over 4096 characters: the editor keeps the text and says why; any other form
    is the "Not accepted" page; nothing is written."""
    v = store.manifest(SHARED, "code-reviewer").version
    long = "x" * 5000
    text = md_text(store, "code-reviewer") + "more\n"
    r = client.post(skill_url("code-reviewer", "save"),
                    {"path": "SKILL.md", "content": text, "base": str(v), "expected": str(v),
                     "message": long})  # fmt: skip
    assert r.status == 400 and "Not saved" in r.text and "4096" in r.text
    assert unescape(r.text).count("more\n") >= 1 and f'value="{long}"' in r.text
    r = client.post(skill_url("code-reviewer", "rename"),
                    {"new_name": "reviewer", "expected": str(v), "message": long})  # fmt: skip
    assert r.status == 400 and "Nothing was written" in r.text and "4096" in r.text
    assert store.manifest(SHARED, "code-reviewer").version == v
    assert "reviewer" not in store.skills(SHARED)
