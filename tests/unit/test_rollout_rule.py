"""The staged-rollout rule (skillfs/governance/rollout_rule.py, docs/governance.md "Staged
rollout"): a fraction over 10,000 users, widening that keeps everyone in, a stable bucket per
skill and scope, and which manifest a user gets (`effective`)."""

from __future__ import annotations

import uuid

import skillfs
from skillfs import Rollout, Scope
from skillfs.governance.rollout_rule import bucket, effective, gets_candidate
from skillfs.model import Manifest
from tests.helpers import skill_md

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")


def files(name: str, body: str) -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name, body=body), "references/r.md": f"ref {body}\n".encode()}


def test_fraction_over_ten_thousand_users_and_widening_keeps_everyone_in() -> None:
    users = [f"user-{i}" for i in range(10_000)]

    def reached(fraction: float, skill: str = "s") -> set[str]:
        rule = Rollout(fraction=fraction)
        return {u for u in users if gets_candidate(rule, SHARED, skill, u, None)}

    for fraction in (0.01, 0.1, 0.5, 0.9):
        share = len(reached(fraction)) / len(users)
        assert abs(share - fraction) <= 0.02, (fraction, share)
    assert reached(0.5) >= reached(0.1)  # every user who was in stays in
    assert reached(0.0) == set() and reached(1.0) == set(users)
    # each skill draws its own sample, and the bucket is stable (a pure hash)
    assert reached(0.1, "other") != reached(0.1)
    assert bucket(SHARED, "s", "user-1") == bucket(SHARED, "s", "user-1")
    assert Rollout(users=["b", "a", "b"]) == Rollout(users=["a", "b"])  # one rule, one form
    assert bucket(SHARED, "s", "user-1") != bucket(ALICE, "s", "user-1")


def test_effective_and_the_rule_owner() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "s", files("s", "live"))
    store.rollouts.stage(
        SHARED, "s", files("s", "c"), Rollout(environments=["prod"], users=["bob"])
    )
    m = store.manifest(SHARED, "s")
    assert effective(m, SHARED, "alice", None) is m
    assert effective(m, SHARED, "alice", "staging") is m
    for user, env in (("alice", "prod"), ("bob", None), ("bob", "staging")):
        got = effective(m, SHARED, user, env)
        assert isinstance(got, Manifest) and got is not m
        assert got.candidate is None and got.version == m.version
        assert m.candidate is not None and got.files == m.candidate.files
    store.rollouts.stage(SHARED, "new", files("new", "c"), Rollout(users=["bob"]))
    fresh = store.manifest(SHARED, "new")
    assert effective(fresh, SHARED, "alice", None) is None
    assert effective(fresh, SHARED, "bob", None) is not None
