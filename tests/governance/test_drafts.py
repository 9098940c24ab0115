"""Drafts and review (docs/governance.md): propose, list, approve, reject, on memory, SQLite
and grpc:// (the `store` fixture): each one commit, drafts never in a worker's view, and bad
input refused with nothing written."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import Conflict, InvalidPath, InvalidSkill, NotFound, SkillfsError
from tests.governance.test_side_entries import write_legacy
from tests.helpers import skill_files as files
from tests.helpers import skill_md
from tests.runtime_helpers import view

ALICE = Scope.user("support-bot", "alice")
SHARED = Scope.shared("support-bot")


def who(store: skillfs.Store, claimed: str) -> str:
    return "admin" if store.url.startswith("grpc") else claimed


def test_propose_and_list_drafts_across_an_agents_scopes(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    done = store.drafts.propose(
        SHARED,
        "a",
        files("a", "better"),
        options=skillfs.WriteOptions(actor="agent:x", message="tighter"),
    )
    assert done.versions == {"_drafts/a": 1}
    store.drafts.propose(
        SHARED, "a", files("a", "best"), options=skillfs.WriteOptions(expected_version=1)
    )
    store.drafts.propose(ALICE, "mine", {"SKILL.md": b"no frontmatter"})
    store.drafts.propose(SHARED, "b", files("b"))
    drafts = {(d.scope, d.name): d for d in store.drafts.list("support-bot")}
    assert list(drafts) == [(SHARED, "a"), (SHARED, "b"), (ALICE, "mine")]
    a = drafts[(SHARED, "a")]
    assert (a.version, a.base_version, a.live_version, a.stale) == (2, 1, 1, False)
    assert drafts[(SHARED, "b")].base_version == 0
    assert drafts[(ALICE, "mine")].findings  # recorded, not refused
    assert [d.name for d in store.drafts.list(ALICE)] == ["mine"]
    first = store.manifest(SHARED, "_drafts/a", version=1)
    assert (first.actor, first.message) == (who(store, "agent:x"), "tighter")
    seen = view(store, "alice")
    assert list(seen) == ["a"] and "body" in seen["a"]
    assert store.skills(SHARED) == ["a"]


def test_approve_is_one_commit_and_removes_the_draft(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.drafts.propose(SHARED, "a", files("a", "better"))
    store.drafts.propose(SHARED, "new", files("new"))
    rev = store.revision("support-bot")
    done = store.drafts.approve(
        SHARED, "a", options=skillfs.WriteOptions(actor="reviewer", expected_version=1)
    )
    assert done.versions == {"_drafts/a": 2, "a": 2}
    assert store.revision("support-bot") > rev
    assert "better" in view(store, "alice")["a"]
    assert store.manifest(SHARED, "a").files == store.manifest(SHARED, "_drafts/a", 1).files
    assert [d.name for d in store.drafts.list(SHARED)] == ["new"]
    store.drafts.approve(SHARED, "new")
    assert sorted(view(store, "alice")) == ["a", "new"] and store.drafts.list(SHARED) == []
    actions = [(e.skill, e.action) for e in store.governance.audit(SHARED)]
    assert set(actions[:2]) == {("_drafts/new", "approve"), ("new", "approve")}
    assert set(actions[2:4]) == {("_drafts/a", "approve"), ("a", "approve")}
    assert ("_drafts/a", "propose") in actions


def test_approving_a_draft_whose_live_skill_moved_writes_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.drafts.propose(SHARED, "a", files("a", "draft"))
    store.drafts.propose(SHARED, "new", files("new"))
    store.publish(SHARED, "a", files("a", "meanwhile"))
    store.publish(SHARED, "new", files("new", "someone was faster"))
    assert all(d.stale for d in store.drafts.list(SHARED))
    rev = store.revision("support-bot")
    with pytest.raises(Conflict, match="against version 1 of it, the live skill is now version 2"):
        store.drafts.approve(SHARED, "a")
    with pytest.raises(Conflict, match="against no live skill, the live skill is now version 1"):
        store.drafts.approve(SHARED, "new")
    assert store.revision("support-bot") == rev
    assert "meanwhile" in view(store, "alice")["a"] and len(store.drafts.list(SHARED)) == 2
    store.delete(SHARED, "a")
    rev = store.revision("support-bot")
    with pytest.raises(Conflict, match="the live skill is now deleted"):
        store.drafts.approve(SHARED, "a")
    assert store.revision("support-bot") == rev
    store.drafts.propose(
        SHARED, "a", files("a", "draft"), options=skillfs.WriteOptions(expected_version=1)
    )  # proposed again
    assert store.drafts.approve(SHARED, "a").versions == {"_drafts/a": 3, "a": 4}
    assert "draft" in view(store, "alice")["a"]


def test_reject_keeps_the_reason_in_history_and_audit(store: skillfs.Store) -> None:
    store.drafts.propose(SHARED, "a", files("a"))
    done = store.drafts.reject(
        SHARED, "a", reason="duplicates b", options=skillfs.WriteOptions(actor="reviewer")
    )
    assert done.versions == {"_drafts/a": 2}
    assert store.drafts.list(SHARED) == []
    [gone, _proposed] = store.history(SHARED, "_drafts/a")
    assert gone.deleted and gone.message == "duplicates b" and gone.actor == who(store, "reviewer")
    assert [e.action for e in store.governance.audit(SHARED, skill="_drafts/a")] == [
        "reject",
        "propose",
    ]
    assert store.drafts.propose(
        SHARED, "a", files("a"), options=skillfs.WriteOptions(expected_version=0)
    ).versions == {"_drafts/a": 3}


def test_bad_draft_input_writes_nothing(store: skillfs.Store) -> None:
    store.drafts.propose(SHARED, "a", files("a"))
    rev = store.revision("support-bot")
    for bad in ("_x", ".x", "a/b", "", ".."):
        with pytest.raises(InvalidPath):
            store.drafts.propose(SHARED, bad, files("a"))
    with pytest.raises(InvalidSkill, match="breaks the Agent Skills spec"):
        store.drafts.propose(SHARED, "b", {"SKILL.md": b"no frontmatter"}, strict=True)
    with pytest.raises(NotFound, match="no draft 'zz' in shared:support-bot; drafts there: a"):
        store.drafts.approve(SHARED, "zz")
    with pytest.raises(NotFound, match="drafts there: a"):
        store.drafts.reject(SHARED, "zz")
    with pytest.raises(Conflict, match="changed since you read it"):
        store.drafts.approve(SHARED, "a", options=skillfs.WriteOptions(expected_version=7))
    with pytest.raises(Conflict, match="changed since you read it"):
        store.drafts.propose(
            SHARED, "a", files("a"), options=skillfs.WriteOptions(expected_version=0)
        )
    assert store.revision("support-bot") == rev  # every refusal above wrote nothing
    assert store.manifest(SHARED, "_drafts/a").version == 1
    store.drafts.propose(ALICE, "bad", {"SKILL.md": b"no frontmatter"})
    proposed = store.revision("support-bot")
    with pytest.raises(InvalidSkill):
        store.drafts.approve(ALICE, "bad", strict=True)
    assert store.revision("support-bot") == proposed  # the strict refusal wrote nothing
    assert store.skills(ALICE) == [] and [d.name for d in store.drafts.list(ALICE)] == ["bad"]
    assert [d.name for d in store.drafts.list(SHARED)] == ["a"] and store.skills(SHARED) == []


def test_legacy_drafts_are_listed_with_how_to_split_them(store: skillfs.Store) -> None:
    write_legacy(store, "_drafts", {"x/SKILL.md": skill_md("x")})
    [legacy] = store.drafts.list(SHARED)
    assert legacy.legacy and legacy.name == "x" and "split" in legacy.findings[0].message
    with pytest.raises(NotFound, match="split it into entries first"):
        store.drafts.approve(SHARED, "x")
    store.drafts.split_legacy(SHARED)
    [entry] = store.drafts.list(SHARED)
    assert not entry.legacy and entry.base_version == 0
    store.drafts.approve(SHARED, "x")
    assert list(view(store, "alice")) == ["x"]


def test_a_worker_sees_an_approval_at_its_next_step_and_never_a_draft(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    """One worker following the agent (C3): a draft, its new versions and a rejection
    change nothing it sees; the approval is in its next snapshot, and so is an archive."""
    store.publish(SHARED, "a", files("a"))
    with skillfs.Skills(store, "support-bot", "alice") as worker:
        first = worker.snapshot()
        other.drafts.propose(SHARED, "a", files("a", "proposed"))
        other.drafts.propose(ALICE, "b", files("b"))
        other.drafts.reject(ALICE, "b")
        step = worker.snapshot()
        assert [s.id for s in step.skills] == ["a"]
        assert step.read_bytes("a", "SKILL.md") == first.read_bytes("a", "SKILL.md")
        other.drafts.approve(SHARED, "a")
        assert b"proposed" in worker.snapshot().read_bytes("a", "SKILL.md")
        other.archive.add(SHARED, "a")
        assert worker.snapshot().skills == ()


def race(calls: list[Callable[[], object]]) -> list[object]:
    """Run the calls at once (a barrier), each result or SkillfsError in order."""
    results: list[object] = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            results[i] = calls[i]()
        except SkillfsError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_two_reviewers_approving_one_draft_at_once_write_it_once(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    """Both approve the same draft concurrently: one commit lands, the other finds no draft
    (and writes nothing), whatever the engine's retries do."""
    store.publish(SHARED, "a", files("a"))
    for round_ in range(3):
        store.drafts.propose(SHARED, "a", files("a", f"round {round_}"))
        results = race([lambda s=s: s.drafts.approve(SHARED, "a") for s in (store, other)])
        done = [r for r in results if isinstance(r, skillfs.CommitResult)]
        assert len(done) == 1, results
        assert any(isinstance(r, NotFound) for r in results), results
        assert store.manifest(SHARED, "a").version == round_ + 2
        assert f"round {round_}" in view(store, "alice")["a"]


def test_a_new_proposal_racing_an_approval_never_goes_live_unreviewed(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    """The reviewer approves version 1 of the draft while the agent proposes version 2:
    exactly one lands, and the live skill never holds the unreviewed version 2."""
    store.publish(SHARED, "a", files("a"))
    for round_ in range(3):
        draft = store.drafts.propose(SHARED, "a", files("a", f"reviewed {round_}")).version
        results = race(
            [
                lambda v=draft: store.drafts.approve(
                    SHARED, "a", options=skillfs.WriteOptions(expected_version=v)
                ),
                lambda v=draft: other.drafts.propose(
                    SHARED,
                    "a",
                    files("a", "unreviewed"),
                    options=skillfs.WriteOptions(expected_version=v),
                ),
            ]
        )
        approved, proposed = (isinstance(r, skillfs.CommitResult) for r in results)
        assert approved != proposed and all(
            isinstance(r, skillfs.CommitResult | Conflict) for r in results
        ), results
        live = view(store, "alice")["a"]
        assert "unreviewed" not in live
        assert (f"reviewed {round_}" in live) == approved
        if proposed:
            store.drafts.reject(SHARED, "a")
