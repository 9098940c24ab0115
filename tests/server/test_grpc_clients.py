"""The fsspec filesystem, the runtime and the CLI through a skillfs server with a worker's
token, unchanged; and the server's own view RPCs (Snapshot, Prompt, LoadSkillThroughPath,
Watch with manifests) answering as the runtime does."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import fsspec
import grpc
import pytest
from typer.testing import CliRunner

import skillfs
from skillfs.api import Store
from skillfs.cli.app import app
from skillfs.errors import InvalidArgument
from skillfs.model import Scope
from skillfs.remote.engine import GrpcEngine
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.remote.wire import manifest_from
from skillfs.runtime import Skills
from skillfs.server.app import SkillfsServer
from skillfs.server.backend import Caps
from skillfs.server.proofs import ManifestIndex
from skillfs.store.name_register import NAMES
from skillfs.store.retention import HistoryPolicy
from support.grpc_servers import ADMIN, ALICE, READER, in_process, running, single
from tests.helpers import skill_md as md

AGENT = "support-bot"
A = Scope.user(AGENT, "alice")
SHARED = Scope.shared(AGENT)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(f"sqlite:///{tmp_path / 'skills.db'}", tmp_path) as srv:
        yield srv


@pytest.fixture
def url(server: SkillfsServer) -> str:
    admin = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN)
    admin.publish(SHARED, "reviewer", {"SKILL.md": md("reviewer"), "style.md": b"be kind\n"})
    return f"grpc://127.0.0.1:{server.grpc_port}"


def test_fsspec_through_the_server(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLFS_TOKEN", ALICE)
    fs = fsspec.filesystem(
        "skillfs", store=url, agent_id=AGENT, user_id="alice", base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip
    assert fs.cat("skills/reviewer/style.md") == b"be kind\n"  # the shared skill, read through
    fs.pipe("skills/reviewer/style.md", b"be brief\n")  # copy-on-write into alice's scope
    fs.pipe("skills/mine/SKILL.md", md("mine"))
    assert sorted(fs.ls("skills", detail=False)) == ["skills/mine", "skills/reviewer"]
    admin = skillfs.open_store(url, token=ADMIN)
    assert admin.read(A, "reviewer", "style.md") == b"be brief\n"
    assert admin.read(A, "reviewer", "SKILL.md") == md("reviewer")  # copied by reference
    assert admin.read(SHARED, "reviewer", "style.md") == b"be kind\n"
    with fs.transaction:
        fs.pipe("skills/mine/a.md", b"a")
        fs.rm("skills/mine/SKILL.md")
    assert sorted(admin.manifest(A, "mine").files) == ["a.md"]


def test_cli_through_the_server(url: str) -> None:
    runner = CliRunner()
    scope = ["--store", url, "--token", ALICE, "--scope", str(A)]
    result = runner.invoke(app, ["ls", "--scope", str(SHARED), "--store", url, "--token", ALICE,
                                 "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [s["skill"] for s in json.loads(result.stdout)] == ["reviewer"]
    denied = runner.invoke(app, ["ls", "--scope", f"user:{AGENT}/bob", "--store", url,
                                 "--token", ALICE])  # fmt: skip
    assert denied.exit_code == 1 and "may not read" in denied.output
    prompt = runner.invoke(app, ["prompt", "--agent", AGENT, "--user", "alice", "--store", url,
                                 "--token", ALICE])  # fmt: skip
    assert prompt.exit_code == 0, prompt.output
    assert "<name>reviewer</name>" in prompt.stdout
    assert runner.invoke(app, ["ls", *scope]).exit_code == 0


def test_view_rpcs_answer_as_the_runtime_does(url: str, server: SkillfsServer) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    alice.publish(A, "reviewer", {"SKILL.md": md("reviewer", "alice's own"), "x.md": b"x"})
    alice.publish(A, "mine", {"SKILL.md": md("mine")})
    worker = Skills(alice, AGENT, "alice")
    local = worker.snapshot()  # the runtime, through the grpc engine
    meta = [("authorization", f"Bearer {ALICE}")]
    view = pb.View(agent_id=AGENT, user_id="alice")
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        stub = pb_grpc.SkillReaderStub(ch)
        snap = single(stub.Snapshot(pb.SnapshotRequest(view=view), metadata=meta))
        assert snap.token == local.token
        assert [(s.id, s.scope, s.version) for s in snap.skills] == [
            (s.id, str(s.scope), s.version) for s in local.skills
        ]
        assert list(snap.skills[1].shadows) == [str(SHARED)]
        same = single(
            stub.Snapshot(pb.SnapshotRequest(view=view, known=snap.revisions), metadata=meta)
        )
        assert same.unchanged and not same.skills
        prompt = single(stub.Prompt(pb.PromptRequest(view=view), metadata=meta)).prompt
        assert prompt == local.prompt()
        load = stub.LoadSkillThroughPath(
            pb.LoadRequest(view=view, skill_id="reviewer"), metadata=meta
        )
        assert load.text == local.load("reviewer") and "alice's own" in load.text
        with pytest.raises(grpc.RpcError) as err:
            stub.LoadSkillThroughPath(pb.LoadRequest(view=view, skill_id="nope"), metadata=meta)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "mine, reviewer" in err.value.details()  # the model can correct itself
        # the files of a view skill are read by naming it as their source
        x = next(f for f in snap.skills[1].files if f.path == "x.md")
        src = pb.Source(
            scope=snap.skills[1].scope, skill="reviewer", version=snap.skills[1].version
        )
        chunks = stub.ReadFile(
            pb.ReadFileRequest(ranges=[pb.BlobRange(sha256=x.sha256, source=src)]), metadata=meta
        )
        assert b"".join(c.data for c in chunks) == b"x"
        # a watch with manifests carries the new manifest of each change, of a commit too
        since = snap.revisions[f"agents/{AGENT}"]
        alice.commit([skillfs.Put(A, "mine", {"SKILL.md": md("mine", "v2")}),
                      skillfs.Put(A, "extra", {"SKILL.md": md("extra")})])  # fmt: skip
        want = {(n, alice.manifest(A, n).version) for n in ("mine", "extra")}
        watch = stub.Watch(
            pb.WatchRequest(domain=f"agents/{AGENT}", since=since, max_wait_seconds=5,
                            with_manifests=True),
            metadata=meta,
        )  # fmt: skip
        event = next(iter(watch))
        watch.cancel()
        # the raw log: the scope's name register moved with the commit that created "extra"
        # (store.name_register), listed as side entries are; store.changes.follow leaves it out
        assert {(ch.skill, ch.version) for ch in event.changes if ch.skill != NAMES} == want
        shipped = [manifest_from(sm.manifest_json) for sm in event.manifests]
        assert {(m.skill, m.version) for m in shipped if m.skill != NAMES} == want
    worker.close()  # writes the worker's load counts through RecordUsage
    counts = skillfs.open_store(url, token=ADMIN).usage.counts(AGENT)
    assert counts[("alice", "reviewer")] >= 1  # the server batches its own loads


def test_other_users_changes_never_reload_a_user_scoped_worker(url: str) -> None:
    """C3 through the server: a token that may not see bob's scope is still told the revision
    moved past his changes, so alice's worker advances without loading anything."""
    admin = skillfs.open_store(url, token=ADMIN)
    admin.publish(A, "mine", {"SKILL.md": md("mine")})
    alice = skillfs.open_store(url, token=ALICE)
    worker = Skills(alice, AGENT, "alice")
    first = worker.snapshot()
    loads: list[str] = []
    engine = alice.engine
    real_scope, real_skills = engine.load_scope, engine.load_skills

    def load_scope(scope: Scope) -> dict[str, skillfs.Manifest]:
        loads.append(f"load_scope {scope}")
        return real_scope(scope)

    def load_skills(scope: Scope, skills: Sequence[str]) -> dict[str, skillfs.Manifest]:
        loads.append(f"load_skills {scope} {list(skills)}")
        return real_skills(scope, skills)

    engine.load_scope = load_scope  # type: ignore[method-assign]
    engine.load_skills = load_skills  # type: ignore[method-assign]
    try:
        for n in range(5):
            c = admin.publish(Scope.user(AGENT, "bob"), "notes", {"SKILL.md": md("notes", str(n))})
            snap = worker.snapshot()
            assert snap.revisions[f"agents/{AGENT}"] == c.revision  # moved on (C3, C5)
            assert snap.token == first.token  # the same view
        assert loads == []
        # alice's own change is still seen at the next step, loading only that skill
        c = admin.publish(A, "mine", {"SKILL.md": md("mine", "v2")})
        assert worker.snapshot().revisions[f"agents/{AGENT}"] == c.revision
        assert worker.snapshot().load("mine").count("v2") == 1
        assert not [x for x in loads if x.startswith("load_scope")]
        # and store.changes.follow() shows alice nothing of bob's
        since = alice.revision(AGENT)
        admin.publish(Scope.user(AGENT, "bob"), "notes", {"SKILL.md": md("notes", "x")})
        assert list(alice.changes.follow(AGENT, since=since, timeout=1.5)) == []
    finally:
        worker.close()


def test_blob_sources_stay_on_the_newest_manifest(url: str, server: SkillfsServer) -> None:
    """A file unchanged across versions is read (and proven) through its newest manifest, not
    through an old version that history retention is about to drop."""
    alice = Store(
        GrpcEngine(url, token=ALICE),
        history_policy=HistoryPolicy(keep_versions=10, keep_days=0),
    )
    ref = b"unchanged reference\n"
    for v in range(1, 6):
        alice.publish(A, "s", {"SKILL.md": md("s", f"v{v}"), "references/ref.md": ref})
    entry = alice.manifest(A, "s").files["references/ref.md"]
    assert [m.version for m in alice.engine.history(A, "s")] == [4, 3, 2, 1]  # like `history`
    # the old versions go (retention, or another server's GC); no cache remembers them
    server.store.engine.drop_history(A, "s", [1, 2, 3, 4])
    server.backend.proofs.index = ManifestIndex(server.store)  # a server that never saw them
    alice.blobs.clear()
    assert alice.read_entry(entry) == ref
    assert alice.publish(A, "s", {"SKILL.md": md("s", "v9"), "references/ref.md": entry})


def test_watch_caps_answer_early_naming_the_cap_and_unary_calls_still_answer(
    tmp_path: Path,
) -> None:
    """With caps of 2 watches (1 per token), a Watch beyond one is answered RESOURCE_EXHAUSTED
    naming the cap, without skillfs metadata (try another server), and unary calls still
    answer."""
    caps = Caps(max_watches=2, max_watches_per_token=1)
    server = in_process(f"memory://{uuid.uuid4().hex}", tmp_path, max_workers=4, caps=caps)
    address = f"127.0.0.1:{server.grpc_port}"
    worker = skillfs.open_store(f"grpc://{address}?timeout=3", token=ALICE, retry_for=0)
    c = skillfs.open_store(f"grpc://{address}", token=ADMIN).publish(A, "s", {"SKILL.md": md("s")})
    domain = f"agents/{AGENT}"
    streams: list[Any] = []
    names: list[str] = []
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.SkillReaderStub(ch)

        def watch(token: str) -> grpc.StatusCode | None:
            """Open a long watch; None once it is open, else the status it ended with."""
            before = server.backend.watches.open
            stream = stub.Watch(
                pb.WatchRequest(domain=domain), metadata=[("authorization", f"Bearer {token}")]
            )
            streams.append(stream)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if stream.done():
                    assert "skillfs-error" not in dict(stream.trailing_metadata() or ())
                    code: grpc.StatusCode = stream.code()
                    names.append(stream.details())
                    return code
                if server.backend.watches.open > before:
                    return None
                time.sleep(0.01)
            raise AssertionError("the watch neither opened nor ended")

        try:
            assert watch(ALICE) is None
            for _ in range(8):
                assert watch(ALICE) == grpc.StatusCode.RESOURCE_EXHAUSTED  # per token
            assert "max_watches_per_token" in names[-1]
            assert watch(READER) is None
            assert watch(ADMIN) == grpc.StatusCode.RESOURCE_EXHAUSTED  # in all
            assert "(max_watches)" in names[-1]
            assert server.backend.watches.open == 2
            started = time.monotonic()
            for _ in range(20):  # the per-step check, and its catch-up read of the log
                assert worker.revision(AGENT) == c.revision
                assert worker.engine.changes(domain, c.revision, 0) == []
            assert time.monotonic() - started < 5
        finally:
            for s in streams:
                s.cancel()
            server.stop(0)


def test_a_server_over_its_concurrent_call_limit_is_failed_over(tmp_path: Path) -> None:
    """gRPC's own RESOURCE_EXHAUSTED ("Concurrent RPC limit exceeded") means "this server is
    busy", not "too large": the client tries the next server."""
    store_url = f"memory://{uuid.uuid4().hex}"
    busy = in_process(store_url, tmp_path / "busy", max_concurrent_rpcs=4)
    idle = in_process(store_url, tmp_path / "idle")
    meta = [("authorization", f"Bearer {ADMIN}")]

    with grpc.insecure_channel(f"127.0.0.1:{busy.grpc_port}") as ch:
        # four Watch streams that wait for changes hold the limit: a server-streaming call
        # is open on the server as soon as its one request arrives
        watch = pb_grpc.SkillReaderStub(ch).Watch
        held = [watch(pb.WatchRequest(domain=f"agents/{AGENT}"), metadata=meta) for _ in range(4)]
        reader = pb_grpc.SkillReaderStub(ch)
        try:
            deadline = time.monotonic() + 30  # generous: a loaded machine is slow to open them
            while busy.backend.watches.open < 4 and time.monotonic() < deadline:
                time.sleep(0.02)  # a Ping before they are all open would take a Watch's place
            while time.monotonic() < deadline:  # until all 4 arrived and hold the limit
                try:
                    reader.Ping(pb.PingRequest(), metadata=meta, timeout=2)
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        break
                time.sleep(0.02)
            else:
                ended = [f.exception() for f in held if f.done()]
                raise AssertionError(f"the busy server never reached its call limit: {ended}")
            client = skillfs.open_store(
                f"grpc://127.0.0.1:{busy.grpc_port},127.0.0.1:{idle.grpc_port}",
                token=ADMIN,
                retry_for=0,
            )
            for _ in range(6):  # round-robin: some calls go to the busy server first
                assert client.revision(AGENT) is None
        finally:
            for stream in held:
                stream.cancel()
            busy.stop(0)
            idle.stop(0)


def test_conflict_carries_the_current_version(url: str, server: SkillfsServer) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    alice.publish(A, "s", {"SKILL.md": md("s")})
    alice.publish(A, "s", {"SKILL.md": md("s", "2")})
    with pytest.raises(skillfs.errors.Conflict) as err:
        alice.publish(A, "s", {"SKILL.md": md("s", "3")}, expected_version=1)
    assert err.value.current_version == 2 and "version 2" in str(err.value)
    # the server's own writes answer ABORTED, the current version in message and metadata
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        admin = pb_grpc.SkillAdminStub(ch)
        meta = [("authorization", f"Bearer {ALICE}")]
        for call in (
            lambda: admin.Delete(
                pb.DeleteRequest(scope=str(A), skill="s", expected_version=1), metadata=meta
            ),
            lambda: admin.Rollback(
                pb.RollbackRequest(scope=str(A), skill="s", version=1, expected_version=1),
                metadata=meta,
            ),
        ):
            with pytest.raises(grpc.RpcError) as rpc_err:
                call()
            assert rpc_err.value.code() == grpc.StatusCode.ABORTED
            assert "now at version 2" in rpc_err.value.details()
            trailing = dict(rpc_err.value.trailing_metadata())
            assert trailing["skillfs-error"] == "Conflict"
            assert trailing["skillfs-current-version"] == "2"
    assert alice.manifest(A, "s").version == 2


def test_failover_to_the_next_server(tmp_path: Path) -> None:
    store_url = f"memory://{uuid.uuid4().hex}"
    one = in_process(store_url, tmp_path / "1")
    two = in_process(store_url, tmp_path / "2")
    client = skillfs.open_store(
        f"grpc://127.0.0.1:{one.grpc_port},127.0.0.1:{two.grpc_port}", token=ADMIN
    )
    try:
        for n in range(6):
            client.publish(A, "s", {"SKILL.md": md("s", str(n))})
        one.stop(0)
        for n in range(6, 12):  # same engine object: the dead server is skipped
            assert client.publish(A, "s", {"SKILL.md": md("s", str(n))}).version == n + 1
            assert client.manifest(A, "s").version == n + 1
        two.stop(0)
        with pytest.raises(skillfs.errors.StoreUnavailable, match="no skillfs server answered"):
            skillfs.open_store(client.url, token=ADMIN, retry_for=0).skills(A)
    finally:
        one.stop(0)
        two.stop(0)


def test_a_call_right_after_a_restart_waits_for_the_reconnect(tmp_path: Path) -> None:
    """A call made while the channel backs off after its server restarted (up to a second)
    failed at once with "Connection refused", though the server was back (CI saw it with a
    new server on a port an earlier one had used); and calls that are not retried (usage
    counts) failed outright. The engine now waits up to `RECONNECT_WAIT` for a reconnect."""
    store_url = f"memory://{uuid.uuid4().hex}"
    first = in_process(store_url, tmp_path / "1")
    port = first.grpc_port
    client = skillfs.open_store(f"grpc://127.0.0.1:{port}", token=ADMIN, retry_for=0)
    try:
        client.usage.record("bot", {("alice", "s"): 1})
        first.stop(0)
        with pytest.raises(skillfs.errors.StoreUnavailable):  # down: refused, after the wait
            client.usage.record("bot", {("alice", "s"): 1})
        again = in_process(store_url, tmp_path / "2", grpc=f"127.0.0.1:{port}")
        try:
            client.usage.record("bot", {("alice", "s"): 1})  # the channel is still backing off
            assert client.usage.detail("bot")[("alice", "s")].count == 2
        finally:
            again.stop(0)
    finally:
        first.stop(0)
        client.close()


@pytest.mark.parametrize(
    "url", ["grpc://127.0.0.1:99999", "grpc://127.0.0.1", "grpc://127.0.0.1:0", "grpc://:7070"]
)
def test_a_server_address_without_a_valid_port_is_refused(url: str) -> None:
    """gRPC would take port 99999 as 34463 (outside testing): the URL is refused instead."""
    with pytest.raises(InvalidArgument, match="give host:port, port 1-65535"):
        GrpcEngine(url)


def test_the_admin_writes_carry_their_message(url: str, server: SkillfsServer) -> None:
    """Publish, Delete and Rollback (for clients in other languages) take a message, which
    the audit shows, like every other surface's writes."""
    alice = skillfs.open_store(url, token=ALICE)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        admin = pb_grpc.SkillAdminStub(ch)
        meta = [("authorization", f"Bearer {ALICE}")]
        header = pb.PublishHeader(scope=str(A), skill="m", message="first cut")
        admin.Publish(
            iter([pb.PublishRequest(header=header),
                  pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=md("m")))]),
            metadata=meta,
        )  # fmt: skip
        admin.Delete(pb.DeleteRequest(scope=str(A), skill="m", message="retired"), metadata=meta)
        admin.Rollback(
            pb.RollbackRequest(scope=str(A), skill="m", version=1, message="needed after all"),
            metadata=meta,
        )
        with pytest.raises(grpc.RpcError) as err:
            admin.Delete(
                pb.DeleteRequest(scope=str(A), skill="m", message="x" * 5000), metadata=meta
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    audit = {e.version: (e.actor, e.message) for e in alice.governance.audit(A) if e.skill == "m"}
    assert audit == {
        1: ("alice", "first cut"), 2: ("alice", "retired"), 3: ("alice", "needed after all")
    }  # fmt: skip
    assert alice.manifest(A, "m").version == 3
