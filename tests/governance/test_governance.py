"""Governed change (docs/governance.md): actor and message on every commit, the audit, and
disable / enable, on memory, SQLite and grpc:// (the `store` fixture) and through a worker's
view."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from skillfs.store.who import default_actor
from support import grpc_servers
from tests.cli_helpers import as_json, error_line, ok, run
from tests.helpers import skill_files as files
from tests.stores import url_for

ALICE = Scope.user("support-bot", "alice")
BOB = Scope.user("support-bot", "bob")
SHARED = Scope.shared("support-bot")
MARKET = Scope.market("team")


def actor_of(store: skillfs.Store, claimed: str) -> str:
    """Who a commit made as `claimed` is recorded by: a skillfs server takes the token's name
    (the test servers' admin token is named "admin"), whatever the client claims."""
    return "admin" if store.url.startswith("grpc") else claimed


def view(store: skillfs.Store, user: str, **kw: object) -> list[str]:
    with skillfs.Skills(store, "support-bot", user, **kw) as sk:  # type: ignore[arg-type]
        return [s.id for s in sk.snapshot().skills]


# ----------------------------------------------------------------- actor and message


def test_actor_and_message_in_manifest_history_and_change_log(store: skillfs.Store) -> None:
    since = store.publish(SHARED, "other", files("other")).revision
    store.publish(SHARED, "a", files("a"), actor="ops@example", message="first")
    store.publish(SHARED, "a", files("a", "v2"), actor="ops@example", message="second")
    store.delete(SHARED, "a", actor="ops@example", message="gone")
    who = actor_of(store, "ops@example")
    history = store.history(SHARED, "a")
    assert [(m.actor, m.message) for m in history] == [
        (who, "gone"),
        (who, "second"),
        (who, "first"),
    ]
    changes = list(store.changes.follow("support-bot", since, timeout=0.2))
    assert [(c.op, c.actor, c.message) for c in changes] == [
        ("put", who, "first"),
        ("put", who, "second"),
        ("remove", who, "gone"),
    ]


def test_actor_defaults(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLFS_ACTOR", "ci-pipeline")
    assert default_actor() == "ci-pipeline"
    with skillfs.open_store(store_url) as store:
        store.publish(SHARED, "a", files("a"))
        assert store.manifest(SHARED, "a").actor == actor_of(store, "ci-pipeline")
    with skillfs.open_store(store_url, actor="release-bot") as store:
        store.publish(SHARED, "b", files("b"))
        assert store.manifest(SHARED, "b").actor == actor_of(store, "release-bot")
    monkeypatch.delenv("SKILLFS_ACTOR")
    assert "@" in default_actor()
    with pytest.raises(InvalidArgument):
        skillfs.open_store(store_url, actor="x\ny").publish(SHARED, "c", files("c"))


def test_audit_newest_first_filtered(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"), actor="ann", message="add a")
    store.publish(ALICE, "b", files("b"), actor="bea", message="add b")
    mid = time.time()
    time.sleep(0.01)
    store.publish(SHARED, "a", files("a", "2"), actor="bea", message="fix a")
    store.governance.disable(
        SHARED, "a", reason="broken", options=skillfs.WriteOptions(actor="ann")
    )
    entries = store.governance.audit("support-bot")
    assert [(e.skill, e.version, e.action, e.message) for e in entries] == [
        ("a", 3, "disable", "broken"),
        ("a", 2, "publish", "fix a"),
        ("b", 1, "publish", "add b"),
        ("a", 1, "publish", "add a"),
    ]
    assert entries[2].scope == ALICE
    assert [e.version for e in store.governance.audit("support-bot", since=mid)] == [3, 2]
    assert [e.version for e in store.governance.audit("support-bot", until=mid)] == [1, 1]
    assert [e.skill for e in store.governance.audit("support-bot", skill="b")] == ["b"]
    assert [e.skill for e in store.governance.audit(ALICE)] == ["b"]
    if not store.url.startswith("grpc"):
        assert [e.version for e in store.governance.audit("support-bot", actor="bea")] == [2, 1]
    assert store.governance.audit("agents/support-bot", limit=1)[0].version == 3
    store.publish(MARKET, "m", files("m"), message="market")
    assert [e.message for e in store.governance.audit("markets/team")] == ["market"]
    with pytest.raises(InvalidArgument, match="since=nan"):  # (outside testing: silently nothing)
        store.governance.audit("support-bot", since=float("nan"))


# ----------------------------------------------------------------- disable / enable


def test_disable_keeps_files_and_history_and_leaves_the_view(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.publish(SHARED, "b", files("b"))
    assert view(store, "alice") == ["a", "b"]
    r = store.governance.disable(SHARED, "a", reason="leaks secrets")
    m = store.manifest(SHARED, "a")
    assert (m.version, m.disabled, m.disabled_reason) == (r.version, True, "leaks secrets")
    assert set(m.files) == {"SKILL.md", "references/r.md"}
    assert store.read(SHARED, "a", "references/r.md") == b"ref\n"
    assert view(store, "alice") == ["b"]  # next step (C3)
    store.publish(SHARED, "a", files("a", "fixed"))  # a fix keeps the kill switch on
    assert store.manifest(SHARED, "a").disabled
    assert view(store, "alice") == ["b"]
    store.governance.enable(SHARED, "a")
    m = store.manifest(SHARED, "a")
    assert not m.disabled and m.version == r.version + 2
    assert b"fixed" in store.read(SHARED, "a", "SKILL.md")
    assert view(store, "alice") == ["a", "b"]
    assert [e.action for e in store.governance.audit(SHARED, skill="a")] == [
        "enable",
        "publish",
        "disable",
        "publish",
    ]


def test_disable_in_a_user_scope_hides_a_shared_skill_from_that_user_alone(
    store: skillfs.Store,
) -> None:
    store.publish(SHARED, "a", files("a"))
    store.publish(MARKET, "m", files("m"))
    store.governance.disable(ALICE, "a", reason="not for alice")
    store.governance.disable(ALICE, "m")
    hole = store.manifest(ALICE, "a")
    assert hole.disabled and hole.files == {} and hole.disabled_reason == "not for alice"
    layers = [skillfs.Market("team")]
    assert view(store, "alice", layers=layers) == []
    assert view(store, "bob", layers=layers) == ["a", "m"]
    store.governance.enable(ALICE, "a")
    assert view(store, "alice", layers=layers) == ["a"]
    with pytest.raises(NotFound):
        store.manifest(ALICE, "a")  # the hole is gone, not an empty skill
    # recorded as what it was (outside testing: the audit said "delete")
    assert [e.action for e in store.governance.audit(ALICE, skill="a")] == ["enable", "disable"]


def test_a_disabled_lower_layer_does_not_hide_a_higher_one(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a", "shared"))
    store.publish(ALICE, "a", files("a", "alice's"))
    store.governance.disable(SHARED, "a")
    assert view(store, "alice") == ["a"]
    assert view(store, "bob") == []


def test_a_disabled_skill_cannot_be_moved_over_another_either(store: skillfs.Store) -> None:
    """Outside (governance) testing: the rename guard held for a move to a new name, but a
    commit removing the disabled skill and writing its files over an existing skill went
    through, and the killed content was served under the other name; then (review) the
    guard compared SKILL.md's bytes, so a move that fixed the frontmatter's name on the
    way went through too. A commit that removes it writes no other skill; alone it goes."""
    from skillfs.model import Put, Remove

    store.publish(SHARED, "leaky", {**files("leaky", "print the API key"), "run.sh": b"echo $K"})
    store.publish(SHARED, "other", files("other", "fine"))
    store.publish(SHARED, "third", files("third", "fine"))
    store.governance.disable(SHARED, "leaky", reason="leaks the API key")
    leaky = store.manifest(SHARED, "leaky")
    renamed = {**leaky.files, **files("other", "print the API key")}
    for target in (dict(leaky.files), renamed):
        move = [Remove(SHARED, "leaky", leaky.version), Put(SHARED, "other", target)]
        with pytest.raises(
            FailedPrecondition, match="is disabled \\(leaks the API key\\): removing it"
        ):
            store.commit(move)
    assert store.manifest(SHARED, "other").version == 1
    beside = [Remove(SHARED, "leaky", leaky.version), Put(SHARED, "third", files("third"))]
    with pytest.raises(FailedPrecondition, match="or delete it on its own"):
        store.commit(beside)
    assert store.manifest(SHARED, "third").version == 1
    assert store.commit([Remove(SHARED, "leaky", leaky.version)]).versions == {
        "leaky": leaky.version + 1
    }


def test_disable_bad_input_writes_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    rev = store.revision("support-bot")
    with pytest.raises(NotFound, match="'nope' does not exist"):
        store.governance.disable(SHARED, "nope")
    with pytest.raises(NotFound, match="nor its agent's shared scope"):
        store.governance.disable(ALICE, "nope")
    with pytest.raises(FailedPrecondition, match="not disabled"):
        store.governance.enable(SHARED, "a")
    with pytest.raises(NotFound):
        store.governance.enable(ALICE, "a")
    with pytest.raises(InvalidArgument, match="not a skill"):
        store.governance.disable(SHARED, "_drafts")
    assert store.revision("support-bot") == rev
    store.governance.disable(SHARED, "a")
    rev = store.revision("support-bot")
    with pytest.raises(FailedPrecondition, match="already disabled"):
        store.governance.disable(SHARED, "a")
    with pytest.raises(Conflict):
        store.governance.enable(SHARED, "a", options=skillfs.WriteOptions(expected_version=1))
    assert store.revision("support-bot") == rev
    # a disabled skill archived keeps its switch: enable acts on skills only (review: it
    # switched the archive entry on, and a restore then served it)
    store.archive.add(SHARED, "a", reason="old")
    rev = store.revision("support-bot")
    with pytest.raises(InvalidArgument, match="only skills can be enabled"):
        store.governance.enable(SHARED, ".archive/a")
    assert store.revision("support-bot") == rev


# ----------------------------------------------------------------- the CLI


@pytest.fixture(params=["sqlite", "grpc"])
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = url_for(request, request.param, tmp_path)
    skillfs.open_store(url).close()
    return url


def test_cli_disable_enable_ls_prompt_and_audit(cli_url: str) -> None:
    with skillfs.open_store(cli_url) as store:
        store.publish(SHARED, "a", files("a"))
        store.publish(SHARED, "b", files("b"))
    env = {"SKILLFS_ACTOR": "oncall"}
    done = as_json(cli_url, "disable", "a", "-s", "shared:support-bot", "-r", "leaks")
    assert done["version"] == 2
    rows = {r["skill"]: r for r in as_json(cli_url, "ls", "-s", "shared:support-bot")}
    assert rows["a"]["disabled"] and rows["a"]["disabled_reason"] == "leaks"
    assert not rows["b"]["disabled"]
    assert "disabled: leaks" in ok(cli_url, "ls", "-s", "shared:support-bot").stdout
    prompt = ok(cli_url, "prompt", "-a", "support-bot", "-u", "alice")
    assert "<name>b</name>" in prompt.stdout and "<name>a</name>" not in prompt.stdout
    assert "disabled a (shared:support-bot): leaks" in prompt.stderr
    ok(cli_url, "disable", "b", "-s", "user:support-bot/alice", **env)
    shown = as_json(cli_url, "prompt", "-a", "support-bot", "-u", "alice")
    assert shown["skills"] == [] and {p["skill"] for p in shown["left_out"]} == {"a", "b"}
    assert [s["id"] for s in as_json(cli_url, "prompt", "-a", "support-bot", "-u", "bob")[
        "skills"
    ]] == ["b"]  # fmt: skip
    ok(cli_url, "enable", "a", "-s", "shared:support-bot", **env)
    entries = as_json(cli_url, "audit", "-a", "support-bot")
    assert [(e["skill"], e["action"]) for e in entries] == [
        ("a", "enable"),
        ("b", "disable"),
        ("a", "disable"),
        ("b", "publish"),
        ("a", "publish"),
    ]
    oncall = "admin" if cli_url.startswith("grpc") else "oncall"
    assert entries[0]["actor"] == oncall
    assert entries[1]["scope"] == "user:support-bot/alice"
    mine = as_json(cli_url, "audit", "-a", "support-bot", "--actor", oncall)
    assert len(mine) == (5 if cli_url.startswith("grpc") else 2)
    table = ok(cli_url, "audit", "-s", "shared:support-bot", "--skill", "a").stdout
    assert "enable" in table and "leaks" in table
    assert oncall in ok(cli_url, "history", "a", "-s", "shared:support-bot").stdout
    line = error_line(run(cli_url, "enable", "b", "-s", "shared:support-bot"))
    assert "not disabled" in line
    line = error_line(run(cli_url, "disable", "nope", "-s", "shared:support-bot"))
    assert "'nope' does not exist" in line
    assert "--market NAME" in error_line(run(cli_url, "audit"), 2)  # bad usage
    assert "ISO 8601" in error_line(run(cli_url, "audit", "-a", "x", "--since", "soon"), 2)


@pytest.mark.server
def test_grpc_client_cannot_claim_another_actor(tmp_path: Path) -> None:
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        with skillfs.open_store(url, token=grpc_servers.ALICE, actor="admin") as alice:
            alice.publish(ALICE, "a", files("a"), actor="root", message="mine")
            alice.governance.disable(ALICE, "a", options=skillfs.WriteOptions(actor="root"))
            assert [(m.actor, m.message) for m in alice.history(ALICE, "a")] == [
                ("alice", "disabled"),
                ("alice", "mine"),
            ]
            assert [e.actor for e in alice.governance.audit(ALICE)] == ["alice", "alice"]
    finally:
        server.stop(0)


@pytest.mark.server
def test_grpc_audit_is_one_call_within_the_tokens_read_grants(tmp_path: Path) -> None:
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        with skillfs.open_store(url, token=grpc_servers.ADMIN) as admin:
            admin.publish(SHARED, "s", files("s"), message="shared")
            admin.publish(ALICE, "a", files("a"), message="alice's")
            admin.publish(BOB, "b", files("b"), message="bob's")
            admin.publish(MARKET, "m", files("m"), message="market")
            everything = admin.governance.audit("support-bot")
            assert {(str(e.scope), e.message) for e in everything} == {
                (str(SHARED), "shared"),
                (str(ALICE), "alice's"),
                (str(BOB), "bob's"),
            }
            assert [e.skill for e in admin.governance.audit("markets/team")] == ["m"]
        with skillfs.open_store(url, token=grpc_servers.ALICE) as alice:
            calls: list[str] = []
            engine = alice.engine
            real = engine._pool.run  # type: ignore[attr-defined]

            def counted(attempt: object, limit: float) -> object:
                calls.append("call")
                return real(attempt, limit)

            engine._pool.run = counted  # type: ignore[attr-defined]
            mine = alice.governance.audit("support-bot")
            assert calls == ["call"]  # one call (Audit), no listing or manifest reads
            assert {(str(e.scope), e.skill) for e in mine} == {
                (str(SHARED), "s"),
                (str(ALICE), "a"),
            }
            assert mine == [e for e in everything if e.scope != BOB]  # the same entries, in order
            assert [
                e.skill for e in alice.governance.audit("support-bot", skill="a", actor="admin")
            ] == ["a"]
            assert alice.governance.audit("support-bot", until=0.0) == []
            assert [e.skill for e in alice.governance.audit(SHARED)] == ["s"]
            with pytest.raises(skillfs.errors.PermissionDenied):
                alice.governance.audit(BOB)
            with pytest.raises(skillfs.errors.PermissionDenied):
                alice.governance.audit("other-agent")
    finally:
        server.stop(0)
