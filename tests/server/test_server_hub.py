"""The serving model of docs/server.md: one store follower per domain per server (the hub),
fanned out to every Watch stream through its grants, bounded queues that turn overflow into a
reset, views that start no thread and stop following when evicted, and threads and store
connections that do not grow with the number of open streams."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
import redis

import skillfs
from skillfs.engines.base import Engine
from skillfs.model import Change, Revision, Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.remote.wire import manifest_from, rev_to_pb
from skillfs.server.app import SkillfsServer
from skillfs.server.backend import Caps
from skillfs.server.hub import Event, Hub, Stream, Wake
from skillfs.store.blobs import SMALL_FILE_BYTES
from skillfs.store.feed import ChangeFeed
from support.grpc_servers import ADMIN, ALICE, BOB, running, single
from tests.helpers import wait_until
from tests.runtime_helpers import memory_store
from tests.stores import url_for

AGENT = "support-bot"
DOMAIN = f"agents/{AGENT}"
A = Scope.user(AGENT, "alice")
B = Scope.user(AGENT, "bob")


def md(name: str, text: str = "v1") -> bytes:
    return f"---\nname: {name}\ndescription: {text}. Use when testing.\n---\n\n{text}\n".encode()


def meta(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


@pytest.fixture(params=["memory", "redis", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, request.param, tmp_path)


class Counting:
    """Counts a server engine's reads of the change log, by domain."""

    def __init__(self, server: SkillfsServer) -> None:
        engine = server.store.engine
        self.calls: dict[str, int] = {}
        original = engine.changes

        def changes(domain: str, since: Revision, timeout: float) -> list[Change]:
            self.calls[domain] = self.calls.get(domain, 0) + 1
            return original(domain, since, timeout)

        engine.changes = changes  # type: ignore[method-assign]


def test_one_follower_per_domain_fans_out_through_grants(url: str, tmp_path: Path) -> None:
    """200 streams on one domain, half alice's, half bob's: a publish in alice's scope reaches
    every stream (bob's as `through` only), with its manifest, and the store's log is read
    about once per publish, not once per stream."""
    with running(url, tmp_path) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        since = store.publish(A, "s", {"SKILL.md": md("s")}).revision
        counting = Counting(server)
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)
            request = pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(since), with_manifests=True)
            streams = [
                (token, stub.Watch(request, metadata=meta(token))) for token in [ALICE, BOB] * 100
            ]
            wait_until(lambda: server.backend.watches.open == 200)
            time.sleep(0.1)  # every stream has read the log up to now by itself
            before = counting.calls.get(DOMAIN, 0)
            c = store.publish(A, "s", {"SKILL.md": md("s", "v2")})
            for token, stream in streams:
                event = next(stream)
                assert event.through == rev_to_pb(c.revision)
                if token == ALICE:
                    assert [(x.skill, x.version) for x in event.changes] == [("s", 2)]
                    assert manifest_from(event.manifests[0].manifest_json).version == 2
                else:  # bob may not read alice's scope: only where the log is now
                    assert not event.changes and not event.manifests
                stream.cancel()
            assert counting.calls.get(DOMAIN, 0) - before <= 3  # one per hub round, not 200
            assert server.backend.hub.domains == [DOMAIN]
        wait_until(lambda: server.backend.hub.domains == [])  # the last stream ended


def test_a_fan_out_wakes_the_streams_of_one_connection_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams opened over three connections in turn are offered a publish's event connection
    by connection (so gRPC writes each connection's messages together, not one write each),
    in an order rebuilt when a stream comes or goes; every stream still gets the event."""
    offered: list[str] = []
    offer = Stream.offer

    def recorded(stream: Stream, event: Event) -> None:
        offered.append(stream.peer)
        offer(stream, event)

    monkeypatch.setattr(Stream, "offer", recorded)
    with running("memory://", tmp_path) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        since = store.publish(A, "s", {"SKILL.md": md("s")}).revision
        local = [("grpc.use_local_subchannel_pool", 1)]  # else the channels share a connection
        channels = [grpc.insecure_channel(address, options=local) for _ in range(3)]
        request = pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(since))
        streams = [
            pb_grpc.SkillReaderStub(channels[i % 3]).Watch(request, metadata=meta(ALICE))
            for i in range(30)
        ]
        wait_until(lambda: server.backend.watches.open == 30)
        for n, last in ((30, False), (29, True)):  # then again, after a stream left
            offered.clear()
            c = store.publish(A, "s", {"SKILL.md": md("s", f"v{n}")})
            for stream in streams:
                assert next(stream).through == rev_to_pb(c.revision)
            assert len(offered) == n, offered
            runs = [p for i, p in enumerate(offered) if i == 0 or offered[i - 1] != p]
            assert len(runs) == 3 and len(set(runs)) == 3, runs  # one run per connection
            assert all(p.startswith("ipv4:127.0.0.1:") for p in runs)
            if not last:
                streams.pop().cancel()
                wait_until(lambda: server.backend.watches.open == 29)
        for stream in streams:
            stream.cancel()
        for ch in channels:
            ch.close()
        store.close()


def test_a_stream_whose_queue_overflows_is_told_to_reload(tmp_path: Path) -> None:
    """The hub never waits for a stream: a full queue is dropped and the stream answers a
    reset at the domain's revision next (C8: told to reload), then follows on from there."""
    stream = Stream(DOMAIN, False, size=2)
    rev = Revision(epoch="e", counter=1)
    for _ in range(3):
        stream.offer(Event(rev, (Change(revision=rev, op="put"),), 0.0, {}))
    assert stream.overflowed and not stream.events

    with running(f"memory://{time.time_ns()}", tmp_path) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        c = store.publish(A, "s", {"SKILL.md": md("s")})
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)
            request = pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(c.revision))
            watch = stub.Watch(request, metadata=meta(ALICE))
            wait_until(lambda: server.backend.watches.open == 1)
            time.sleep(0.1)

            async def overflow() -> None:
                (held,) = server.backend.hub._domains[DOMAIN].streams
                for _ in range(held.size + 1):
                    held.offer(Event(c.revision, (), 0.0, {}))

            server._await(overflow())
            event = next(watch)
            assert [x.op for x in event.changes] == ["reset"]
            assert event.through == rev_to_pb(c.revision)
            c2 = store.publish(A, "s", {"SKILL.md": md("s", "v2")})
            assert next(watch).through == rev_to_pb(c2.revision)  # and follows on
            watch.cancel()


@pytest.mark.serial
def test_a_wake_is_kept_until_cleared_times_out_and_wakes_a_waiting_stream() -> None:
    """`Wake` is the hub's cheap `asyncio.Event` with a timeout: a set before the wait is not
    lost, a wait with nothing set ends with False after its timeout, and a set during the wait
    ends it at once, for one stream or for the streams of a WatchMany sharing one wake."""

    async def scenario() -> None:
        wake = Wake()
        wake.set()
        assert await wake.wait(0)  # set before the wait: kept
        wake.clear()
        started = time.monotonic()
        assert not await wake.wait(0.05)
        assert 0.04 < time.monotonic() - started < 1
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, wake.set)
        started = time.monotonic()
        assert await wake.wait(30)
        assert time.monotonic() - started < 1

        shared = Wake()
        streams = [Stream(f"{DOMAIN}{i}", False, size=4) for i in range(3)]
        for stream in streams:
            stream.wake = shared
        waiting = asyncio.ensure_future(streams[0].next(30))
        await asyncio.sleep(0)
        event = Event(Revision(epoch="e", counter=1), (), 0.0, {})
        streams[2].offer(event)  # another stream of the call: the shared wake ends the wait
        assert await asyncio.wait_for(waiting, 1) is None
        assert streams[2].events[0] is event
        assert await streams[1].next(0.01) is None  # nothing for it: its own timeout

    asyncio.run(scenario())


class Unwrapped:
    """An engine whose first `revisions` and first `load_skills` fail with an error its store
    client did not turn into a `SkillfsError` (say a redis-py `ResponseError` it lets by)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.failing = {"revisions", "load_skills"}

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.engine, name)
        if name not in self.failing:
            return call

        def fails(*args: object) -> object:
            self.failing.discard(name)
            raise RuntimeError(f"{name}: an error the store client did not wrap")

        return fails


def test_an_error_the_store_client_did_not_wrap_does_not_stop_the_hub() -> None:
    """The hub logs it and goes on: its first revisions read is retried, and an event whose
    manifests failed to load is still sent (its clients load them); the next one carries them."""
    store = memory_store()
    store.publish(A, "a", {"SKILL.md": md("a")})

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def run(fn: Callable[..., object], *args: object) -> object:
            return await loop.run_in_executor(None, functools.partial(fn, *args))

        engine = cast(Engine, Unwrapped(store.engine))
        hub = Hub(ChangeFeed(engine), engine, run, wait=1.0)
        hub.start()
        stream = hub.subscribe(DOMAIN, True, "peer")
        try:
            for text in ("v2", "v3"):
                await asyncio.sleep(0.2)
                acked = await run(store.publish, A, "a", {"SKILL.md": md("a", text)})
                event, deadline = None, loop.time() + 5
                while (event is None or not event.changes) and loop.time() < deadline:
                    event = await stream.next(deadline - loop.time())
                assert event is not None and event.through == acked.revision
                assert bool(event.manifests) == (text == "v3")
        finally:
            await hub.close()

    asyncio.run(scenario())


def test_views_start_no_thread_and_eviction_stops_following(url: str, tmp_path: Path) -> None:
    """Snapshots of 30 agents' views through a server whose view cache holds one: no
    follower or usage thread is started, only the newest view's domains are followed, and
    the threads are as many after as before."""
    with running(url, tmp_path, caps=Caps(view_cache_mib=0)) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        for i in range(30):
            store.publish(Scope.shared(f"agent-{i}"), "s", {"SKILL.md": md("s")})
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)
            view = pb.View(agent_id="agent-0", user_id="u", markets=["m"])
            single(stub.Snapshot(pb.SnapshotRequest(view=view), metadata=meta(ADMIN)))
            before = set(threading.enumerate())
            for i in range(30):
                view = pb.View(agent_id=f"agent-{i}", user_id="u", markets=["m"])
                reply = stub.LoadSkillThroughPath(
                    pb.LoadRequest(view=view, skill_id="s"), metadata=meta(ADMIN)
                )
                assert "v1" in reply.text
            started = [t.name for t in set(threading.enumerate()) - before]
            # none but the executor's (it starts its threads lazily, up to max_workers) and
            # the store feed's second wait (a domain added during its long one)
            assert not [n for n in started if not n.startswith(("skillfs-store", "skillfs-feed"))]
            assert len(server.backend.views) == 1
            assert sorted(server.backend.views.followed) == ["agents/agent-29", "markets/m"]
            wait_until(lambda: sorted(server.store.changes.feed.domains) == sorted(
                server.backend.views.followed))  # fmt: skip
            # the usage counted by the evicted views was written when they were evicted
            assert store.usage.counts("agent-3") == {("u", "s"): 1}


@pytest.fixture
def redis_only(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, "redis", tmp_path)


def _clients(url: str) -> int:
    client = redis.Redis.from_url(url.split("?")[0])
    try:
        return len(client.client_list())
    finally:
        client.close()


@pytest.mark.slow
def test_threads_and_store_connections_do_not_grow_with_streams(
    redis_only: str, tmp_path: Path
) -> None:
    """1,000 open Watch streams cost the server no thread and no store connection each:
    besides the executor (at most max_workers threads, one store connection each) the
    process's threads are the same with 10 and with 1,000 streams, and so are the Redis
    server's clients; one publish reaches all of them."""
    with running(redis_only, tmp_path, max_workers=8) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        since = store.publish(A, "s", {"SKILL.md": md("s")}).revision
        request = pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(since))
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)
            streams = [stub.Watch(request, metadata=meta(ALICE)) for _ in range(10)]
            wait_until(lambda: server.backend.watches.open == 10)
            time.sleep(0.3)
            pool = server.backend.executor
            threads = set(threading.enumerate())
            clients = _clients(redis_only)
            streams += [stub.Watch(request, metadata=meta(ALICE)) for _ in range(990)]
            wait_until(lambda: server.backend.watches.open == 1000, timeout=60)
            time.sleep(0.3)
            # the executor starts its threads lazily, up to max_workers, whatever the load
            # (a thread of an earlier test's server may end meanwhile: count new ones only)
            assert not set(threading.enumerate()) - threads - set(pool._threads)
            assert len(pool._threads) <= 8
            assert _clients(redis_only) <= clients + 8  # as many as executor threads at most
            c = store.publish(A, "s", {"SKILL.md": md("s", "v2")})
            for stream in streams:
                assert next(stream).through == rev_to_pb(c.revision)
            for stream in streams:
                stream.cancel()


class AllCalls:
    """Counts the server's calls of its engine that follow or read domains, as they start
    (not the health check's `ping`, which answers readiness probes whatever the hub does)."""

    METHODS = ("revisions", "changes", "changes_many", "load_scope", "load_skills")

    def __init__(self, server: SkillfsServer) -> None:
        engine = server.store.engine
        self.calls: list[str] = []
        for name in self.METHODS:
            original = getattr(engine, name)

            def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
                self.calls.append(_name)
                return _original(*args)

            setattr(engine, name, counted)


def test_the_hub_makes_no_store_call_while_nothing_changes(url: str, tmp_path: Path) -> None:
    """The hub waits on every followed domain with one blocking call (`changes_many`), woken
    by a change: a second of quiet costs the server no store call at all (the hub polled the
    revisions every 20 ms before: about 50 calls a second); a domain added during that wait
    is followed at once, and a publish in either domain reaches its stream."""
    other = "agents/other-bot"
    with running(url, tmp_path) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        since = store.publish(A, "s", {"SKILL.md": md("s")}).revision
        counting = AllCalls(server)
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)
            first = stub.Watch(
                pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(since)), metadata=meta(ADMIN)
            )
            wait_until(lambda: server.backend.hub.domains == [DOMAIN])
            time.sleep(0.3)  # the stream caught up, the hub waits
            before = len(counting.calls)
            time.sleep(1.0)
            idle = counting.calls[before:]
            assert idle == [], idle
            # a domain added while the hub waits: followed within the short wait
            second = stub.Watch(pb.WatchRequest(domain=other), metadata=meta(ADMIN))
            wait_until(lambda: sorted(server.backend.hub.domains) == sorted([DOMAIN, other]))
            time.sleep(0.2)
            t0 = time.monotonic()
            c = store.publish(Scope.shared("other-bot"), "t", {"SKILL.md": md("t")})
            assert next(second).through == rev_to_pb(c.revision)
            assert time.monotonic() - t0 < 2.0
            c = store.publish(A, "s", {"SKILL.md": md("s", "v2")})
            assert next(first).through == rev_to_pb(c.revision)
            first.cancel()
            second.cancel()


def test_a_publish_s_files_are_read_once_for_the_fleet_that_prefetches_them(
    url: str, tmp_path: Path
) -> None:
    """The hub, loading a publish's manifest for its events, reads the manifest's small files
    into the server's blob cache once: the ReadFile calls of the workers that prefetch them
    then read nothing from the store."""
    with running(url, tmp_path) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        since = store.publish(A, "s", {"SKILL.md": md("s")}).revision
        engine = server.store.engine
        reads: list[int] = []
        original = engine.get_chunks

        def get_chunks(keys: Any) -> Any:
            reads.append(len(keys))
            return original(keys)

        engine.get_chunks = get_chunks  # type: ignore[method-assign]
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)
            request = pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(since), with_manifests=True)
            watch = stub.Watch(request, metadata=meta(ALICE))
            wait_until(lambda: server.backend.watches.open == 1)
            body = b"notes " * 100
            store.publish(A, "s", {"SKILL.md": md("s", "v2"), "notes.md": body})
            event = next(e for e in watch if e.manifests)
            m = manifest_from(event.manifests[0].manifest_json)
            warmed = len(reads)
            assert warmed >= 1  # the hub's one read of the new files
            entry = m.files["notes.md"]
            source = pb.Source(scope=str(A), skill="s", version=m.version)
            ranges = [pb.BlobRange(sha256=entry.sha256, source=source)]
            for _ in range(20):  # twenty workers prefetching
                got = b"".join(
                    c.data
                    for c in stub.ReadFile(pb.ReadFileRequest(ranges=ranges), metadata=meta(ALICE))
                )
                assert got == body
            assert len(reads) == warmed  # none of them read the store
            watch.cancel()
        store.close()


def test_events_carry_the_small_files_of_the_manifests_the_token_may_read(
    url: str, tmp_path: Path
) -> None:
    """Asked `with_files`, an event carries the bytes of the small files of the manifests it
    shows (from the server's blob cache, which the hub warmed): alice's stream gets her
    publish's files, checked against their digests; a file over SMALL_FILE_BYTES is left out (read
    with ReadFile); bob, who may not read alice's scope, gets neither manifest nor file; a
    stream that did not ask gets the manifest alone."""
    with running(url, tmp_path) as server:
        address = f"127.0.0.1:{server.grpc_port}"
        store = skillfs.open_store(f"grpc://{address}", token=ADMIN)
        since = store.publish(A, "s", {"SKILL.md": md("s")}).revision
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.SkillReaderStub(ch)

            def watch(token: str, files: bool) -> Any:
                request = pb.WatchRequest(
                    domain=DOMAIN, since=rev_to_pb(since), with_manifests=True, with_files=files
                )
                return stub.Watch(request, metadata=meta(token))

            streams = [watch(ALICE, True), watch(BOB, True), watch(ALICE, False)]
            wait_until(lambda: server.backend.watches.open == 3)
            notes, big = b"notes " * 100, b"b" * (SMALL_FILE_BYTES + 1)
            c = store.publish(A, "s", {"SKILL.md": md("s", "v2"), "notes.md": notes, "big": big})
            alice, bob, plain = (next(s) for s in streams)
            m = manifest_from(alice.manifests[0].manifest_json)
            assert m.version == 2
            carried = {f.sha256: f.data for f in alice.files}
            assert carried == {
                m.files["SKILL.md"].sha256: md("s", "v2"),
                m.files["notes.md"].sha256: notes,
            }
            assert bob.through == rev_to_pb(c.revision)
            assert not bob.manifests and not bob.files
            assert len(plain.manifests) == 1 and not plain.files
            for s in streams:
                s.cancel()
        store.close()


def test_a_carried_file_that_does_not_match_its_digest_is_not_used() -> None:
    """The grpc:// engine keeps a watch event's file only when its bytes hash to the digest
    that names it; otherwise the file is read (with ReadFile) when it is needed."""
    from skillfs.remote.engine import GrpcEngine

    engine = GrpcEngine("grpc://127.0.0.1:1")
    try:
        good, bad = b"good bytes", b"tampered"
        good_sha = hashlib.sha256(good).hexdigest()
        claimed = hashlib.sha256(b"original").hexdigest()
        carried = [pb.BlobBytes(sha256=good_sha, data=good), pb.BlobBytes(sha256=claimed, data=bad)]
        engine._event(pb.WatchEvent(files=carried))
        assert engine.known_blob(good_sha) == good
        assert engine.known_blob(claimed) is None
    finally:
        engine.close()


@pytest.mark.parametrize("wait", [0.1, 5.0], ids=["catch-up read", "held stream"])
def test_a_stream_that_reads_the_log_itself_gets_the_files_too(
    url: str, tmp_path: Path, wait: float
) -> None:
    """A stream behind the hub (its `since` before a publish the hub never saw: written
    straight to the store) and a short catch-up `Watch` read the log and the manifests
    themselves; asked `with_files`, they read the small files into the server's blob cache as
    the hub does, so their event carries them as well (each on a server of its own, whose
    cache nothing else warmed)."""
    with running(url, tmp_path) as server:
        writer = skillfs.open_store(url)  # past the server: nothing of it is in its caches
        since = writer.publish(A, "s", {"SKILL.md": md("s")}).revision
        notes = b"notes " * 100
        writer.publish(A, "s", {"SKILL.md": md("s", "v2"), "notes.md": notes})
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            request = pb.WatchRequest(
                domain=DOMAIN,
                since=rev_to_pb(since),
                max_wait_seconds=wait,
                with_manifests=True,
                with_files=True,
            )
            stream = pb_grpc.SkillReaderStub(ch).Watch(request, metadata=meta(ALICE))
            event = next(stream)
            stream.cancel()
            m = manifest_from(event.manifests[0].manifest_json)
            carried = {f.sha256: f.data for f in event.files}
            assert carried[m.files["notes.md"].sha256] == notes
        writer.close()
