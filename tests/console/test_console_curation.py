"""The curation page through ASGI calls (docs/console.md, "Curation"): archive a skill from
its page, the archive listed with who and why, restore, and a restore onto a live skill
refused with nothing written."""

from __future__ import annotations

import time

import skillfs
from skillfs.model import File, Scope
from skillfs.model.names import archive_entry
from tests.console.test_console import (
    AGENT,
    READER,
    SHARED,
    Client,
    _scoped_client,
    console_store,  # noqa: F401  (a fixture)
    skill_url,
)
from tests.console.test_console_governance import ops_client  # noqa: F401  (a fixture)

CURATION = "/agents/support-bot/curation"
SWITCHED_OFF = b"---\nname: switched-off\ndescription: Off for now.\n---\n"


def test_archive_from_the_skill_page_and_restore(client: Client, store: skillfs.Store) -> None:
    v = store.manifest(SHARED, "release-notes").version
    page = client.get(skill_url("release-notes"))
    assert 'id="archive-form"' in page.text
    r = client.post(
        skill_url("release-notes", "archive"), {"expected": str(v), "message": "unused"}
    )
    assert r.status == 200 and "Archived release-notes: unused" in r.text
    assert 'data-archived="release-notes"' in r.text and ">ops<" in r.text
    assert "release-notes" not in store.skills(SHARED)
    with skillfs.Skills(store, AGENT, "alice") as skills:
        assert "release-notes" not in skills.snapshot().prompt()
    assert ".archive" not in client.get("/" + SHARED.prefix).text  # not a skill of the scope

    entry = store.manifest(SHARED, archive_entry("release-notes"))
    restore = "/" + SHARED.prefix + ".archive/release-notes/restore"
    stale = client.post(restore, {"expected": str(entry.version + 1)})
    assert stale.status == 409 and "release-notes" not in store.skills(SHARED)
    r = client.post(restore, {"expected": str(entry.version)})
    assert r.status == 200 and "Restored release-notes from the archive" in r.text
    assert "release-notes" in store.skills(SHARED)
    assert "Nothing is archived" in client.get(CURATION).text
    actions = [e.action for e in store.governance.audit(AGENT, actor="ops")]
    assert actions.count("archive") == 2 and actions.count("restore") == 2, actions


def test_restore_onto_a_live_skill_writes_nothing(client: Client, store: skillfs.Store) -> None:
    store.archive.add(SHARED, "release-notes", "old")
    md = b"---\nname: release-notes\ndescription: Written again.\n---\n"
    store.publish(SHARED, "release-notes", {"SKILL.md": File(md)})
    entry = store.manifest(SHARED, archive_entry("release-notes"))
    r = client.post(
        "/" + SHARED.prefix + ".archive/release-notes/restore", {"expected": str(entry.version)}
    )
    assert r.status == 409 and "Nothing was written" in r.text
    assert store.read(SHARED, "release-notes", "SKILL.md") == md
    reader = Client(client.app)
    reader.sign_in(READER)
    page = reader.get(CURATION)
    assert 'data-archived="release-notes"' in page.text and ">Restore</button>" not in page.text
    user = Scope.user(AGENT, "alice")
    store.publish(user, "mine", {"SKILL.md": File(md.replace(b"release-notes", b"mine"))})
    store.archive.add(user, "mine")
    assert 'data-archived="mine"' in client.get(CURATION).text


def test_report_and_apply(client: Client, store: skillfs.Store) -> None:
    """Both example skills were committed now; seen 100 days later, release-notes (unused)
    is to archive and code-reviewer (used 10 days ago) is not even stale."""
    later = time.time() + 100 * 86400
    store.usage.record(
        AGENT, {("alice", "code-reviewer"): 3}, {("alice", "code-reviewer"): later - 10 * 86400}
    )
    store.publish(SHARED, "switched-off", {"SKILL.md": File(SWITCHED_OFF)})
    store.governance.disable(SHARED, "switched-off")
    store.clock = lambda: later
    page = client.get(CURATION)
    assert page.status == 200
    to_archive = page.text.split('id="to-archive"', 1)[1].split("</table>", 1)[0]
    assert 'data-skill="release-notes"' in to_archive and "never used" in to_archive
    assert "Archive these 1<" in page.text  # what applying archives: not the disabled skill
    kept = page.text.split('id="kept"', 1)[1].split("</table>", 1)[0]
    assert 'data-skill="switched-off"' in kept and "kept though idle 90 days" in kept
    assert 'data-skill="code-reviewer"' not in page.text
    assert "Nothing stale." in page.text
    shorter = client.get(CURATION + "?stale_after=1d&archive_after=200d")
    assert 'id="to-archive"' not in shorter.text
    stale = shorter.text.split('id="stale"', 1)[1].split("</table>", 1)[0]
    assert 'data-skill="release-notes"' in stale and 'data-skill="code-reviewer"' in stale
    bad = client.get(CURATION + "?stale_after=9d&archive_after=2d")
    assert bad.status == 400 and "shorter than stale_after" in bad.text

    reader = Client(client.app)
    reader.sign_in(READER)
    assert "needs an admin grant" in reader.get(CURATION).text
    denied = reader.post(CURATION, {"stale_after": "30d", "archive_after": "90d"})
    assert denied.status == 403 and "release-notes" in store.skills(SHARED)

    r = client.post(CURATION, {"stale_after": "30d", "archive_after": "90d"})
    assert r.status == 200 and "Archived 1 idle skill: release-notes" in r.text
    assert "release-notes" not in store.skills(SHARED) and "code-reviewer" in store.skills(SHARED)
    assert 'data-archived="release-notes"' in r.text
    archived = next(e for e in store.governance.audit(AGENT) if e.action == "archive")
    assert archived.actor == "ops"


def test_a_market_report_needs_every_agents_usage(client: Client, store: skillfs.Store) -> None:
    """A market's report pools every agent's usage by skill name: a token that administers
    the market alone could name a skill of its market after another agent's private one and
    read that agent's use of it off the page (outside testing). It needs `*:admin`, as the
    `Usage` calls of `skillfs curate markets/M` over gRPC do."""
    md = SWITCHED_OFF.replace(b"switched-off", b"secret-project")
    store.publish(Scope.market("team"), "secret-project", {"SKILL.md": File(md)})
    page = _scoped_client(store, ["market:team:admin"]).get("/markets/team/curation")
    assert page.status == 200 and 'id="report"' not in page.text
    assert 'id="report"' in client.get("/markets/team/curation").text  # *:admin


def test_drop_usage_from_the_curation_page(client: Client, store: skillfs.Store) -> None:
    """An admin drops a user's usage from the curation page with a reason (required), the
    drop is listed with who and why; a reader may not."""
    store.usage.record(AGENT, {("alice", "code-reviewer"): 3, ("bob", "code-reviewer"): 1})
    page = client.get(CURATION)
    assert 'id="drop-usage-form"' in page.text and 'id="drops"' not in page.text
    drop = CURATION.replace("curation", "usage/drop")
    reader = Client(client.app)
    reader.sign_in(READER)
    assert reader.post(drop, {"user": "alice", "message": "spam"}).status == 403
    assert client.post(drop, {"user": "alice", "message": " "}).status == 400
    r = client.post(drop, {"user": "alice", "skill": "", "message": "made-up loads"})
    assert r.status == 200 and "Dropped 1 usage counter of support-bot: made-up loads" in r.text
    assert store.usage.counts(AGENT) == {("bob", "code-reviewer"): 1}
    listed = r.text.split('id="drops"', 1)[1].split("</table>", 1)[0]
    assert ">ops<" in listed and "made-up loads" in listed and ">alice<" in listed
