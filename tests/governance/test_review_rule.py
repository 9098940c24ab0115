"""The two-person rule (docs/governance.md, "The two-person rule"): a scope setting under which
every write serving new files goes through a draft another actor approves, held by the
Committer for every write — on memory, SQLite, Redis, etcd and PostgreSQL (`grpc://`, where
the actor is the token's: tests/server/test_server_review.py). Refusals write nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Rollout, Scope, Store, WriteOptions
from skillfs.errors import FailedPrecondition, InvalidArgument, ReviewRequired
from skillfs.model.ops import Put
from tests.runtime_helpers import md, view
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
ANA, BOB = WriteOptions(actor="ana"), WriteOptions(actor="bob")


@pytest.fixture(params=["memory", "sqlite", "redis", "etcd", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    yield s
    s.close()


def skill(name: str, body: str = "") -> dict[str, bytes]:
    return {"SKILL.md": md(name, f"Does {name} things.", body)}


def test_live_writes_need_another_persons_approval(store: Store) -> None:
    store.publish(SHARED, "triage", skill("triage", "v0"))
    store.publish(SHARED, "triage", skill("triage", "v1"))
    assert not store.review.rule(SHARED).required
    store.review.require(SHARED, options=WriteOptions(actor="ana", message="audit finding 7"))
    rule = store.review.rule(SHARED)
    assert (rule.required, rule.actor, rule.message) == (True, "ana", "audit finding 7")
    assert store.skills(SHARED) == ["triage"]  # the setting is no skill, nor in a view
    assert view(store, "u") == {"triage": md("triage", "Does triage things.", "v1").decode()}
    before = store.revision(AGENT)
    direct = {
        "publish": lambda: store.publish(SHARED, "triage", skill("triage", "v2"), actor="bob"),
        "new skill": lambda: store.publish(SHARED, "new", skill("new"), actor="bob"),
        "edit": lambda: store.edits.edit_file(
            SHARED, "triage", "notes.md", b"x", base=None, options=BOB
        ),
        "rollback": lambda: store.edits.rollback(SHARED, "triage", 1, options=BOB),
        "rename": lambda: store.edits.rename(SHARED, "triage", "sorting", options=BOB),
        "stage": lambda: store.rollouts.stage(
            SHARED, "triage", skill("triage", "v2"), Rollout(fraction=0.5), options=BOB
        ),
        "import": lambda: store.edits.import_skills(
            SHARED, {"x": skill("x")}, source="git:x", options=BOB
        ),
    }
    for what, write in direct.items():
        with pytest.raises(ReviewRequired, match=r"requires review .* turned on by ana"):
            write()
        assert store.revision(AGENT) == before, what
    # a user's scope is not under the shared scope's rule
    store.publish(ALICE, "mine", skill("mine"), actor="bob")

    store.drafts.propose(SHARED, "triage", skill("triage", "v2"), options=BOB)
    with pytest.raises(ReviewRequired, match=r"'bob' wrote the draft of triage .* cannot approve"):
        store.drafts.approve(SHARED, "triage", options=BOB)
    assert store.manifest(SHARED, "triage").version == 2
    store.drafts.approve(SHARED, "triage", options=ANA)
    assert b"v2" in store.read(SHARED, "triage", "SKILL.md")
    assert store.manifest(SHARED, "triage").actor == "ana"

    # as a canary: the approval stages it; widen and promote serve what was approved
    store.drafts.propose(SHARED, "triage", skill("triage", "v3"), options=BOB)
    store.drafts.approve(SHARED, "triage", rollout=Rollout(fraction=0.1), options=ANA)
    store.rollouts.widen(SHARED, "triage", Rollout(fraction=0.5), options=BOB)
    store.rollouts.promote(SHARED, "triage", options=BOB)
    assert b"v3" in store.read(SHARED, "triage", "SKILL.md")
    # withdrawals stay immediate: disable, enable, abort, delete
    store.governance.disable(SHARED, "triage", "leaks", options=BOB)
    assert store.manifest(SHARED, "triage").disabled
    store.governance.enable(SHARED, "triage", options=BOB)
    assert not store.manifest(SHARED, "triage").disabled
    store.drafts.propose(SHARED, "triage", skill("triage", "v4"), options=BOB)
    store.drafts.approve(SHARED, "triage", rollout=Rollout(fraction=0.1), options=ANA)
    store.rollouts.abort(SHARED, "triage", options=BOB)
    assert store.manifest(SHARED, "triage").candidate is None
    store.edits.delete(SHARED, "triage", options=BOB)
    assert "triage" not in store.skills(SHARED)

    store.review.lift(SHARED, options=ANA)
    assert not store.review.rule(SHARED).required
    store.publish(SHARED, "new", skill("new"), actor="bob")  # live again
    actions = [(e.skill, e.action, e.actor) for e in store.governance.audit(SHARED)]
    assert ("_settings/review", "require-review", "ana") in actions
    assert actions[1] == ("_settings/review", "lift-review", "ana")


def test_an_approval_serves_the_drafts_files_only(store: Store) -> None:
    """A commit that says it approves a draft but serves other files is a direct write."""
    store.review.require(SHARED, options=ANA)
    store.drafts.propose(SHARED, "s", skill("s", "reviewed"), options=BOB)
    forged = store.manifest(SHARED, "_drafts/s")
    with pytest.raises(ReviewRequired, match="cannot be changed live directly"):
        store.commit(
            [Put(SHARED, "s", skill("s", "not reviewed")), Put(SHARED, "_drafts/s", skill("s"))],
            options=ANA,
        )
    assert store.manifest(SHARED, "_drafts/s").version == forged.version


def test_the_setting_takes_its_own_command(store: Store) -> None:
    with pytest.raises(FailedPrecondition, match="does not require review: nothing to lift"):
        store.review.lift(SHARED)
    store.review.require(SHARED)
    with pytest.raises(FailedPrecondition, match="already requires review"):
        store.review.require(SHARED)
    with pytest.raises(InvalidArgument, match="a setting of the scope, not a skill"):
        store.publish(SHARED, "_settings/review", skill("x"))
    with pytest.raises(skillfs.errors.InvalidPath, match="unknown setting"):
        store.publish(SHARED, "_settings/other", skill("x"))
    assert store.review.rule(SHARED).required
