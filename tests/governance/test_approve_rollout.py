"""`store.drafts.approve(..., rollout=, into=)` (docs/governance.md): a draft straight into a staged
rollout, and into another scope of its agent (an agent's draft in a user's scope approved into
the shared scope), each in one commit that also removes the draft — on memory, SQLite and
grpc:// (the `store` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from skillfs import Rollout, Scope, Skills, Store
from skillfs.errors import Conflict, InvalidArgument
from skillfs.governance.rollout_rule import bucket
from tests.runtime_helpers import md

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
USERS = [f"u{i:02d}" for i in range(40)]


def counter(store: Store) -> int:
    rev = store.domain_revisions(["agents/bot"])["agents/bot"]
    return rev.counter if rev is not None else 0


def seen(store: Store, user: str) -> str | None:
    with Skills(store, "bot", user) as skills:
        snap = skills.snapshot()
        return snap.skill("faq").description if any(s.id == "faq" for s in snap.skills) else None


def test_a_users_draft_approved_into_the_shared_scope_as_a_canary(store: Store) -> None:
    store.publish(SHARED, "faq", {"SKILL.md": md("faq", "Old.")})
    store.drafts.propose(
        ALICE,
        "faq",
        {"SKILL.md": md("faq", "New.")},
        options=skillfs.WriteOptions(actor="agent:bot/alice"),
    )
    before = counter(store)
    done = store.drafts.approve(ALICE, "faq", rollout=Rollout(fraction=0.25), into=SHARED)
    assert counter(store) == before + 1  # the draft removed and the candidate staged: one commit
    assert done.versions == {"_drafts/faq": 2, "faq": 2}
    assert store.drafts.list(ALICE) == []
    m = store.manifest(SHARED, "faq")
    assert m.candidate is not None and m.candidate.rollout == Rollout(fraction=0.25)
    assert m.operation == "approve" and m.message == "approved as a canary for 25 % of users"
    inside = {u for u in USERS if bucket(SHARED, "faq", u) < 0.25}
    assert 0 < len(inside) < len(USERS)
    assert {u for u in USERS if seen(store, u) == "New."} == inside
    assert {seen(store, u) for u in set(USERS) - inside} == {"Old."}  # the rest: live
    store.rollouts.promote(SHARED, "faq")
    assert {seen(store, u) for u in USERS} == {"New."}


def test_approve_as_a_canary_in_the_drafts_own_scope_and_without_a_rollout(store: Store) -> None:
    store.drafts.propose(SHARED, "faq", {"SKILL.md": md("faq", "First.")})
    store.drafts.approve(SHARED, "faq", rollout=Rollout(users=["u01"]))
    assert seen(store, "u01") == "First." and seen(store, "u02") is None  # a new skill: no live
    store.rollouts.promote(SHARED, "faq")
    store.rollouts.stage(SHARED, "faq", {"SKILL.md": md("faq", "Staged.")}, Rollout(users=["u03"]))
    store.drafts.propose(SHARED, "faq", {"SKILL.md": md("faq", "Approved.")})
    store.drafts.approve(SHARED, "faq")  # live for everyone; the staged candidate stays
    assert (seen(store, "u02"), seen(store, "u03")) == ("Approved.", "Staged.")


def test_bad_approvals_write_nothing(store: Store) -> None:
    store.publish(SHARED, "faq", {"SKILL.md": md("faq", "Old.")})
    store.rollouts.stage(SHARED, "faq", {"SKILL.md": md("faq", "Staged.")}, Rollout(fraction=0.5))
    store.drafts.propose(ALICE, "faq", {"SKILL.md": md("faq", "New.")})
    before = counter(store)
    with pytest.raises(Conflict, match=r"already has a staged candidate .*promote or abort it"):
        store.drafts.approve(ALICE, "faq", rollout=Rollout(fraction=0.1), into=SHARED)
    with pytest.raises(InvalidArgument, match="one commit spans one agent"):
        store.drafts.approve(ALICE, "faq", into=Scope.shared("other-bot"))
    with pytest.raises(InvalidArgument, match="fraction"):
        store.drafts.approve(ALICE, "faq", rollout=Rollout.model_construct(fraction=2.0))
    with pytest.raises(InvalidArgument, match="cannot name bob"):
        store.drafts.approve(ALICE, "faq", rollout=Rollout(users=["bob"]))
    assert counter(store) == before
    assert [d.name for d in store.drafts.list(ALICE)] == ["faq"]


def test_an_agents_draft_approved_into_shared_records_both_actors(tmp_path: Path) -> None:
    store = skillfs.open_store(f"sqlite:///{tmp_path}/s.db")
    skills = Skills(store, "bot", "alice", skill_writes="draft")
    files = {"SKILL.md": md("faq", "New.").decode()}
    assert '"status": "draft"' in skills.snapshot().call_tool(
        "propose_skill", {"name": "faq", "files": files}
    )
    store.drafts.approve(ALICE, "faq", into=SHARED, options=skillfs.WriteOptions(actor="operator"))
    audit = store.governance.audit("bot")
    assert {(e.scope, e.skill, e.action, e.actor) for e in audit[:2]} == {
        (SHARED, "faq", "approve", "operator"),
        (ALICE, "_drafts/faq", "approve", "operator"),
    }  # one commit: the same time
    assert (audit[2].action, audit[2].actor) == ("propose", "agent:bot/alice")


@pytest.mark.parametrize("engine", ["sqlite", "grpc"])
def test_cli_approves_a_users_draft_into_shared_as_a_canary(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    from tests.cli_helpers import as_json, error_line, ok, run
    from tests.stores import url_for

    url = url_for(request, engine, tmp_path)
    with skillfs.open_store(url) as store:
        store.drafts.propose(ALICE, "faq", {"SKILL.md": md("faq", "New.")})
    mine = ("-s", "user:bot/alice")
    bad = run(url, "drafts", "approve", "faq", *mine, "--fraction", "1.5")
    assert "invalid rollout fraction 1.5" in " ".join(error_line(bad, 2).replace("│", " ").split())
    line = ok(url, "drafts", "approve", "faq", *mine, "--into", "shared:bot", "--fraction", "0.1")
    assert "approved faq as a canary for 10 % of users in shared:bot" in line.stdout
    with skillfs.open_store(url) as store:
        m = store.manifest(SHARED, "faq")
        assert m.candidate is not None and m.candidate.rollout == Rollout(fraction=0.1)
        assert store.drafts.list(ALICE) == []
    assert as_json(url, "drafts", "ls", *mine) == []
