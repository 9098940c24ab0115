"""Abuse of the gRPC port by a holder of a valid token (issue 10's adversarial findings),
against a real `skillfs serve`. The server's own defences are the engine's business only
where an engine limit is met (a commit's operations, usage counters): those tests run on Redis
and on etcd, the others on Redis (`ON_REDIS`). Every loop is bounded in count and time, and
all traffic goes to 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import skillfs
from skillfs.auth import tokens_document
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument, NotFound, PermissionDenied, TooLarge
from skillfs.model import Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from support.grpc_servers import ADMIN, ALICE, BOB, TOKENS, ServerProcess, single
from tests.helpers import manifest
from tests.store.test_manifest_integrity import _plant, deep_dict
from tests.stores import url_for

AGENT = "support-bot"
A = Scope.user(AGENT, "alice")
SHARED = Scope.shared(AGENT)
T = TypeVar("T")
MiB = 1 << 20
#: The gRPC layer's defences, whatever engine is behind the server: tested once.
ON_REDIS = pytest.mark.parametrize("server", ["redis"], indirect=True)


def md(name: str, extra: str = "") -> bytes:
    head = f"name: {name}\ndescription: A skill. Use when testing.\n{extra}"
    return f"---\n{head}---\n\nbody\n".encode()


def meta(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


@pytest.fixture(params=["redis", "etcd"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    # one token's streams capped at 256 (the default, 10,000, lets a fleet on one token
    # prefetch at once): the cap is reached in a test's time
    args = ("--max-streams-per-token", "256")
    url = url_for(request, request.param, tmp_path)
    with ServerProcess(url, tmp_path / "srv", args=args) as srv:
        yield srv


def threads_of(srv: ServerProcess) -> int:
    assert srv.proc is not None
    status = Path(f"/proc/{srv.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


def on_aio(srv: ServerProcess, work: Callable[[grpc.aio.Channel], Awaitable[T]]) -> T:
    """`work` with a grpc.aio channel to the server (streams without a client thread each)."""

    async def run() -> T:
        async with grpc.aio.insecure_channel(srv.address) as channel:
            return await work(channel)

    return asyncio.run(run())


def publish_header(scope: Scope, skill: str, force: bool = False) -> pb.PublishRequest:
    return pb.PublishRequest(header=pb.PublishHeader(scope=str(scope), skill=skill, force=force))


def publish_file(path: str, data: bytes) -> pb.PublishRequest:
    return pb.PublishRequest(file=pb.PublishFile(path=path, data=data))


def publish(srv: ServerProcess, token: str, skill: str, data: bytes, force: bool = False) -> Any:
    """A raw Publish of one SKILL.md (in 1 MiB pieces); the error, or None."""
    pieces = [data[i : i + MiB] for i in range(0, len(data), MiB)] or [b""]
    messages = [publish_header(A, skill, force), *(publish_file("SKILL.md", p) for p in pieces)]
    with grpc.insecure_channel(srv.address) as ch:
        try:
            pb_grpc.SkillAdminStub(ch).Publish(iter(messages), metadata=meta(token), timeout=60)
        except grpc.RpcError as exc:
            return exc
    return None


@ON_REDIS
def test_idle_publish_and_unread_read_streams_pin_nothing_and_are_capped(
    server: ServerProcess,
) -> None:
    """Publish streams that never send their header and ReadFile streams never read hold no
    thread: other clients are answered at once while they are open, the server's threads do
    not grow with them, and one token is capped (max_streams_per_token, named)."""
    admin = skillfs.open_store(f"grpc://{server.address}", token=ADMIN)
    big = bytes(range(256)) * 4096 * 3  # 3 MiB: more than a stream's flow-control window
    m = admin.publish(A, "big", {"SKILL.md": md("big"), "data.bin": big}).versions["big"]
    entry = admin.manifest(A, "big").files["data.bin"]
    source = pb.Source(scope=str(A), skill="big", version=m)
    read = pb.ReadFileRequest(ranges=[pb.BlobRange(sha256=entry.sha256, source=source)])

    async def abuse(channel: grpc.aio.Channel) -> tuple[int, int, str, float]:
        admin_stub = pb_grpc.SkillAdminStub(channel)
        reader = pb_grpc.SkillReaderStub(channel)
        calls: list[Any] = [reader.ReadFile(read, metadata=meta(BOB)) for _ in range(8)]
        calls += [admin_stub.Publish(metadata=meta(ALICE)) for _ in range(8)]
        await asyncio.sleep(0.5)
        few = threads_of(server)
        calls += [admin_stub.Publish(metadata=meta(ALICE)) for _ in range(248)]  # 256 in all
        await asyncio.sleep(1.0)
        many = threads_of(server)
        refused = admin_stub.Publish(metadata=meta(ALICE))
        try:
            await asyncio.wait_for(refused, 10)
            details = ""
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            details = exc.details() or ""
        started = time.monotonic()
        for _ in range(20):  # other tokens are served at once meanwhile
            await reader.Ping(pb.PingRequest(), metadata=meta(ADMIN), timeout=5)
        took = time.monotonic() - started
        for call in calls:
            call.cancel()
        return few, many, details, took

    few, many, details, took = on_aio(server, abuse)
    assert many <= few + 2, (few, many)
    assert "max_streams_per_token" in details
    assert took < 2.0


@ON_REDIS
def test_a_publish_of_many_huge_paths_is_refused_as_they_arrive(server: ServerProcess) -> None:
    """Paths are held to the limits per message, before the next is read: the refusal comes
    while the client is still sending, not after the server buffered everything."""

    sent = 0

    def flood() -> Iterator[pb.PublishRequest]:
        nonlocal sent
        yield publish_header(A, "flood")
        for i in range(30_000):
            yield publish_file(f"{'d' * 250}/{'e' * 250}/{i}.md", b"")
            sent += 1

    with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError) as raised:
        pb_grpc.SkillAdminStub(ch).Publish(flood(), metadata=meta(ALICE), timeout=60)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Limits.max_files" in raised.value.details()
    assert sent < 30_000

    bad = on_aio(server, lambda ch: _one_bad_path(ch))
    assert bad == grpc.StatusCode.INVALID_ARGUMENT


async def _one_bad_path(channel: grpc.aio.Channel) -> grpc.StatusCode:
    call = pb_grpc.SkillAdminStub(channel).Publish(metadata=meta(ALICE), timeout=30)
    await call.write(publish_header(A, "bad"))
    try:
        await call.write(publish_file("x" * 300, b""))  # a segment over 255 bytes
        await asyncio.wait_for(call.wait_for_connection(), 5)
        code: grpc.StatusCode = await asyncio.wait_for(call.code(), 10)  # before done_writing
        return code
    finally:
        call.cancel()


@ON_REDIS
def test_an_oversized_frontmatter_is_refused_before_it_is_parsed(server: ServerProcess) -> None:
    """An ~8 MiB frontmatter of 500k keys is refused in well under a second of parsing."""
    keys = "".join(f"k{i}: v\n" for i in range(500_000))
    started = time.monotonic()
    exc = publish(server, ALICE, "fat", md("fat", keys))
    assert exc is not None and exc.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "MAX_FRONTMATTER_BYTES" in exc.details()
    assert time.monotonic() - started < 10


@ON_REDIS
def test_findings_and_not_found_lists_are_summarized_to_fit_a_status(
    server: ServerProcess,
) -> None:
    """The findings of a SKILL.md of 5,000 unknown keys, and a NOT_FOUND naming each of 400
    skills with long ids, arrive as the error they are, cut to a size gRPC can deliver."""
    keys = "".join(f"unknown-key-{i}: v\n" for i in range(5_000))
    exc = publish(server, ALICE, "keys", md("keys", keys))
    assert exc is not None and exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
    assert "more characters left out" in exc.details() or len(exc.details()) < 4096

    admin = skillfs.open_store(f"grpc://{server.address}", token=ADMIN)
    names = [f"skill-{i:04d}-{'x' * 50}" for i in range(400)]
    for part in range(0, len(names), 40):
        admin.commit([skillfs.Put(SHARED, n, {"SKILL.md": md(n)}) for n in names[part : part + 40]])
    view = pb.View(agent_id=AGENT, user_id="alice")
    with grpc.insecure_channel(server.address) as ch:
        reader = pb_grpc.SkillReaderStub(ch)
        with pytest.raises(grpc.RpcError) as raised:
            reader.LoadSkillThroughPath(
                pb.LoadRequest(view=view, skill_id="nope"), metadata=meta(ALICE), timeout=30
            )
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(raised.value.details()) <= 4096


@ON_REDIS
@pytest.mark.parametrize("depth", [260, 5000])
def test_deep_frontmatter_is_bad_input_never_internal(server: ServerProcess, depth: int) -> None:
    extra = "x: " + "{a: " * depth + "1" + "}" * depth + "\n"
    for force in (False, True):
        exc = publish(server, ALICE, "deep", md("deep", extra), force=force)
        assert exc is None or exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc
    assert '"level": "error"' not in server.log_tail(200)


@ON_REDIS
def test_a_view_naming_one_market_many_times_costs_what_naming_it_once_does(
    server: ServerProcess,
) -> None:
    view = pb.View(agent_id=AGENT, user_id="alice", markets=["team"] * 20_000)
    with grpc.insecure_channel(server.address) as ch:
        reader = pb_grpc.SkillReaderStub(ch)
        started = time.monotonic()
        single(reader.Snapshot(pb.SnapshotRequest(view=view), metadata=meta(ADMIN), timeout=10))
        assert time.monotonic() - started < 3
        many = pb.View(agent_id=AGENT, user_id="alice", markets=[f"m{i}" for i in range(100)])
        with pytest.raises(grpc.RpcError) as raised:
            single(reader.Snapshot(pb.SnapshotRequest(view=many), metadata=meta(ADMIN), timeout=10))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "MAX_VIEW_MARKETS" in raised.value.details()


@ON_REDIS
def test_health_list_answers_unimplemented_without_logging_errors(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for _ in range(20):
            with pytest.raises(grpc.RpcError) as raised:
                stub.List(health_pb2.HealthListRequest(), timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    time.sleep(0.2)
    assert '"level": "error"' not in server.log_tail(200)


@ON_REDIS
def test_a_publish_opened_before_revocation_cannot_commit_after_it(
    server: ServerProcess,
) -> None:
    """The token is checked again before the commit: revoking it while the stream is open
    (the config re-read within two seconds) refuses the commit, and nothing is written."""

    async def late(channel: grpc.aio.Channel) -> grpc.StatusCode:
        call = pb_grpc.SkillAdminStub(channel).Publish(metadata=meta(ALICE), timeout=60)
        await call.write(publish_header(A, "late"))
        await call.write(publish_file("SKILL.md", md("late")))
        revoked = [t for t in TOKENS if t[1] != ALICE]
        server.tokens.write_text(tokens_document(revoked, receipt_key="test-receipt-key"))
        reader = pb_grpc.SkillReaderStub(channel)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the server has read the new config
            try:
                await reader.Ping(pb.PingRequest(), metadata=meta(ALICE), timeout=5)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    break
            await asyncio.sleep(0.1)
        await call.done_writing()
        try:
            await call
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    assert on_aio(server, late) == grpc.StatusCode.UNAUTHENTICATED
    admin = skillfs.open_store(f"grpc://{server.address}", token=ADMIN)
    assert "late" not in admin.skills(A)
    json.loads(server.tokens.read_text())  # the config stayed readable throughout


def test_a_user_token_cannot_break_its_scope_or_the_counters(server: ServerProcess) -> None:
    """What one writer of one user's scope tried in the adversarial session, through the
    engine-level Commit and RecordUsage a grpc:// client sends: each is refused by the server
    with the error it is, nothing is written, and the scope and the counters stay readable."""
    alice = skillfs.open_store(f"grpc://{server.address}", token=ALICE)
    admin = skillfs.open_store(f"grpc://{server.address}", token=ADMIN)
    try:
        alice.publish(A, "good", {"SKILL.md": md("good")})
        before = admin.revision(AGENT)
        with pytest.raises(InvalidArgument):  # JSON has no NaN: it reaches the server as null
            _plant(alice, "bad", mtime=math.nan)
        with pytest.raises(InvalidArgument, match="is not a time"):
            _plant(alice, "bad", mtime=1e308)  # breaks materialize() and export later
        with pytest.raises(InvalidArgument):
            _plant(alice, "deep", frontmatter=deep_dict(220))  # would never parse again
        forged = Scope.model_construct(kind="user", agent_id=AGENT, user_id="alice/x")
        op = CommitOp.model_construct(scope=forged, manifest=manifest("f", 1), expect=0)
        with pytest.raises((InvalidArgument, PermissionDenied)):  # an id with "/"
            alice.engine.commit(A.domain, [op])
        ghost = CommitOp(scope=A, manifest=manifest("ghost", 1, deleted=True), expect=0)
        with pytest.raises(NotFound):  # no tombstone of what never existed
            alice.engine.commit(A.domain, [ghost])
        many = [CommitOp(scope=A, manifest=manifest(f"s{i}", 1), expect=0) for i in range(65)]
        with pytest.raises(TooLarge):  # over max_ops (64 on Redis, 63 on etcd): bounded work
            alice.engine.commit(A.domain, many)  # (a Store refuses it before sending)
        with pytest.raises(TooLarge, match="nothing was recorded"):
            alice.engine.add_usage(AGENT, {("alice", "good"): 2**62})
        with pytest.raises(InvalidArgument, match="usage count -1"):
            alice.engine.add_usage(AGENT, {("alice", "good"): 1, ("alice", "x"): -1})
        assert admin.revision(AGENT) == before
        assert sorted(admin.manifests(A)) == ["good"] and admin.manifests(A)["good"].usable
        assert admin.usage.counts(AGENT) == {}
    finally:
        alice.close()
        admin.close()
