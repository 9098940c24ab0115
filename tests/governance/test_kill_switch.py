"""The kill switch has one owner, the store's Committer (docs/governance.md, "Disable"): no
path of a user's scope — a store write, an fsspec write, the agent's `propose_skill` and
`skill_manage`, an operator's override, a raw `Commit` sent to a skillfs server — brings
back a skill an operator disabled in the agent's shared scope or a market, and a copy made
before the disable is hidden when the view is built, until an operator enables it for that
user."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Origin, Scope, Skills, Store
from skillfs.engines.base import CommitOp
from skillfs.errors import FailedPrecondition, NotFound
from skillfs.fs import SkillFileSystem
from tests.runtime_helpers import md
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")


@pytest.fixture(params=["memory", "sqlite", "etcd", "grpc"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    yield s
    s.close()


def skill(name: str, body: str = "") -> dict[str, bytes]:
    return {"SKILL.md": md(name, f"Does {name} things.", body)}


def counter(store: Store) -> int:
    rev = store.domain_revisions([SHARED.domain])[SHARED.domain]
    return rev.counter if rev is not None else 0


def fs_of(store: Store, tmp_path: Path) -> SkillFileSystem:
    return SkillFileSystem(
        store=store, agent_id=AGENT, user_id="alice", base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip


def live_tools(store: Store) -> skillfs.Snapshot:
    return Skills(store, AGENT, "alice", skill_writes="live").snapshot()


def test_no_user_write_brings_back_a_skill_disabled_in_the_shared_scope(
    store: Store, tmp_path: Path
) -> None:
    store.publish(SHARED, "leaky", {**skill("leaky"), "notes.md": b"old"})
    store.governance.disable(SHARED, "leaky", reason="leaks the API key")
    before = counter(store)
    with pytest.raises(FailedPrecondition, match=r"disabled in shared:support-bot .*API key"):
        store.publish(ALICE, "leaky", skill("leaky", "mine"))
    fs = fs_of(store, tmp_path)  # fsspec reads the shared skill and copies it on write
    with pytest.raises(FailedPrecondition, match="cannot bring it back"):
        fs.pipe_file("skills/leaky/notes.md", b"new")
    snap = live_tools(store)
    proposed = snap.call_tool(
        "propose_skill", {"name": "leaky", "files": {"SKILL.md": md("leaky").decode()}}
    )
    assert proposed.startswith("Error: propose_skill:") and "disabled" in proposed
    created = snap.call_tool(
        "skill_manage", {"action": "create", "name": "leaky", "content": md("leaky").decode()}
    )
    assert created.startswith("Error: skill_manage:") and "disabled" in created
    assert counter(store) == before
    assert store.manifests(ALICE, ["leaky"]) == {}


def test_nor_one_disabled_in_a_market(store: Store) -> None:
    market = Scope.market("team")
    store.publish(market, "shared-tool", skill("shared-tool"))
    store.governance.disable(market, "shared-tool", reason="recalled")
    with pytest.raises(FailedPrecondition, match=r"disabled in market:team .*recalled"):
        store.publish(ALICE, "shared-tool", skill("shared-tool"))
    created = live_tools(store).call_tool(
        "skill_manage",
        {"action": "create", "name": "shared-tool", "content": md("shared-tool").decode()},
    )
    assert "disabled in market:team" in created, created


def test_a_copy_made_before_the_disable_is_hidden_until_enabled_for_the_user(
    store: Store, tmp_path: Path
) -> None:
    store.publish(SHARED, "notes", {**skill("notes"), "tips.md": b"one"})
    store.publish(SHARED, "guide", skill("guide"))
    fs_of(store, tmp_path).pipe_file("skills/notes/tips.md", b"mine")  # copy-on-write
    edited = live_tools(store).call_tool(
        "skill_manage", {"action": "write_file", "name": "guide", "path": "x.md", "content": "x"}
    )
    assert json.loads(edited)["ok"], edited
    for name in ("notes", "guide"):
        copy = store.manifest(ALICE, name)
        assert copy.origin == Origin(scope=str(SHARED), skill=name, version=1)
    assert {s.id for s in Skills(store, AGENT, "alice").snapshot().skills} == {"notes", "guide"}

    store.governance.disable(SHARED, "notes", reason="wrong advice")
    snap = Skills(store, AGENT, "alice").snapshot()
    assert [s.id for s in snap.skills] == ["guide"]
    hidden = [p for p in snap.problems if p.source == str(ALICE)]
    assert [(p.skill, p.disabled) for p in hidden] == [("notes", "wrong advice")]
    assert hidden[0].findings[0].rule == "origin-disabled"
    with pytest.raises(FailedPrecondition, match="wrong advice"):  # nor is the copy edited
        store.publish(ALICE, "notes", skill("notes", "edited"))

    store.governance.enable(
        ALICE, "notes", options=skillfs.WriteOptions(message="reviewed: alice's copy is fine")
    )
    assert store.manifest(ALICE, "notes").origin is None
    assert {s.id for s in Skills(store, AGENT, "alice").snapshot().skills} == {"notes", "guide"}
    assert store.governance.audit(ALICE, skill="notes")[0].action == "enable"


def test_a_copy_of_a_skill_deleted_since_it_was_read_is_refused(store: Store) -> None:
    v = store.publish(SHARED, "gone", skill("gone")).versions["gone"]
    files = dict(store.manifest(SHARED, "gone").files)
    store.delete(SHARED, "gone")
    copy = skillfs.Put(ALICE, "gone", files, 0, Origin(scope=str(SHARED), skill="gone", version=v))
    with pytest.raises(NotFound, match="deleted from shared:support-bot since it was read"):
        store.commit([copy])


@pytest.mark.server
def test_a_raw_commit_to_a_server_is_held_to_the_same_rule(tmp_path: Path) -> None:
    """The client's Committer runs the rules only to fail early: a manifest built by hand
    and sent as a `Commit` with a user's token is refused by the server."""
    from support.grpc_servers import ALICE as ALICE_TOKEN
    from support.grpc_servers import in_process

    server = in_process(f"memory://kill-{tmp_path.name}", tmp_path)
    try:
        direct = server.store
        direct.publish(SHARED, "leaky", skill("leaky"))
        direct.governance.disable(SHARED, "leaky", reason="leaks")
        client = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ALICE_TOKEN)
        try:
            shared = client.manifest(SHARED, "leaky")  # its files are alice's to name
            forged = shared.model_copy(
                update={"version": 1, "disabled": False, "disabled_reason": "", "actor": "alice"}
            )
            with pytest.raises(FailedPrecondition, match="cannot bring it back"):
                op = CommitOp(scope=ALICE, manifest=forged, expect=0)
                client.engine.commit(SHARED.domain, [op])
        finally:
            client.close()
        assert direct.manifests(ALICE, ["leaky"]) == {}
    finally:
        server.stop(0)


@pytest.mark.parametrize("origin", [SHARED, Scope.market("team")], ids=["shared", "market"])
def test_a_disable_between_an_agents_read_and_its_copys_commit(store: Store, origin: Scope) -> None:
    """The interleaving forced: the agent's step read the skill, its live copy's commit read
    the origin and is about to be sent, and the operator's disable lands in between (the
    engine's commit is where the disable is made). The copy is never served: from the same
    domain (the shared scope) the commit compares the origin's version and, retried, is
    refused; from a market, read just before the commit, the copy lands (the store does not
    re-read it: a skillfs server does, and refuses it) and, naming its origin, is a hole at
    the worker's next step with the finding origin-disabled."""
    store.publish(origin, "guide", skill("guide"))
    layers = [skillfs.Market("team")] if origin.kind == "market" else []
    worker = Skills(store, AGENT, "alice", skill_writes="live", layers=layers)
    step = worker.snapshot()
    assert [s.id for s in step.skills] == ["guide"]
    real, raced = store.engine.commit, []

    def commit(domain: str, ops: list[CommitOp], checks: list[object], charges: object) -> object:
        if not raced and any(op.scope == ALICE for op in ops):
            raced.append(True)
            store.engine.commit = real  # type: ignore[method-assign]
            store.governance.disable(origin, "guide", reason="wrong advice")
        return real(domain, ops, checks, charges)  # type: ignore[arg-type]

    store.engine.commit = commit  # type: ignore[method-assign]
    wrote = {"action": "write_file", "name": "guide", "path": "x.md", "content": "x"}
    result = step.call_tool("skill_manage", wrote)
    assert raced
    copied = not result.startswith("Error")
    over_grpc = store.url.startswith("grpc://")
    assert copied == (origin.kind == "market" and not over_grpc), result
    if copied:
        assert store.manifest(ALICE, "guide").origin == Origin(
            scope=str(origin), skill="guide", version=1
        )
    else:
        assert "'guide' is disabled in" in result and "wrong advice" in result
        assert "guide" not in store.skills(ALICE)
    nxt = worker.snapshot()
    assert nxt.skills == ()  # hidden at the next step either way
    if copied:
        hidden = [p for p in nxt.problems if p.source == str(ALICE)]
        assert [(p.skill, p.findings[0].rule) for p in hidden] == [("guide", "origin-disabled")]
