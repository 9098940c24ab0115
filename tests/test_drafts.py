"""Drafts and review (docs/governance.md): propose, list, approve, reject, on every engine
and topology (the `store` fixture): each one commit, drafts never in a worker's view, and
bad input refused with nothing written."""

from __future__ import annotations

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import Conflict, InvalidPath, InvalidSkill, NotFound
from tests.helpers import skill_md
from tests.test_side_entries import write_legacy

ALICE = Scope.user("support-bot", "alice")
SHARED = Scope.shared("support-bot")


def files(name: str, body: str = "body") -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name, body=body), "references/r.md": b"ref\n"}


def view(store: skillfs.Store, user: str) -> dict[str, str]:
    with skillfs.Skills(store, "support-bot", user) as sk:
        snap = sk.snapshot()
        return {s.id: snap.read_bytes(s.id, "SKILL.md").decode() for s in snap.skills}


def who(store: skillfs.Store, claimed: str) -> str:
    return "admin" if store.url.startswith("grpc") else claimed


def test_propose_and_list_drafts_across_an_agents_scopes(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    done = store.propose(SHARED, "a", files("a", "better"), message="tighter", actor="agent:x")
    assert done.versions == {"_drafts/a": 1}
    store.propose(SHARED, "a", files("a", "best"), expected_version=1)
    store.propose(ALICE, "mine", {"SKILL.md": b"no frontmatter"})
    store.propose(SHARED, "b", files("b"))
    drafts = {(d.scope, d.name): d for d in store.drafts("support-bot")}
    assert list(drafts) == [(SHARED, "a"), (SHARED, "b"), (ALICE, "mine")]
    a = drafts[(SHARED, "a")]
    assert (a.version, a.base_version, a.live_version, a.stale) == (2, 1, 1, False)
    assert drafts[(SHARED, "b")].base_version == 0
    assert drafts[(ALICE, "mine")].findings  # recorded, not refused
    assert [d.name for d in store.drafts(ALICE)] == ["mine"]
    first = store.manifest(SHARED, "_drafts/a", version=1)
    assert (first.actor, first.message) == (who(store, "agent:x"), "tighter")
    seen = view(store, "alice")
    assert list(seen) == ["a"] and "body" in seen["a"]
    assert store.skills(SHARED) == ["a"]


def test_approve_is_one_commit_and_removes_the_draft(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.propose(SHARED, "a", files("a", "better"))
    store.propose(SHARED, "new", files("new"))
    rev = store.revision("support-bot")
    done = store.approve(SHARED, "a", expected_version=1, actor="reviewer")
    assert done.versions == {"_drafts/a": 2, "a": 2}
    assert store.revision("support-bot") > rev
    assert "better" in view(store, "alice")["a"]
    assert store.manifest(SHARED, "a").files == store.manifest(SHARED, "_drafts/a", 1).files
    assert [d.name for d in store.drafts(SHARED)] == ["new"]
    store.approve(SHARED, "new")
    assert sorted(view(store, "alice")) == ["a", "new"] and store.drafts(SHARED) == []
    actions = [(e.skill, e.action) for e in store.audit(SHARED)]
    assert set(actions[:2]) == {("_drafts/new", "approve"), ("new", "approve")}
    assert set(actions[2:4]) == {("_drafts/a", "approve"), ("a", "approve")}
    assert ("_drafts/a", "propose") in actions


def test_approving_a_draft_whose_live_skill_moved_writes_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.propose(SHARED, "a", files("a", "draft"))
    store.propose(SHARED, "new", files("new"))
    store.publish(SHARED, "a", files("a", "meanwhile"))
    store.publish(SHARED, "new", files("new", "someone was faster"))
    assert all(d.stale for d in store.drafts(SHARED))
    rev = store.revision("support-bot")
    with pytest.raises(Conflict, match="against version 1 of it, the live skill is now version 2"):
        store.approve(SHARED, "a")
    with pytest.raises(Conflict, match="against no live skill, the live skill is now version 1"):
        store.approve(SHARED, "new")
    assert store.revision("support-bot") == rev
    assert "meanwhile" in view(store, "alice")["a"] and len(store.drafts(SHARED)) == 2
    store.delete(SHARED, "a")
    rev = store.revision("support-bot")
    with pytest.raises(Conflict, match="the live skill is now deleted"):
        store.approve(SHARED, "a")
    assert store.revision("support-bot") == rev
    store.propose(SHARED, "a", files("a", "draft"), expected_version=1)  # proposed again
    assert store.approve(SHARED, "a").versions == {"_drafts/a": 3, "a": 4}
    assert "draft" in view(store, "alice")["a"]


def test_reject_keeps_the_reason_in_history_and_audit(store: skillfs.Store) -> None:
    store.propose(SHARED, "a", files("a"))
    done = store.reject(SHARED, "a", reason="duplicates b", actor="reviewer")
    assert done.versions == {"_drafts/a": 2}
    assert store.drafts(SHARED) == []
    [gone, _proposed] = store.history(SHARED, "_drafts/a")
    assert gone.deleted and gone.message == "duplicates b" and gone.actor == who(store, "reviewer")
    assert [e.action for e in store.audit(SHARED, skill="_drafts/a")] == ["reject", "propose"]
    assert store.propose(SHARED, "a", files("a"), expected_version=0).versions == {"_drafts/a": 3}


def test_bad_draft_input_writes_nothing(store: skillfs.Store) -> None:
    store.propose(SHARED, "a", files("a"))
    rev = store.revision("support-bot")
    for bad in ("_x", ".x", "a/b", "", ".."):
        with pytest.raises(InvalidPath):
            store.propose(SHARED, bad, files("a"))
    with pytest.raises(InvalidSkill, match="breaks the Agent Skills spec"):
        store.propose(SHARED, "b", {"SKILL.md": b"no frontmatter"}, strict=True)
    with pytest.raises(NotFound, match="no draft 'zz' in shared:support-bot; drafts there: a"):
        store.approve(SHARED, "zz")
    with pytest.raises(NotFound, match="drafts there: a"):
        store.reject(SHARED, "zz")
    with pytest.raises(Conflict, match="changed since you read it"):
        store.approve(SHARED, "a", expected_version=7)
    with pytest.raises(Conflict, match="changed since you read it"):
        store.propose(SHARED, "a", files("a"), expected_version=0)
    store.propose(ALICE, "bad", {"SKILL.md": b"no frontmatter"})
    with pytest.raises(InvalidSkill):
        store.approve(ALICE, "bad", strict=True)
    assert store.revision("support-bot") > rev  # only ALICE's draft was written
    assert [d.name for d in store.drafts(SHARED)] == ["a"] and store.skills(SHARED) == []


def test_legacy_drafts_are_listed_with_how_to_split_them(store: skillfs.Store) -> None:
    write_legacy(store, "_drafts", {"x/SKILL.md": skill_md("x")})
    [legacy] = store.drafts(SHARED)
    assert legacy.legacy and legacy.name == "x" and "split" in legacy.findings[0].message
    with pytest.raises(NotFound, match="split it into entries first"):
        store.approve(SHARED, "x")
    store.split_legacy(SHARED)
    [entry] = store.drafts(SHARED)
    assert not entry.legacy and entry.base_version == 0
    store.approve(SHARED, "x")
    assert list(view(store, "alice")) == ["x"]
