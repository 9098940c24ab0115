"""The staged-rollout rule (skillfs/governance/rollout_rule.py, docs/governance.md "Staged
rollout"): a fraction over 10,000 users, widening that keeps everyone in, a stable bucket per
skill and scope, and which manifest a user gets (`effective`)."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

import skillfs
from skillfs import Rollout, Scope
from skillfs.errors import InvalidArgument
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


def test_prod_and_ten_percent_over_ten_thousand_users() -> None:
    """`all` of an environment and a fraction ("prod and 10 %", Harness's CompositeFilter):
    10 +- 2 % of prod's users, nobody elsewhere; `any` of the same parts gives prod
    everyone. Excluded users never get it; widening the fraction keeps the cohort."""
    users = [f"user-{i}" for i in range(10_000)]

    def share(rule: Rollout, env: str | None) -> float:
        return sum(gets_candidate(rule, SHARED, "s", u, env) for u in users) / len(users)

    both = Rollout(environments=["prod"], fraction=0.1, match="all")
    assert abs(share(both, "prod") - 0.1) <= 0.02
    assert share(both, "staging") == share(both, None) == 0.0
    assert share(Rollout(environments=["prod"], fraction=0.1), "prod") == 1.0  # any: all prod
    assert both.describe() == "workers in prod and 10 % of users"
    cohort = {u for u in users if gets_candidate(both, SHARED, "s", u, "prod")}
    wider = Rollout(environments=["prod"], fraction=0.2, match="all")
    assert not both.dropped_by(wider)
    assert cohort < {u for u in users if gets_candidate(wider, SHARED, "s", u, "prod")}
    some = sorted(cohort)[:3]
    without = Rollout(environments=["prod"], fraction=0.1, match="all", excluded_users=some)
    reached = {u for u in users if gets_candidate(without, SHARED, "s", u, "prod")}
    assert reached == cohort - set(some)
    assert without.describe() == f"workers in prod and 10 % of users, never {', '.join(some)}"
    # narrowing is named: a new condition under all, any to all, a user excluded
    assert "new condition" in Rollout(environments=["prod"], match="all").dropped_by(both)
    assert "only some of" in Rollout(environments=["prod"], fraction=0.1).dropped_by(both)
    assert "now excluded" in both.dropped_by(without)
    assert not Rollout(environments=["prod"], users=["a"], match="all").dropped_by(
        Rollout(environments=["prod"])  # dropping a condition of all widens
    )


def test_a_rule_stored_before_match_keeps_its_meaning_and_its_bytes() -> None:
    """A rule stored by 0.1 (environments, users, fraction; no format) is read as any of
    them, and the cohort is the same users; a rule any release could read is stored as 0.1
    stored it (no new field), so it keeps its bytes."""
    old = b'{"environments":["prod"],"users":["alice"],"fraction":0.1}'
    rule = Rollout.model_validate_json(old)
    assert (rule.match, rule.format, rule.known) == ("any", 1, True)
    assert rule == Rollout(environments=["prod"], users=["alice"], fraction=0.1)
    assert rule.model_dump_json().encode() == old
    users = ["alice", *(f"user-{i}" for i in range(10_000))]
    cohort = {u for u in users if gets_candidate(rule, SHARED, "s", u, None)}
    by_bucket = {u for u in users if bucket(SHARED, "s", u) < 0.1}
    assert cohort == by_bucket | {"alice"}
    assert all(gets_candidate(rule, SHARED, "s", u, "prod") for u in users[:100])


def test_a_rule_of_an_unknown_format_serves_the_live_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rule a later release stored (a format this one does not know) is read, reaches
    nobody, is logged once, and a write carrying it is refused rather than rewritten."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "s", files("s", "live"))
    store.rollouts.stage(SHARED, "s", files("s", "c"), Rollout(fraction=1.0))
    m = store.manifest(SHARED, "s")
    raw = json.loads(m.model_dump_json())
    raw["candidate"]["rollout"] = {"fraction": 1.0, "match": "most", "format": 9, "later": [1]}
    future = Manifest.model_validate_json(json.dumps(raw))
    assert future.candidate is not None and not future.candidate.rollout.known
    caplog.set_level(logging.WARNING, logger="skillfs.governance.rollout_rule")
    for user in ("alice", "bob", "carol"):
        assert effective(future, SHARED, user, "prod") is future  # the live version
    said = [r for r in caplog.records if "format 9" in r.getMessage()]
    assert len(said) == 1
    with pytest.raises(InvalidArgument, match="format 9, newer than this release"):
        future.candidate.rollout.check()


def test_a_misspelt_part_is_refused() -> None:
    """A keyword the rule does not have is an error saying what it takes (a later format's
    fields are only kept when read back from the store)."""
    with pytest.raises(InvalidArgument, match="a rollout has no fractions"):
        Rollout(fractions=0.1)  # type: ignore[call-arg]
