"""Curation (docs/governance.md, "Curation"): the report of stale skills, skills to archive and
near-duplicate pairs with their reasons, on memory, SQLite and grpc:// (the `store` fixture,
with skills committed by a store whose clock is in the past and usage at chosen times);
applying it archives (restorable) and never a skill used meanwhile; bad input writes nothing;
`skillfs curate` on SQLite. The similarity join and durations are in tests/unit."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import InvalidArgument, NotFound
from skillfs.governance.curation_report import SkillRef, near_duplicates
from skillfs.util.similarity import shingles
from tests.cli_helpers import as_json, ok, run
from tests.helpers import skill_md

BOT = "support-bot"
SHARED, ALICE, BOB = Scope.shared(BOT), Scope.user(BOT, "alice"), Scope.user(BOT, "bob")
MARKET = Scope.market("team")
DAY = 86400.0
NOW = time.time()  # the report's `now`; usage is recorded at times before it
REVIEW = (
    "Read the diff carefully. Check each changed function for missing tests, unclear names "
    "and unhandled errors. Report every finding as a list with its file and line."
)


def _md(name: str, description: str, body: str) -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name, body, description=description)}


def _aged(url: str, days: float) -> skillfs.Store:
    """A client of the same store whose commits are stamped `days` before NOW."""
    return skillfs.open_store(url, clock=lambda: NOW - days * DAY, actor="setup")


@pytest.fixture
def fleet(store: skillfs.Store, store_url: str) -> Iterator[skillfs.Store]:
    """An agent whose skills were committed 200 days ago (one today), used at chosen times:

    review       shared, used by bob an hour ago                      -> kept
    review-copy  shared, nearly review, never used                    -> to archive, duplicate
    deploy       shared, used by alice 40 days ago                    -> stale
    notes        alice's own, never used                              -> to archive
    off          shared, disabled 200 days ago                        -> kept (disabled), skipped
    today        shared, committed today, never used                  -> kept
    bob hides deploy from himself (an entry without files)            -> not a skill, left out
    """
    with _aged(store_url, 200) as old:
        review = _md("review", "Reviews code changes for bugs and style", REVIEW)
        old.publish(SHARED, "review", review)
        old.publish(
            SHARED,
            "review-copy",
            _md("review-copy", "Reviews code changes for bugs.", REVIEW + " Be kind."),
        )
        old.publish(SHARED, "deploy", _md("deploy", "Deploys the service", "Run make deploy."))
        old.publish(ALICE, "notes", _md("notes", "Takes meeting notes", "Write down owners."))
        old.publish(SHARED, "off", _md("off", "An old experiment", "Try things."))
        old.governance.disable(SHARED, "off", reason="superseded")
        old.governance.disable(BOB, "deploy", reason="not for bob")
    store.publish(SHARED, "today", _md("today", "Brand new", "Fresh instructions."))
    store.usage.record(
        BOT,
        {("bob", "review"): 4, ("alice", "deploy"): 2},
        {("bob", "review"): NOW - 3600, ("alice", "deploy"): NOW - 40 * DAY},
    )
    yield store


def _names(items: list[skillfs.CuratedSkill]) -> list[str]:
    return [f"{i.scope}/{i.skill}" for i in items]


def test_report(fleet: skillfs.Store) -> None:
    report = fleet.curation.run(BOT, now=NOW)
    assert report.domain == f"agents/{BOT}" and report.dry_run and report.skills == 6
    assert (report.stale_after, report.archive_after) == (30 * DAY, 90 * DAY)
    assert _names(report.stale) == [f"{SHARED}/deploy"]
    (deploy,) = report.stale
    assert deploy.uses == 2 and deploy.last_used == pytest.approx(NOW - 40 * DAY)
    assert deploy.reason == "last used 40 days ago: stale (idle 30 days or more)"
    assert sorted(_names(report.to_archive)) == [f"{SHARED}/review-copy", f"{ALICE}/notes"]
    why = {i.skill: i for i in report.to_archive}
    assert why["notes"].last_used is None and why["notes"].uses == 0
    assert why["notes"].reason == (
        "never used; version 1 committed 200 days ago: to archive (idle 90 days or more)"
    )
    # a disabled skill is always idle and never archived: the report says so, not "to archive"
    (off,) = report.skipped
    assert off.disabled and off.reason == (
        "never used; version 2 committed 200 days ago; disabled (superseded): kept though idle "
        "90 days or more: archiving it would end the hole it makes over any lower layer's "
        "skill of that name"
    )
    assert why["review-copy"].idle_seconds == pytest.approx(200 * DAY, abs=5)
    (pair,) = report.duplicates
    assert report.duplicates_total == 1
    assert (pair.a.skill, pair.b.skill) == ("review", "review-copy")
    assert pair.description_similarity == pytest.approx(5 / 7, abs=0.001)  # under 0.8
    assert pair.body_similarity == pytest.approx(25 / 27, abs=0.001)
    assert pair.reason == "SKILL.md bodies 93% alike; merge them or tell them apart"
    assert fleet.skills(SHARED) == ["deploy", "off", "review", "review-copy", "today"]  # a report
    assert skillfs.CurationReport.model_validate_json(report.model_dump_json()) == report
    assert fleet.curation.run(f"agents/{BOT}", now=NOW) == report  # by domain; deterministic


def test_windows_and_threshold(fleet: skillfs.Store) -> None:
    wide = fleet.curation.run(BOT, stale_after="1d", archive_after="300d", now=NOW)
    assert sorted(i.skill for i in wide.stale) == ["deploy", "notes", "off", "review-copy"]
    assert wide.to_archive == []  # nothing idle 300 days
    assert fleet.curation.run(BOT, duplicate_threshold=0.99, now=NOW).duplicates == []
    later = fleet.curation.run(
        BOT, stale_after=3600 * 2, archive_after=3600 * 3, now=NOW + 3 * 3600
    )
    assert "review" in {i.skill for i in later.to_archive}  # its last use is 4 hours ago then
    with pytest.raises(InvalidArgument, match="129600 seconds is shorter than stale_after 131400"):
        fleet.curation.run(
            BOT, stale_after=36.5 * 3600, archive_after=36 * 3600
        )  # review: "1 day 12
        # hours is shorter than 1 day 12 hours"


def test_apply_archives_restorably(fleet: skillfs.Store) -> None:
    report = fleet.curation.run(
        BOT, dry_run=False, now=NOW, options=skillfs.WriteOptions(actor="curator:test")
    )
    assert not report.dry_run and _names(report.skipped) == [f"{SHARED}/off"]
    assert "kept though idle 90 days or more: archiving it would end" in report.skipped[0].reason
    assert sorted(_names(report.archived)) == sorted(_names(report.to_archive))
    assert fleet.skills(SHARED) == ["deploy", "off", "review", "today"]
    assert fleet.manifest(SHARED, "off").disabled  # an operator's hole stays where it is
    assert fleet.skills(ALICE) == []
    notes = fleet.manifest(ALICE, ".archive/notes")
    assert notes.files  # moved, files kept
    actor = "admin" if fleet.url.startswith("grpc") else "curator:test"  # a server: its token
    assert notes.actor == actor and "curation: idle 200 days" in notes.message
    audit = fleet.governance.audit(BOT, actor=actor)
    assert {(str(e.scope), e.skill) for e in audit} >= {(str(ALICE), "notes")}
    again = fleet.curation.run(BOT, dry_run=False, now=NOW)
    assert again.skills == 4 and again.to_archive == [] and again.archived == []
    assert _names(again.skipped) == [f"{SHARED}/off"]
    fleet.archive.restore(ALICE, "notes")
    assert fleet.skills(ALICE) == ["notes"]
    assert fleet.read(ALICE, "notes", "SKILL.md") == skill_md(
        "notes", "Write down owners.", description="Takes meeting notes"
    )


def test_a_skill_rolling_out_is_kept_though_idle(fleet: skillfs.Store, store_url: str) -> None:
    """Outside testing: `--apply` archived a skill whose staged candidate was rolling out to
    alice (the archive carries it, but the rollout ended without anyone deciding it). It is
    kept, as a rename of it is refused."""
    with _aged(store_url, 200) as old:
        canary = _md("review-copy", "Reviews code changes, a new flow", "Do it the new way.")
        old.rollouts.stage(SHARED, "review-copy", canary, skillfs.Rollout(users=("alice",)))
    report = fleet.curation.run(BOT, dry_run=False, now=NOW)
    kept = {i.skill: i.reason for i in report.skipped}
    assert "a staged candidate is rolling out" in kept["review-copy"]
    assert f"{SHARED}/review-copy" not in _names(report.archived)
    assert fleet.manifest(SHARED, "review-copy").candidate is not None


def test_apply_refuses_a_bad_actor_first(fleet: skillfs.Store) -> None:
    """Outside testing: each archive refused the actor, the call reported every skill as
    skipped instead of saying what was wrong."""
    with pytest.raises(InvalidArgument, match="actor"):
        fleet.curation.run(
            BOT, dry_run=False, now=NOW, options=skillfs.WriteOptions(actor="bad\nactor")
        )
    assert "review-copy" in fleet.skills(SHARED)


@pytest.mark.parametrize("given", [{"expected_version": 3}, {"commit_id": "once"}])
def test_apply_refuses_options_it_cannot_keep(fleet: skillfs.Store, given: dict) -> None:
    """A run makes one commit per skill, each on the version it reads: one expected version
    or one commit id for all of them would be ignored or reused, so it is refused first."""
    with pytest.raises(InvalidArgument, match="an actor and a message only"):
        fleet.curation.run(BOT, dry_run=False, now=NOW, options=skillfs.WriteOptions(**given))
    assert "review-copy" in fleet.skills(SHARED)


def test_apply_says_why_before_each_reason(fleet: skillfs.Store) -> None:
    """The caller's message (the console's form) starts each archive's message, its own
    reason after it; one too long to leave room for the reasons is refused first."""
    with pytest.raises(InvalidArgument, match="curation message is at most 3896 characters"):
        fleet.curation.run(
            BOT, dry_run=False, now=NOW, options=skillfs.WriteOptions(message="x" * 3897)
        )
    assert fleet.skills(ALICE) == ["notes"]
    fleet.curation.run(
        BOT, dry_run=False, now=NOW, options=skillfs.WriteOptions(message="spring cleaning")
    )
    notes = fleet.manifest(ALICE, ".archive/notes")
    assert notes.message.startswith("spring cleaning — curation: idle 200 days"), notes.message


def test_apply_skips_a_skill_used_meanwhile(fleet: skillfs.Store, store_url: str) -> None:
    """A worker records a use of the first skill to archive after the report is made and
    before it is archived: curation reads the use again and leaves that skill in place."""
    archivable = fleet.curation.run(BOT, now=NOW).to_archive
    first = min(archivable, key=lambda i: (str(i.scope), i.skill))
    user = first.scope.user_id or "carol"
    calls = itertools.count()

    def clock() -> float:
        if next(calls) == 1:  # the re-check before the first archive
            with skillfs.open_store(store_url) as worker:
                worker.usage.record(BOT, {(user, first.skill): 1}, {(user, first.skill): NOW})
        return NOW

    with skillfs.open_store(store_url, clock=clock) as curator:
        report = curator.curation.run(BOT, dry_run=False)
    assert _names(report.skipped) == [f"{SHARED}/off", f"{first.scope}/{first.skill}"]
    assert report.skipped[1].reason.endswith("used or changed 0 seconds ago meanwhile, kept")
    assert len(report.archived) == len(report.to_archive) - 1
    assert first.skill in fleet.skills(first.scope)


def test_a_window_that_overlaps_a_usage_drop_is_unknown(fleet: skillfs.Store) -> None:
    """Usage dropped now, curated 50 days later: a skill the drop covers is idle since the
    drop at most (its reason says the time before is not known), so it is stale, not to
    archive, and applying the report leaves it; a drop of another user's usage leaves a
    user's own skill alone. (The drop's time is the store's clock: a server's own.)"""
    dropped = fleet.usage.drop(BOT, users=["bob"], reason="made-up names").at
    later = dropped + 50 * DAY
    report = fleet.curation.run(BOT, now=later)
    assert _names(report.to_archive) == [f"{ALICE}/notes"]  # bob's drop: not alice's use
    copy = next(i for i in report.stale if i.skill == "review-copy")
    assert copy.idle_seconds == pytest.approx(50 * DAY, abs=60)
    assert copy.reason.startswith("never used; version 1 committed 250 days ago; its usage was ")
    assert copy.idle_since == dropped
    assert "dropped 50 days ago by " in copy.reason and "(made-up names): not known before" in (
        copy.reason
    )
    applied = fleet.curation.run(BOT, now=later, dry_run=False)
    assert _names(applied.archived) == [f"{ALICE}/notes"]
    assert "review-copy" in fleet.skills(SHARED)


def test_market_skills_by_every_agents_use(store: skillfs.Store, store_url: str) -> None:
    """A market skill is used when any agent used it, also one holding no skill of its own."""
    with _aged(store_url, 100) as old:
        old.publish(MARKET, "used", _md("used", "Used by one agent", "Body one."))
        old.publish(MARKET, "unused", _md("unused", "Used by nobody", "Body two."))
        if store_url.startswith("grpc"):  # a server lists only the agents holding skills
            old.publish(Scope.shared("other-bot"), "x", _md("x", "Its own", "Body three."))
    store.usage.record("other-bot", {("u", "used"): 1}, {("u", "used"): NOW - DAY})
    report = store.curation.run("markets/team", now=NOW)
    assert [i.skill for i in report.to_archive] == ["unused"]
    assert report.stale == []


def test_bad_input_writes_nothing(fleet: skillfs.Store) -> None:
    for kwargs, says in [
        ({"stale_after": "90d", "archive_after": "30d"}, "shorter than stale_after"),
        ({"stale_after": "soon"}, "invalid stale_after 'soon'"),
        ({"archive_after": -5}, "invalid archive_after -5"),
        ({"stale_after": 0}, "invalid stale_after 0"),
        ({"duplicate_threshold": 1.5}, r"not in \(0, 1\]"),
    ]:
        with pytest.raises(InvalidArgument, match=says):
            fleet.curation.run(BOT, dry_run=False, now=NOW, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(NotFound, match="agents/nobody has never held a skill"):
        fleet.curation.run("nobody", dry_run=False, now=NOW)
    with pytest.raises(InvalidArgument, match="invalid domain"):
        fleet.curation.run("teams/x", now=NOW)
    assert fleet.skills(SHARED) == ["deploy", "off", "review", "review-copy", "today"]
    assert fleet.skills(ALICE) == ["notes"]


# ---------------------------------------------------------------------------- pure parts


def test_near_duplicates_are_deterministic(fleet: skillfs.Store) -> None:
    first = fleet.curation.run(BOT, now=NOW).duplicates
    assert fleet.curation.run(BOT, now=NOW).duplicates == first
    assert shingles("Deploy the  service, then WATCH.", 2) == frozenset(
        {"deploy the", "the service", "service then", "then watch"}
    )
    assert shingles("one", 3) == frozenset() and shingles("", 3) == frozenset()
    assert shingles("one two three", 3) == frozenset({"one two three"})
    todo = [SkillRef(scope=SHARED, skill=n) for n in ("a", "b")]  # outside testing: stubs
    assert near_duplicates(todo, ["Deploys things", "Reviews code"], ["TODO", "TODO"]) == ([], 0)


# ---------------------------------------------------------------------------- the CLI


def test_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    with _aged(url, 200) as old:
        old.publish(SHARED, "old", _md("old", "Old one", "Old body."))
        old.publish(SHARED, "kept", _md("kept", "Kept one", "Kept body."))
        old.usage.record(BOT, {("u", "kept"): 1}, {("u", "kept"): time.time() - 40 * DAY})
        old.publish(SHARED, "off", _md("off", "Switched off", "Off body."))
        old.governance.disable(SHARED, "off")
    text = ok(url, "curate").stdout
    assert f"agents/{BOT}: 3 skills, 1 stale skill, 1 to archive" in text
    assert "pairs, 1 kept (a report: --apply archives)" in text
    assert f"archive    shared:{BOT}/old: never used; version 1 committed 200 days ago" in text
    assert f"skipped    shared:{BOT}/off: never used" in text and "kept though idle" in text
    assert f"stale      shared:{BOT}/kept: last used 40 days ago" in text
    (data,) = as_json(url, "curate", BOT, "--archive-after", "300d")
    assert data["to_archive"] == [] and data["stale"][1]["scope"] == f"shared:{BOT}"
    assert [i["skill"] for i in data["stale"]] == ["kept", "off", "old"]
    bad = run(url, "curate", "--stale-after", "7x")
    assert bad.exit_code == 2 and "invalid --stale-after '7x'" in bad.stderr
    bad = run(url, "curate", "--stale-after", "36h", "--archive-after", "25h")
    assert bad.exit_code == 2  # outside testing: exit 1, "1 day is shorter than 1 day"
    assert "25h is shorter than --stale-after 36h" in " ".join(bad.stderr.split())
    (applied,) = as_json(url, "curate", BOT, "--apply")
    assert [i["skill"] for i in applied["archived"]] == ["old"]
    assert ok(url, "ls", "--scope", f"shared:{BOT}").stdout.count("kept") == 1
    assert "archived 0, skipped 1" in ok(url, "curate", BOT, "--apply").stdout
