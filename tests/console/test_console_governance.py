"""The console's governance pages through ASGI calls (docs/console.md, "Governed change"):
every console write recorded by the signed-in token's name, the Activity page and its
filters, the disable toggle with a reason, and a user's hiding entry shown as "hidden from
this user", never as an empty skill. The browser flows are in
test_console_governance_browser.py."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from html import unescape
from pathlib import Path
from urllib.parse import urlencode

import fsspec
import pytest

import skillfs
from skillfs.auth import Tokens, tokens_document
from skillfs.console import make_app
from skillfs.model import File, Scope
from tests.console.test_console import (
    ADMIN,
    AGENT,
    GOOD_MD,
    READER,
    SHARED,
    Client,
    _rows,
    _scoped_client,
    _zip,
    console_store,  # noqa: F401  (a fixture)
    example_files,
    md_text,
    skill_url,
)

ALICE = Scope.user(AGENT, "alice")
CONSOLE = Path(__file__).resolve().parents[2] / "skillfs" / "console"
#: The store's writes: each must say who made it and why (docs/governance.md, "Who and
#: why"): the core's and its namespaces' (`call.store.drafts.approve`, ...).
WRITES = {
    "publish", "delete", "rollback", "commit", "disable", "enable", "stage", "widen",
    "promote", "abort", "propose", "approve", "reject", "add", "restore", "curate",
}  # fmt: skip
#: `store.edits`, the operations layer: each takes the form's WriteOptions.
EDITS = {"rename", "override", "edit_file", "import_skills", "delete", "rollback"}
#: Namespaces whose methods named as in WRITES are reads (`store.usage`, `store.changes`).
READS = {"usage", "changes"}


@pytest.fixture(name="client")
def ops_client(store: skillfs.Store) -> Iterator[Client]:
    """Signed in as `ops` (every grant); `auditor` reads the agent."""
    tokens = Tokens(
        text=tokens_document(
            [("ops", ADMIN, ["*:admin"]), ("auditor", READER, [f"agent:{AGENT}:read"])],
            "receipts",
        )
    )
    app = make_app(store, tokens)
    c = Client(app)
    c.sign_in()
    yield c
    app.close()


def _store_writes() -> Iterator[tuple[str, ast.Call, str, str]]:
    """Every call of a store write in the console's source: (where, the call, the namespace
    it is made on or "", the method)."""
    for path in sorted(CONSOLE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            on = ast.unparse(node.func.value)
            if on != "call.store" and not on.startswith("call.store."):
                continue
            namespace = on.removeprefix("call.store").lstrip(".")
            keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
            dry = keywords.get("dry_run", "True") != "False"
            name = node.func.attr
            write = name in WRITES and namespace not in READS
            if write or namespace == "edits" or (name == "run" and not dry):
                yield f"{path.name}:{node.lineno}: {ast.unparse(node.func)}", node, namespace, name


def test_every_console_write_names_the_signed_in_token_and_the_forms_message() -> None:
    """Read from the source: a write the console makes without the signed-in token's name
    would be recorded as the server's own user@host (or someone else), not as the operator
    who made it; without the form's message the operator's "why" would be lost. A governed
    write passes both as `options=call.options(...)`; the core's publish and delete as
    `actor=call.actor, message=call.message`. A call of `store.edits` outside EDITS is a new
    operation: list it."""
    missing, seen = [], set()
    for where, node, namespace, name in _store_writes():
        keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
        if namespace == "edits":
            seen.add(name)
        if namespace:
            ok = keywords.get("options", "").startswith("call.options(")
            ok = ok and (namespace != "edits" or name in EDITS)
        else:
            said = keywords.get("actor"), keywords.get("message")
            ok = said == ("call.actor", "call.message")
        if not ok:
            missing.append(where)
    assert not missing, missing
    assert seen == EDITS, seen  # each operation is used: one no longer used leaves the list


def test_console_writes_are_recorded_by_the_token_name(
    client: Client, store: skillfs.Store
) -> None:
    """Each kind of console write, then the audit: every entry is by `ops` (the token's
    name in the tokens config), none by the server's user@host."""
    client.post(
        "/" + SHARED.prefix,
        {"op": "new", "name": "greeter", "description": "Greets.", "force": "1"},
    )
    v = store.manifest(SHARED, "greeter").version
    text = md_text(store, "greeter") + "\nMore.\n"
    client.post(
        skill_url("greeter", "save"),
        {"path": "SKILL.md", "content": text, "base": str(v), "expected": str(v)},
    )
    v += 1
    client.upload(
        skill_url("greeter", "upload"), {"expected": str(v)}, {"file": ("notes.md", b"n\n")}
    )
    v += 1
    client.post(skill_url("greeter", "rmfile"), {"path": "notes.md", "expected": str(v)})
    v += 1
    client.post(skill_url("greeter", "rollback"), {"version": "1", "expected": str(v)})
    v += 1
    client.post(skill_url("greeter", "disable"), {"expected": str(v), "message": "too chatty"})
    client.post(skill_url("greeter", "enable"), {"expected": str(v + 1)})
    client.post(skill_url("greeter", "rename"), {"new_name": "hello", "expected": str(v + 2)})
    hello = store.manifest(SHARED, "hello").version
    client.post(skill_url("hello", "override"), {"user": "alice", "expected": str(hello)})
    client.post(skill_url("hello", "delete"), {"expected": str(hello)})
    client.post(skill_url("hello", "restore"), {"deleted": str(hello + 1)})
    client.upload(
        "/" + SHARED.prefix,
        {"op": "import"},
        {"archive": ("z.zip", _zip({"SKILL.md": GOOD_MD}))},
    )
    entries = [e for e in store.governance.audit(AGENT) if e.skill in ("greeter", "hello")]
    actions = sorted({e.action for e in entries})
    assert actions == ["delete", "disable", "enable", "publish"], actions
    assert {e.scope for e in entries} == {SHARED, ALICE}
    assert len(entries) == 13, entries
    assert {e.actor for e in entries} == {"ops"}, entries


def test_activity_page_lists_filters_and_pages(client: Client, store: skillfs.Store) -> None:
    for i in range(130):
        store.publish(SHARED, "code-reviewer", _files(f"edit {i}"), actor="bot", message=f"m{i}")
    store.publish(ALICE, "greeter", {"SKILL.md": GOOD_MD}, actor="ana", message="for alice")
    page = client.get("/agents/support-bot/activity")
    assert page.status == 200
    rows = _activity_rows(page.text)
    assert len(rows) == 100 and rows[0][0] == "greeter" and rows[0][2] == "ana"
    assert rows[1] == ("code-reviewer", "v131", "bot", "m129")  # newest first
    assert "1–100 of 133 changes" in page.text
    by_bot = client.get("/agents/support-bot/activity?actor=bot&page=2")
    rows = _activity_rows(by_bot.text)
    assert len(rows) == 30 and {r[2] for r in rows} == {"bot"}
    assert "actor=bot" in by_bot.text.split('rel="prev"')[0].rsplit("href=", 1)[1]  # kept
    one = client.get("/agents/support-bot/activity?skill=greeter")
    assert [r[0] for r in _activity_rows(one.text)] == ["greeter"]
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert len(_activity_rows(client.get(f"/agents/support-bot/activity?until={today}").text))
    gone = client.get("/agents/support-bot/activity?until=2001-01-01")
    assert _activity_rows(gone.text) == [] and "No change matches these filters" in gone.text
    bad = client.get("/agents/support-bot/activity?since=yesterday")
    assert bad.status == 400 and "2026-11-24T09:30" in bad.text
    crossed = client.get("/agents/support-bot/activity?since=2026-02-01&until=2026-01-01")
    assert crossed.status == 400 and "after" in crossed.text
    assert client.get("/agents/support-bot/activity?skill=..").status == 400


def test_activity_times_are_taken_as_the_page_shows_them(
    client: Client, store: skillfs.Store
) -> None:
    """A row's own time, copied into "since" or "until", keeps that row; ISO 8601 with `Z` or
    an offset is taken too (converted to UTC)."""
    store.publish(ALICE, "greeter", {"SKILL.md": GOOD_MD}, actor="ana")
    page = client.get("/agents/support-bot/activity?skill=greeter")
    shown = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page.text)
    assert shown is not None
    at = datetime.strptime(shown.group(0), "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
    second, minute = at.strftime("%Y-%m-%dT%H:%M:%S"), at.strftime("%Y-%m-%dT%H:%M")
    local = at.astimezone(timezone(timedelta(hours=2))).strftime("%Y-%m-%dT%H:%M:%S+02:00")
    for when in (shown.group(0), second.replace("T", " "), second + "Z", minute + "+00:00"):
        for field in ("since", "until"):
            r = client.get(f"/agents/support-bot/activity?skill=greeter&{urlencode({field: when})}")
            assert r.status == 200 and len(_activity_rows(r.text)) == 1, (field, when)
    r = client.get(f"/agents/support-bot/activity?{urlencode({'until': local})}")
    assert r.status == 200 and len(_activity_rows(r.text)) >= 1  # 02:00 ahead, as UTC
    bad = client.get(f"/agents/support-bot/activity?{urlencode({'since': second + ' CET'})}")
    assert bad.status == 400 and "converted to UTC" in unescape(bad.text)


def test_activity_shows_only_what_the_token_may_read(client: Client, store: skillfs.Store) -> None:
    store.publish(ALICE, "greeter", {"SKILL.md": GOOD_MD}, actor="ana")
    store.publish(Scope.market("team"), "greeter", {"SKILL.md": GOOD_MD}, actor="mk")
    assert "mk" in client.get("/markets/team/activity").text
    reader = Client(client.app)
    reader.sign_in(READER)  # agent:support-bot:read
    assert "ana" in reader.get("/agents/support-bot/activity").text
    assert reader.get("/markets/team/activity").status == 403
    scoped = _user_client(store, "bob")
    page = scoped.get("/agents/support-bot/activity")
    assert page.status == 200 and "ana" not in page.text and "code-reviewer" in page.text
    assert "Only the scopes your token may read" in page.text


def test_disable_with_reason_and_enable(client: Client, store: skillfs.Store) -> None:
    v = store.manifest(SHARED, "code-reviewer").version
    stale = client.post(skill_url("code-reviewer", "disable"), {"expected": str(v - 1)})
    assert stale.status == 409 and "Nothing was written" in stale.text
    assert not store.manifest(SHARED, "code-reviewer").disabled
    r = client.post(
        skill_url("code-reviewer", "disable"), {"expected": str(v), "message": "leaks <keys>"}
    )
    assert r.status == 200 and "Disabled code-reviewer: leaks &lt;keys&gt;" in r.text
    assert 'id="disabled-banner"' in r.text and ">Enable</button>" in r.text
    m = store.manifest(SHARED, "code-reviewer")
    assert m.disabled and m.disabled_reason == "leaks <keys>" and m.actor == "ops"
    listing = client.get("/" + SHARED.prefix)
    assert 'class="is-disabled"' in listing.text and "badge disabled" in listing.text
    view = client.get("/agents/support-bot/users/alice/")
    assert 'data-skill="code-reviewer"' not in view.text
    assert 'data-left-out="code-reviewer"' in view.text and "leaks &lt;keys&gt;" in view.text
    again = client.post(skill_url("code-reviewer", "disable"), {"expected": str(m.version)})
    assert again.status == 409 and "already disabled" in again.text
    r = client.post(skill_url("code-reviewer", "enable"), {"expected": str(m.version)})
    assert r.status == 200 and "Enabled code-reviewer" in r.text
    assert 'data-skill="code-reviewer"' in client.get("/agents/support-bot/users/alice/").text


def test_hiding_entry_is_hidden_from_the_user_not_an_empty_skill(
    client: Client, store: skillfs.Store
) -> None:
    view = client.get("/agents/support-bot/users/alice/")
    assert "Hide from alice" in view.text
    r = client.post(
        skill_url("release-notes", "disable", scope=ALICE),
        {"expected": "0", "message": "not for alice", "back": "user"},
    )
    assert r.status == 200 and "Hid release-notes from alice: not for alice" in r.text
    assert 'data-skill="release-notes"' not in r.text  # back on the user view, without it
    assert 'data-left-out="release-notes"' in r.text and ">Unhide</button>" in r.text
    hole = store.manifest(ALICE, "release-notes")
    assert hole.disabled and not hole.files
    scope_page = client.get("/" + ALICE.prefix)
    assert 'id="skills"' not in scope_page.text  # no skill of alice's own
    assert "release-notes" in _rows(scope_page.text, "hidden-skills")
    assert "No skills here yet" in scope_page.text
    page = client.get(skill_url("release-notes", scope=ALICE))
    assert "hidden from this user" in page.text and "not for alice" in page.text
    assert "/agents/support-bot/shared/skills/release-notes/" in page.text  # what it hides
    assert 'id="files"' not in page.text  # not shown as a skill with no files
    agent = client.get("/agents/support-bot/")
    assert "hides release-notes" in agent.text
    assert re.search(r">alice</a></td>\s*<td>0</td>", agent.text)  # no skill of alice's own
    shared = client.get(skill_url("release-notes"))
    assert "hidden from alice" in shared.text
    clash = client.post(skill_url("release-notes", "override"), {"user": "alice", "expected": "1"})
    assert clash.status == 409 and "hidden from alice" in clash.text
    r = client.post(
        skill_url("release-notes", "enable", scope=ALICE), {"expected": str(hole.version)}
    )
    assert r.status == 200 and "no longer hidden from alice" in r.text
    assert "release-notes" not in store.manifests(ALICE)
    assert 'data-skill="release-notes"' in client.get("/agents/support-bot/users/alice/").text
    bad = client.post(
        skill_url("release-notes", "disable", scope=ALICE), {"expected": "0", "back": "/x"}
    )
    assert bad.status == 400 and "release-notes" not in store.manifests(ALICE)


def test_a_disabled_staged_only_skill_is_a_skill_not_a_hiding_entry(
    client: Client, store: skillfs.Store
) -> None:
    """Disabled with no live files but a staged candidate: a skill that is switched off (enable
    gives its candidate back), never a hiding entry (`Manifest.hides`)."""
    md = b"---\nname: fresh\ndescription: A new skill, staged only.\n---\n# Fresh\n"
    store.rollouts.stage(ALICE, "fresh", {"SKILL.md": md}, skillfs.Rollout(users=["alice"]))
    store.governance.disable(ALICE, "fresh", reason="hold")
    m = store.manifest(ALICE, "fresh")
    assert m.disabled and not m.files and m.candidate is not None and not m.hides
    scope_page = client.get("/" + ALICE.prefix)
    hidden = 'id="hidden-skills"' in scope_page.text
    assert not hidden or "fresh" not in _rows(scope_page.text, "hidden-skills")
    assert "fresh" in _rows(scope_page.text, "skills")  # listed as alice's (disabled) skill
    assert "hidden from this user" not in client.get(skill_url("fresh", scope=ALICE)).text
    store.governance.enable(ALICE, "fresh")
    assert store.manifest(ALICE, "fresh").candidate is not None  # not removed as a hole


def test_fsspec_does_not_show_a_hiding_entry_as_a_skill(store: skillfs.Store) -> None:
    store.governance.disable(ALICE, "release-notes", reason="not for alice")
    fs = fsspec.filesystem("skillfs", store=store, agent_id=AGENT, user_id="alice")
    assert fs.ls("skills", detail=False) == ["skills/code-reviewer"]
    assert not fs.exists("skills/release-notes")
    shared = fsspec.filesystem("skillfs", store=store, agent_id=AGENT)
    assert "skills/release-notes" in shared.ls("skills", detail=False)


def _files(body: str) -> dict[str, File]:
    return {
        "SKILL.md": File(
            f"---\nname: code-reviewer\ndescription: Reviews code.\n---\n\n{body}\n".encode()
        )
    }


def _activity_rows(html: str) -> list[tuple[str, ...]]:
    """(skill, version, actor, message) of each row of the Activity table."""
    if 'id="activity"' not in html:
        return []
    body = html.split('id="activity"', 1)[1].split("</table>", 1)[0]
    rows = []
    for tr in re.findall(r"<tr data-row>(.*?)</tr>", body, re.S):
        skill = re.search(r'class="skill-link"[^>]*>([^<]+)<', tr)
        version = re.search(r">(v\d+)<", tr)
        actor = re.search(r'<td class="actor"><a [^>]*>([^<]*)<', tr)
        message = re.search(r'<td class="desc">([^<]*)</td>', tr)
        assert skill and version and actor and message, tr
        rows.append((skill.group(1), version.group(1), actor.group(1), message.group(1)))
    return rows


def _user_client(store: skillfs.Store, user: str) -> Client:
    """A console session of a token that may read `user`'s scope and the shared scope."""
    grants = [f"agent:{AGENT}/shared:read", f"agent:{AGENT}/user:{user}:read"]
    return _scoped_client(store, grants)


def test_hide_a_market_skill_from_one_user(client: Client, store: skillfs.Store) -> None:
    md = GOOD_MD.replace(b"greeter", b"team-greeter")
    store.publish(Scope.market("team"), "team-greeter", {"SKILL.md": md})
    view = client.get("/agents/support-bot/users/alice/?market=team")
    assert 'data-skill="team-greeter"' in view.text
    r = client.post(
        skill_url("team-greeter", "disable", scope=ALICE),
        {"expected": "0", "message": "not for alice"},
    )
    assert r.status == 200 and "Hid team-greeter from alice" in r.text
    assert "market team" in r.text  # the hiding entry's page names what it hides
    view = client.get("/agents/support-bot/users/alice/?market=team")
    assert 'data-skill="team-greeter"' not in view.text
    assert 'data-left-out="team-greeter"' in view.text
    with skillfs.Skills(store, AGENT, "bob", layers=[skillfs.Market("team")]) as skills:
        assert "team-greeter" in skills.snapshot().prompt()


@pytest.mark.parametrize("engine", ["sqlite", "redis", "etcd"])
def test_governance_pages_on_real_engines(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The pages use only the Store API: one round of each write per engine, by `ops`."""
    from tests.stores import url_for

    real = skillfs.open_store(url_for(request, engine, tmp_path))
    tokens = Tokens(text=tokens_document([("ops", ADMIN, ["*:admin"])], "receipts"))
    app = make_app(real, tokens)
    try:
        real.publish(SHARED, "code-reviewer", example_files("code-reviewer"))
        c = Client(app)
        c.sign_in()
        r = c.post(skill_url("code-reviewer", "disable"), {"expected": "1", "message": "why"})
        assert r.status == 200 and real.manifest(SHARED, "code-reviewer").disabled
        c.post(skill_url("code-reviewer", "enable"), {"expected": "2"})
        text = md_text(real, "code-reviewer")
        form = {"path": "SKILL.md", "content": text + "\nv4\n", "base": "3", "expected": "3"}
        r = c.post(skill_url("code-reviewer", "save"), {**form, "canary": "1", "users": "alice"})
        assert r.status == 200 and real.manifest(SHARED, "code-reviewer").candidate is not None
        assert c.post(skill_url("code-reviewer", "promote"), {"expected": "4"}).status == 200
        real.drafts.propose(SHARED, "greeter", {"SKILL.md": GOOD_MD})
        r = c.post("/" + SHARED.prefix + "_drafts/greeter/approve", {"expected": "1"})
        assert r.status == 200 and "greeter" in real.skills(SHARED)
        rows = _activity_rows(c.get("/agents/support-bot/activity").text)
        ours = [r for r in rows if r[2] == "ops"]
        assert len(ours) >= 6, rows  # disable, enable, stage, promote, approve (skill and draft)
    finally:
        app.close()
        real.close()
