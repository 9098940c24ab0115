"""Staged rollout (docs/governance.md, "Staged rollout"): stage, widen, promote and abort on
memory, SQLite and grpc:// (the `store` fixture), through workers' views; bad input writing
nothing; the CLI; a `grpc://` client staging through Commit and the server's view RPCs taking
the environment. The rule itself (over 10,000 users) is in tests/unit/test_rollout_rule.py."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest

import skillfs
from skillfs import Rollout, Scope
from skillfs.engines.base import CommitOp
from skillfs.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    InvalidPath,
    NotFound,
    PermissionDenied,
)
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from support import grpc_servers
from support.grpc_servers import single
from tests.cli_helpers import as_json, error_line, ok, run
from tests.helpers import skill_md
from tests.runtime.test_runtime_freshness import settle
from tests.runtime_helpers import counting_store

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
MARKET = Scope.market("team")


def files(name: str, body: str) -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name, body=body), "references/r.md": f"ref {body}\n".encode()}


def seen(store: skillfs.Store, user: str, env: str | None = None, **kw: object) -> dict[str, str]:
    """What a fresh worker of `user` in `env` sees: skill -> the body its files were written
    with, read through the snapshot (so the files are the candidate's or the live ones)."""
    with skillfs.Skills(store, AGENT, user, environment=env, **kw) as sk:  # type: ignore[arg-type]
        snap = sk.snapshot()
        return {s.id: body(snap.read_bytes(s.id, "references/r.md")) for s in snap.skills}


def body(ref: bytes | str) -> str:
    text = ref.decode() if isinstance(ref, bytes) else ref
    return text.removeprefix("ref ").strip()


# ----------------------------------------------------------------- through the store


def test_stage_widen_promote_on_every_topology(store: skillfs.Store, other: skillfs.Store) -> None:
    v1 = store.publish(SHARED, "s", files("s", "live")).version
    bob = skillfs.Skills(other, AGENT, "bob")  # a worker in another process's place
    carol = skillfs.Skills(other, AGENT, "carol", environment="prod")
    assert [s.candidate for s in bob.snapshot().skills] == [False]
    staged = store.rollouts.stage(
        SHARED,
        "s",
        files("s", "canary"),
        Rollout(users=["bob"]),
        options=skillfs.WriteOptions(expected_version=v1),
    )
    assert staged.version == v1 + 1
    m = store.manifest(SHARED, "s")
    assert m.candidate is not None and m.candidate.rollout.users == ("bob",)
    assert m.candidate.frontmatter == {"name": "s", "description": m.frontmatter["description"]}
    # the next step of each worker (C3): bob gets the candidate, carol the live version
    b, c = bob.snapshot(), carol.snapshot()
    assert [(s.version, s.candidate) for s in b.skills] == [(v1 + 1, True)]
    assert "canary" in b.load("s") and body(b.read_bytes("s", "references/r.md")) == "canary"
    assert [(s.version, s.candidate) for s in c.skills] == [(v1 + 1, False)]
    assert "live" in c.load("s") and b.token != c.token
    # C4: bob's snapshot keeps the candidate's files while the rollout moves on
    store.rollouts.widen(SHARED, "s", Rollout(environments=["prod"], users=["bob"]))
    assert "canary" in carol.snapshot().load("s")
    promoted = store.rollouts.promote(SHARED, "s")
    assert body(b.read_bytes("s", "references/r.md")) == "canary"
    assert seen(other, "dave") == {"s": "canary"}
    m = store.manifest(SHARED, "s")
    assert (m.version, m.candidate) == (promoted.version, None)
    assert [h.version for h in store.history(SHARED, "s")] == [4, 3, 2, 1]
    assert [e.action for e in store.governance.audit(SHARED)] == [
        "promote",
        "widen",
        "stage",
        "publish",
    ]
    store.rollback(SHARED, "s", version=v1)  # the old live version is kept
    assert seen(other, "dave") == {"s": "live"}
    bob.close()
    carol.close()


def test_abort_and_a_skill_that_was_only_staged(store: skillfs.Store) -> None:
    store.publish(SHARED, "s", files("s", "live"))
    store.rollouts.stage(SHARED, "s", files("s", "canary"), Rollout(fraction=1.0))
    assert seen(store, "anyone") == {"s": "canary"}
    store.rollouts.abort(SHARED, "s")
    assert seen(store, "anyone") == {"s": "live"}
    assert store.manifest(SHARED, "s").candidate is None
    # a new skill staged for prod: nobody else sees it, not even as a problem
    store.rollouts.stage(SHARED, "new", files("new", "fresh"), Rollout(environments=["prod"]))
    assert seen(store, "u") == {"s": "live"}
    with skillfs.Skills(store, AGENT, "u") as sk:
        assert not sk.snapshot().problems
    assert seen(store, "u", "prod") == {"s": "live", "new": "fresh"}
    store.governance.disable(SHARED, "new", reason="hold")  # the kill switch keeps the candidate
    assert seen(store, "u", "prod") == {"s": "live"}
    store.governance.enable(SHARED, "new")
    assert seen(store, "u", "prod") == {"s": "live", "new": "fresh"}
    store.rollouts.abort(SHARED, "new")  # never live: deleted, history kept
    assert "new" not in store.skills(SHARED)
    assert [m.version for m in store.history(SHARED, "new")] == [4, 3, 2, 1]
    actions = [e.action for e in store.governance.audit(SHARED, skill="new")]
    assert actions == ["abort", "enable", "disable", "stage"]
    # the operation is recorded, not inferred: a candidate with the live files aborted
    store.rollouts.stage(SHARED, "s", files("s", "live"), Rollout(fraction=0.5))
    store.rollouts.abort(SHARED, "s")
    assert [e.action for e in store.governance.audit(SHARED, skill="s")][:2] == ["abort", "stage"]


def test_a_staged_only_skill_disabled_then_aborted_leaves_no_hole(store: skillfs.Store) -> None:
    """Outside testing: abort left a disabled entry without files in the shared scope, which
    hid the market's skill of that name from every user; and a rollback to a version that
    was only staged published an empty skill."""
    team = {"layers": [skillfs.Market("team")]}
    store.publish(MARKET, "m", files("m", "market"))
    store.rollouts.stage(SHARED, "m", files("m", "canary"), Rollout(users=["alice"]))
    store.governance.disable(SHARED, "m", reason="bad canary")
    assert "m" not in seen(store, "bob", **team)  # the hole, while the candidate is out
    store.rollouts.abort(SHARED, "m")
    assert "m" not in store.skills(SHARED) and seen(store, "bob", **team) == {"m": "market"}
    # in a user's scope a disabled entry without files is how a user hides a skill: kept
    store.governance.disable(ALICE, "m")
    store.rollouts.stage(ALICE, "m", files("m", "mine"), Rollout(users=["alice"]))
    store.rollouts.abort(ALICE, "m")
    assert store.manifest(ALICE, "m").hides and "m" not in seen(store, "alice", **team)
    store.rollouts.stage(SHARED, "n", files("n", "staged"), Rollout(users=["alice"]))
    store.rollouts.promote(SHARED, "n")
    with pytest.raises(NotFound, match="version 1 of shared:support-bot/n holds no live files"):
        store.rollback(SHARED, "n", 1)
    assert seen(store, "bob")["n"] == "staged"


def test_candidates_in_markets_user_scopes_and_under_the_kill_switch(
    store: skillfs.Store,
) -> None:
    store.publish(MARKET, "m", files("m", "live"))
    store.rollouts.stage(MARKET, "m", files("m", "canary"), Rollout(environments=["staging"]))
    layers = [skillfs.Market("team")]
    assert seen(store, "u", "staging", layers=layers) == {"m": "canary"}
    assert seen(store, "u", "prod", layers=layers) == {"m": "live"}
    # a market layer may declare its own environment
    staging = [skillfs.Market("team", environment="staging")]
    assert seen(store, "u", "prod", layers=staging) == {"m": "canary"}
    # a user's own skill: users= may name that user alone
    store.publish(ALICE, "a", files("a", "live"))
    store.rollouts.stage(ALICE, "a", files("a", "canary"), Rollout(users=["alice"]))
    assert seen(store, "alice")["a"] == "canary"
    # a publish keeps the candidate, as it keeps the kill switch; disable hides both
    hotfix = store.publish(ALICE, "a", files("a", "hotfix"))
    m = store.manifest(ALICE, "a")
    assert m.candidate is not None and m.version == hotfix.version
    assert body(store.read(ALICE, "a", "references/r.md")) == "hotfix"  # the publish landed
    assert seen(store, "alice")["a"] == "canary"
    store.governance.disable(ALICE, "a", reason="bad")
    assert "a" not in seen(store, "alice")
    store.governance.enable(ALICE, "a")
    assert seen(store, "alice")["a"] == "canary"
    with pytest.raises(FailedPrecondition, match="after the candidate was staged"):
        store.rollouts.promote(ALICE, "a")  # it would undo the hotfix
    store.rollouts.promote(ALICE, "a", anyway=True)
    assert seen(store, "alice")["a"] == "canary"


def test_an_archive_that_loses_a_race_to_a_promote_is_retried(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    """Outside (governance) testing: over grpc:// an archive of a staged skill that raced a
    promote was refused ("a new candidate is staged by the commit that writes it") where a
    direct store retried it. The server now answers the lost race as one."""
    store.publish(SHARED, "s0", {"SKILL.md": skill_md("s0", "live")})
    store.rollouts.stage(SHARED, "s0", {"SKILL.md": skill_md("s0", "cand")}, Rollout(users=("u1",)))
    real, raced = store.engine.commit, []

    def commit(domain: str, ops: list, checks: Any = (), charges: Any = ()) -> skillfs.Revision:  # type: ignore[type-arg]
        if not raced:  # the promote lands between the archive's read and its commit
            raced.append(True)  # (memory: `other` shares this engine, and its commit)
            other.rollouts.promote(SHARED, "s0")
        return real(domain, ops, checks, charges)

    store.engine.commit = commit  # type: ignore[method-assign]
    result = store.archive.add(SHARED, "s0", reason="old")
    assert raced and result.versions == {"s0": 4, ".archive/s0": 1}
    archived = store.manifest(SHARED, ".archive/s0")
    assert b"cand" in store.read(SHARED, ".archive/s0", "SKILL.md")  # the promoted version
    assert archived.candidate is None


def test_candidate_blobs_survive_gc(store: skillfs.Store) -> None:
    store.publish(SHARED, "s", files("s", "live"))
    store.rollouts.stage(SHARED, "s", files("s", "only-in-the-candidate"), Rollout(users=["bob"]))
    store.gc(grace=0.0)
    assert seen(store, "bob")["s"] == "only-in-the-candidate"


def test_bad_input_writes_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "s", files("s", "live"))
    before = store.revision(AGENT)
    for bad in (
        lambda: store.rollouts.widen(SHARED, "nope", Rollout(fraction=0.5)),
        lambda: store.rollouts.promote(SHARED, "nope"),
        lambda: store.rollouts.abort(SHARED, "nope"),
    ):
        with pytest.raises(NotFound):
            bad()
    for bad in (  # no candidate: there is nothing to act on yet
        lambda: store.rollouts.promote(SHARED, "s"),
        lambda: store.rollouts.abort(SHARED, "s"),
        lambda: store.rollouts.widen(SHARED, "s", Rollout(fraction=0.5)),
    ):
        with pytest.raises(FailedPrecondition, match="no staged candidate"):
            bad()
    for rule in (
        {"fraction": 1.5},
        {"fraction": -0.1},
        {"fraction": float("nan")},
        {"environments": ["prod/eu"]},
        {"environments": ["_hidden"]},
        {"users": ["a b"]},
        {"environments": "prod"},
    ):
        with pytest.raises(InvalidArgument, match=r"rollout|environment|user"):
            Rollout(**rule)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="alone"):
        store.rollouts.stage(ALICE, "a", files("a", "x"), Rollout(users=["bob"]))
    with pytest.raises(InvalidArgument, match=r"skillfs\.Rollout"):
        store.rollouts.stage(SHARED, "s", files("s", "x"), {"fraction": 0.5})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="not a skill"):
        store.rollouts.stage(SHARED, "_drafts", files("d", "x"), Rollout(fraction=0.5))
    with pytest.raises(InvalidArgument):
        store.rollouts.stage(SHARED, "s", {"../x": b"x"}, Rollout(fraction=0.5))
    with pytest.raises(Conflict):
        store.rollouts.stage(
            SHARED,
            "s",
            files("s", "x"),
            Rollout(fraction=0.5),
            options=skillfs.WriteOptions(expected_version=7),
        )
    with pytest.raises(skillfs.errors.InvalidSkill):
        store.rollouts.stage(SHARED, "s", {"SKILL.md": b"no frontmatter"}, Rollout(), strict=True)
    assert store.revision(AGENT) == before  # nothing was written
    store.rollouts.stage(SHARED, "s", files("s", "c"), Rollout(environments=["prod"], fraction=0.2))
    before = store.revision(AGENT)
    for narrower in (
        Rollout(fraction=0.2),  # drops prod
        Rollout(environments=["prod"], fraction=0.1),  # lowers the fraction
        Rollout(environments=["prod"], fraction=0.2),  # the same rule: nothing to widen
    ):
        with pytest.raises(FailedPrecondition, match=r"keep everyone|nothing to widen"):
            store.rollouts.widen(SHARED, "s", narrower)
    with pytest.raises(Conflict):
        store.rollouts.promote(SHARED, "s", options=skillfs.WriteOptions(expected_version=1))
    assert store.revision(AGENT) == before


def test_an_unchanged_step_with_a_candidate_is_one_round_trip() -> None:
    """The rule is evaluated on the manifests the worker holds: with candidates staged in
    the shared scope and a market, an unchanged step still reads the revisions and nothing
    else (docs/governance.md)."""
    store, counter = counting_store()
    store.publish(SHARED, "s", files("s", "live"))
    store.rollouts.stage(SHARED, "s", files("s", "canary"), Rollout(users=["bob"]))
    store.publish(MARKET, "m", files("m", "live"))
    store.rollouts.stage(MARKET, "m", files("m", "canary"), Rollout(environments=["prod"]))
    skills = skillfs.Skills(store, AGENT, "bob", [skillfs.Market("team")], environment="prod")
    first = skills.snapshot()
    assert [(s.id, s.candidate) for s in first.skills] == [("m", True), ("s", True)]
    settle(skills)
    counter.clear()
    me = threading.get_ident()
    for _ in range(20):
        assert skills.snapshot() is first
    assert counter.names(me) == ["revisions"] * 20
    skills.close()


# ----------------------------------------------------------------- the CLI


@pytest.fixture(params=["sqlite", "grpc"])
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.stores import url_for

    return url_for(request, request.param, tmp_path)


def test_cli_stage_widen_promote_abort(cli_url: str, tmp_path: Path) -> None:
    skill = tmp_path / "s"
    skill.mkdir()
    (skill / "SKILL.md").write_bytes(skill_md("s", body="live"))
    ok(cli_url, "import", str(skill), "-s", "shared:support-bot")
    (skill / "SKILL.md").write_bytes(skill_md("s", body="canary"))
    got = as_json(
        cli_url, "stage", str(skill), "-s", "shared:support-bot", "--user", "bob", "--json"
    )
    assert got["version"] == 2
    rows = as_json(cli_url, "ls", "-s", "shared:support-bot", "--json")
    assert rows[0]["candidate"]["users"] == ["bob"]
    assert "candidate for users bob" in ok(cli_url, "ls", "-s", "shared:support-bot").stdout
    bob = ok(cli_url, "prompt", "-a", AGENT, "-u", "bob", "--json")
    assert '"candidate": true' in bob.stdout
    prod = as_json(cli_url, "prompt", "-a", AGENT, "-u", "carol", "--environment", "prod", "--json")
    assert [s["candidate"] for s in prod["skills"]] == [False]
    ok(cli_url, "widen", "s", "-s", "shared:support-bot", "--env", "prod", "--fraction", "0.3")
    prod = as_json(cli_url, "prompt", "-a", AGENT, "-u", "carol", "--environment", "prod", "--json")
    assert [s["candidate"] for s in prod["skills"]] == [True]
    line = error_line(run(cli_url, "widen", "s", "-s", "shared:support-bot", "--fraction", "0.1"))
    assert "must keep everyone already in" in line
    ok(cli_url, "promote", "s", "-s", "shared:support-bot")
    line = error_line(run(cli_url, "abort", "s", "-s", "shared:support-bot"))
    assert "no staged candidate" in line
    line = error_line(
        run(cli_url, "stage", str(skill), "-s", "shared:support-bot", "--fraction", "2"), code=2
    )  # bad usage, said before anything is opened
    assert "from 0" in line
    audit = ok(cli_url, "audit", "-a", AGENT).stdout
    assert all(word in audit for word in ("stage", "widen", "promote"))


# ----------------------------------------------------------------- grpc://


@pytest.mark.server
def test_grpc_stage_goes_through_commit_and_views_take_the_environment(tmp_path: Path) -> None:
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        with skillfs.open_store(url, token=grpc_servers.ADMIN) as admin:
            admin.publish(SHARED, "s", files("s", "live"))
            admin.rollouts.stage(SHARED, "s", files("s", "canary"), Rollout(environments=["prod"]))
            admin.rollouts.widen(SHARED, "s", Rollout(environments=["prod"], users=["bob"]))
            m = admin.manifest(SHARED, "s")
            assert m.candidate is not None and m.candidate.actor == "admin"
            assert m.candidate.rollout.users == ("bob",)
            assert seen(admin, "bob") == {"s": "canary"}
        meta = [("authorization", f"Bearer {grpc_servers.ALICE}")]
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            stub = pb_grpc.SkillReaderStub(ch)

            def view_of(env: str) -> list[tuple[str, bool, str]]:
                view = pb.View(agent_id=AGENT, user_id="alice", environment=env)
                snap = single(stub.Snapshot(pb.SnapshotRequest(view=view), metadata=meta))
                text = stub.LoadSkillThroughPath(
                    pb.LoadRequest(view=view, skill_id="s", path="references/r.md"), metadata=meta
                ).text
                prompt = single(stub.Prompt(pb.PromptRequest(view=view), metadata=meta)).prompt
                assert "<name>s</name>" in prompt
                return [(s.id, s.candidate, body(text)) for s in snap.skills]

            assert view_of("") == [("s", False, "live")]
            assert view_of("prod") == [("s", True, "canary")]
            assert view_of("staging") == [("s", False, "live")]
            with pytest.raises(grpc.RpcError) as err:
                view_of("bad/env")
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # a user's token with write on its own scope stages there; not in the shared scope
        with skillfs.open_store(url, token=grpc_servers.ALICE) as alice:
            alice.publish(ALICE, "a", files("a", "live"))
            alice.rollouts.stage(ALICE, "a", files("a", "canary"), Rollout(users=["alice"]))
            assert alice.manifest(ALICE, "a").candidate.actor == "alice"  # type: ignore[union-attr]
            alice.rollouts.promote(ALICE, "a")
            assert seen(alice, "alice")["a"] == "canary"
            with pytest.raises(PermissionDenied):
                alice.rollouts.stage(SHARED, "s", files("s", "mine"), Rollout(users=["alice"]))
    finally:
        server.stop(0)


@pytest.mark.server
def test_grpc_server_vouches_for_the_candidate(tmp_path: Path) -> None:
    """A client cannot forge a candidate: one that is not staged by its own commit is
    refused, and the server reads the frontmatter from the candidate's SKILL.md."""
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        with skillfs.open_store(url, token=grpc_servers.ALICE) as alice:
            alice.publish(ALICE, "a", files("a", "live"))
            alice.rollouts.stage(ALICE, "a", files("a", "canary"), Rollout(users=["alice"]))
            m = alice.manifest(ALICE, "a")
            assert m.candidate is not None
            forged = m.candidate.model_copy(
                update={"commit_id": "someone-else", "frontmatter": {"name": "x"}}
            )

            sent = m.model_copy(  # built by hand and sent as a raw Commit
                update={"version": m.version + 1, "commit_id": "forger", "candidate": forged}
            )
            op = CommitOp(scope=ALICE, manifest=sent, expect=m.version)
            with pytest.raises(InvalidArgument, match="staged by the commit that writes it"):
                alice.engine.commit(ALICE.domain, [op])
            again = alice.manifest(ALICE, "a")
            assert again.version == m.version and again.candidate == m.candidate
    finally:
        server.stop(0)


# ----------------------------------------------------------------- MCP


def test_mcp_views_take_the_environment() -> None:
    """An MCP session's view is (agent, user, markets, environment): from the query string or
    the X-Skillfs-Environment header over HTTP, fixed for stdio."""
    from mcp import Client

    from skillfs.auth import Tokens
    from skillfs.mcp import ViewKey, Views, build_server
    from skillfs.mcp.http import view_for
    from tests.mcp_helpers import sdk_list_skills, tokens_text

    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "s", {"SKILL.md": skill_md("s", description="Live one.")})
    staged = {"SKILL.md": skill_md("s", description="Candidate one.")}
    store.rollouts.stage(SHARED, "s", staged, Rollout(environments=["prod"]))

    async def described(environment: str) -> list[str]:
        key = ViewKey(AGENT, "alice", (), environment)
        async with Client(build_server(Views(store, lambda ctx: key))) as c:
            page = await sdk_list_skills(c.session)
            return [s["frontmatter"]["description"] for s in page["skills"]]

    async def main() -> None:
        assert await described("") == ["Live one."]
        assert await described("prod") == ["Candidate one."]

    anyio.run(main)
    alice = Tokens(text=tokens_text()).authenticate(f"Bearer {grpc_servers.ALICE}")
    assert view_for(alice, {}, "environment=prod").environment == "prod"
    assert view_for(alice, {"x-skillfs-environment": "staging"}, "").environment == "staging"
    assert view_for(alice, {}, "").environment == ""
    with pytest.raises(InvalidPath, match="environment"):
        view_for(alice, {}, "environment=_bad")
