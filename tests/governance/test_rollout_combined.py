"""Rollout rules that combine and the promote guard (docs/governance.md, "Staged rollout"),
through the store on memory, SQLite and grpc:// (the `store` fixture) and through workers'
views: `all` of an environment and a fraction, excluded users, a rule stored before `match`
keeping its cohort, a rule of a format this release does not know serving the live version,
and promote refusing to undo a live save that landed after the candidate was staged; the
CLI's `--match`, `--exclude` and `promote --anyway`. The rule over 10,000 users is in
tests/unit/test_rollout_rule.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import skillfs
from skillfs import Rollout, Scope, WriteOptions
from skillfs.engines.base import CommitOp
from skillfs.errors import FailedPrecondition, InvalidArgument, LiveEditAfterStage
from skillfs.governance.rollout_rule import gets_candidate
from skillfs.model import Manifest
from tests.cli_helpers import as_json, error_line, ok, run
from tests.governance.test_rollout import cli_url, files, seen  # noqa: F401  (a fixture)
from tests.helpers import skill_md

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
USERS = [f"u{i}" for i in range(30)]


def candidates(store: skillfs.Store, env: str | None) -> set[str]:
    """The users among `USERS` whose fresh worker in `env` holds the candidate of `s`."""
    return {u for u in USERS if seen(store, u, env)["s"] == "cand"}


def test_all_of_an_environment_and_a_fraction_through_workers(store: skillfs.Store) -> None:
    """ "prod and 50 %": a prod worker holds the candidate exactly where the rule's bucket
    puts its user, every other worker the live version; an excluded user never; widening
    the share keeps everyone in (the cohort)."""
    store.publish(SHARED, "s", files("s", "live"))
    rule = Rollout(environments=["prod"], fraction=0.5, match="all", excluded_users=["u1"])
    store.rollouts.stage(SHARED, "s", files("s", "cand"), rule)
    stored = store.manifest(SHARED, "s").candidate
    assert stored is not None and stored.rollout == rule
    want = {u for u in USERS if gets_candidate(rule, SHARED, "s", u, "prod")}
    assert 5 <= len(want) <= 25 and "u1" not in want
    assert candidates(store, "prod") == want
    assert candidates(store, "staging") == candidates(store, None) == set()
    wider = Rollout(environments=["prod"], fraction=0.8, match="all", excluded_users=["u1"])
    store.rollouts.widen(SHARED, "s", wider)
    widened = {u for u in USERS if gets_candidate(wider, SHARED, "s", u, "prod")}
    assert candidates(store, "prod") == widened and widened > want  # the cohort kept, grown
    assert "u1" not in candidates(store, "prod")
    for narrower in (  # each drops someone: refused, nothing written
        Rollout(environments=["prod"], fraction=0.8, match="all", excluded_users=["u1", "u2"]),
        Rollout(environments=["prod"], users=["u3"], fraction=0.8, match="all"),
        Rollout(environments=["prod"], fraction=0.7, match="all", excluded_users=["u1"]),
    ):
        with pytest.raises(FailedPrecondition, match="must keep everyone already in"):
            store.rollouts.widen(SHARED, "s", narrower)
    assert store.manifest(SHARED, "s").candidate.rollout == wider  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match="both named and excluded"):
        Rollout(users=["u1"], excluded_users=["u1"])
    with pytest.raises(InvalidArgument, match="cannot name bob"):  # a user's scope: its user
        store.rollouts.stage(ALICE, "s", files("s", "x"), Rollout(excluded_users=["bob"]))


def _raw_rollout(store: skillfs.Store, rollout: dict[str, object]) -> None:
    """Rewrite `s`'s stored candidate rule as another release stored it (the manifest's
    JSON, committed by the engine as any commit is)."""
    m = store.manifest(SHARED, "s")
    raw = json.loads(m.model_dump_json())
    raw["candidate"]["rollout"] = rollout
    raw["version"] = m.version + 1
    written = Manifest.model_validate_json(json.dumps(raw))
    store.engine.commit(
        SHARED.domain, [CommitOp(scope=SHARED, manifest=written, expect=m.version)], [], []
    )


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_a_stored_rule_keeps_its_cohort_and_an_unknown_one_serves_live(
    engine: str, tmp_path: Path
) -> None:
    """A rule stored before `match` existed (environments, users, fraction; no format) is
    read as any of them: the same workers hold the candidate as before. One of a format
    this release does not know is served to nobody: every worker keeps the live version."""
    url = f"sqlite:///{tmp_path / 's.db'}" if engine == "sqlite" else "memory://stored-rule"
    store = skillfs.open_store(url)
    store.publish(SHARED, "s", files("s", "live"))
    store.rollouts.stage(SHARED, "s", files("s", "cand"), Rollout(users=["u0"]))
    _raw_rollout(store, {"environments": ["prod"], "users": ["u2"], "fraction": 0.3})
    rule = store.manifest(SHARED, "s").candidate.rollout  # type: ignore[union-attr]
    assert (rule.match, rule.format) == ("any", 1)
    want = {u for u in USERS if gets_candidate(rule, SHARED, "s", u, None)}
    assert "u2" in want and 3 <= len(want) <= 20
    assert candidates(store, None) == want
    assert candidates(store, "prod") == set(USERS)
    _raw_rollout(store, {"fraction": 1.0, "match": "most", "format": 3})
    assert candidates(store, "prod") == candidates(store, None) == set()
    with pytest.raises(InvalidArgument, match="format 3, newer than this release"):
        store.governance.disable(SHARED, "s", "old release")  # would lose what it says
    store.rollouts.abort(SHARED, "s")  # (abort writes no rule: it always works)
    assert store.manifest(SHARED, "s").candidate is None
    assert seen(store, "u0")["s"] == "live"


def test_promote_refuses_to_undo_a_later_live_edit(store: skillfs.Store) -> None:
    """A live save after staging: promote is LiveEditAfterStage naming the live version, its
    actor and time, nothing written; widening keeps the guard; promote anyway promotes;
    staging again (on top of the live edit) clears it."""
    store.publish(SHARED, "s", files("s", "live"), actor="ana")
    store.rollouts.stage(SHARED, "s", files("s", "cand"), Rollout(users=["bob"]))
    staged = store.manifest(SHARED, "s").candidate
    assert staged is not None and (staged.staged_on, staged.live_edit) == (1, None)
    store.governance.disable(SHARED, "s", "checking")  # not a live save: same files
    store.governance.enable(SHARED, "s")
    assert store.manifest(SHARED, "s").candidate.live_edit is None  # type: ignore[union-attr]
    hotfix = store.publish(SHARED, "s", files("s", "hotfix"), actor="oncall")
    saved = store.manifest(SHARED, "s")  # (over grpc:// the actor is the token's name)
    edit = saved.candidate.live_edit  # type: ignore[union-attr]
    assert edit is not None and (edit.version, edit.actor) == (hotfix.versions["s"], saved.actor)
    assert edit.at == saved.committed_at and saved.actor in ("oncall", "admin")
    store.rollouts.widen(SHARED, "s", Rollout(users=["bob", "carol"]))
    before = store.revision(AGENT)
    with pytest.raises(LiveEditAfterStage) as err:  # (a FailedPrecondition, on every engine)
        store.rollouts.promote(SHARED, "s")
    said = str(err.value)
    assert f"live version {edit.version} was saved by {edit.actor}" in said
    assert "promote anyway" in said and "UTC" in said
    assert store.revision(AGENT) == before
    assert seen(store, "dave")["s"] == "hotfix"
    store.rollouts.stage(SHARED, "s", files("s", "cand2"), Rollout(users=["bob"]))
    again = store.manifest(SHARED, "s").candidate
    assert again is not None and again.live_edit is None
    assert again.staged_on == store.manifest(SHARED, "s").version - 1
    store.publish(SHARED, "s", files("s", "hotfix2"), actor="oncall")
    store.rollouts.promote(SHARED, "s", anyway=True, options=WriteOptions(actor="lead"))
    assert seen(store, "dave")["s"] == "cand2"
    assert store.manifest(SHARED, "s").candidate is None


def test_cli_match_exclude_and_promote_anyway(cli_url: str, tmp_path: Path) -> None:  # noqa: F811
    skill = tmp_path / "s"
    skill.mkdir()
    (skill / "SKILL.md").write_bytes(skill_md("s", body="live"))
    (skill / "r.md").write_bytes(b"x")
    ok(cli_url, "import", str(skill), "-s", "shared:support-bot")
    (skill / "SKILL.md").write_bytes(skill_md("s", body="canary"))
    args = ["--env", "prod", "--fraction", "0.5", "--match", "all", "--exclude", "u1"]
    done = ok(cli_url, "stage", str(skill), "-s", "shared:support-bot", *args).stdout
    assert "workers in prod and 50 % of users, never u1" in done
    row = as_json(cli_url, "ls", "-s", "shared:support-bot", "--json")[0]["candidate"]
    assert (row["match"], row["excluded_users"]) == ("all", ["u1"])
    prompt = ["prompt", "-a", AGENT, "--json"]
    for user in ("u1", "u5"):
        rule = Rollout(environments=["prod"], fraction=0.5, match="all", excluded_users=["u1"])
        want = gets_candidate(rule, SHARED, "s", user, "prod")
        got = as_json(cli_url, *prompt, "-u", user, "--environment", "prod")
        assert [s["candidate"] for s in got["skills"]] == [want]
    line = error_line(run(cli_url, "stage", str(skill), "-s", "shared:x", "--match", "most"), 2)
    assert "'any'" in line and "'all'" in line
    with skillfs.open_store(cli_url) as store:  # a live save after staging
        store.publish(SHARED, "s", {"SKILL.md": skill_md("s", body="hotfix")}, actor="oncall")
    line = error_line(run(cli_url, "promote", "s", "-s", "shared:support-bot"))
    assert "was saved by" in line and "after the candidate was staged" in line
    assert "--anyway" in line
    ok(cli_url, "promote", "s", "-s", "shared:support-bot", "--anyway")
    got = as_json(cli_url, *prompt, "-u", "u9")
    assert [s["candidate"] for s in got["skills"]] == [False]
    assert b"canary" in ok(cli_url, "cat", "s/SKILL.md", "-s", "shared:support-bot").stdout.encode()
