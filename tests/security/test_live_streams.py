"""Console live-update streams against the store's connection pool (issue 10: "Console
live-update streams each hold a pooled Redis connection, ~100 exhaust the pool for every gRPC
client"). A real `skillfs serve` on Redis with a small pool (`--max-workers 4`: 52
connections) carries 120 open `/events` streams: the server's Redis connections grow by a
bounded number, gRPC reads are answered meanwhile, and every stream still gets the change.
Bounded in count (120 sockets) and time; traffic stays on 127.0.0.1."""

from __future__ import annotations

import asyncio
import select
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs.console.streams import OVERFLOW, LiveStreams
from skillfs.model import Scope
from support.grpc_servers import ADMIN, ServerProcess
from support.servers import RedisServer
from tests.security.http_clients import signed_in

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
STREAMS = 120
#: Connections the console may add for any number of streams: the one shared follower, the
#: few threads that read a revision when a stream opens, and slack for the health check.
BOUNDED = 12


def md(name: str) -> bytes:
    return f"---\nname: {name}\ndescription: Does {name}. Use when testing.\n---\n".encode()


@pytest.fixture
def small_pool(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    name = f"sec-live-{uuid.uuid4().hex[:8]}"
    url = f"{redis_server.url}?prefix=t{uuid.uuid4().hex[:12]}/&client_name={name}"
    store = skillfs.open_store(url)
    store.publish(SHARED, "code-reviewer", {"SKILL.md": md("code-reviewer")})
    store.close()
    with ServerProcess(url, tmp_path / "srv", args=("--max-workers", "4")) as srv:
        yield srv, name


def connections(redis_server: RedisServer, name: str) -> int:
    with redis_server.client() as admin:
        return sum(1 for c in admin.client_list() if c.get("name") == name)


def open_stream(port: int, cookie: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        f"GET /events?domain=agents/{AGENT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Cookie: skillfs_session={cookie}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    return sock


def read_until(socks: list[socket.socket], text: bytes, timeout: float) -> list[bytes]:
    """What each socket sent until `text` (or `timeout` passed for all of them)."""
    got = {s: b"" for s in socks}
    waiting = set(socks)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        readable, _, _ = select.select(list(waiting), [], [], 0.2)
        for s in readable:
            chunk = s.recv(65536)
            got[s] += chunk
            if text in got[s] or not chunk:
                waiting.discard(s)
    return [got[s] for s in socks]


def test_many_live_streams_hold_no_store_connection_each(
    small_pool: tuple[ServerProcess, str], redis_server: RedisServer
) -> None:
    srv, name = small_pool
    base = f"http://127.0.0.1:{srv.http_port}"
    operator = signed_in(base, ADMIN)
    cookie = operator.cookies["skillfs_session"]
    operator.get("/")  # the console's page threads have met the store
    before = connections(redis_server, name)
    socks: list[socket.socket] = []
    reader = skillfs.open_store(f"grpc://{srv.address}", token=ADMIN, retry_for=2.0)
    try:
        for _ in range(STREAMS):
            socks.append(open_stream(srv.http_port, cookie))
        opened = read_until(socks, b"event: revision", timeout=30)
        refused = [o for o in opened if b"event: revision" not in o]
        assert not refused, refused[:3]
        time.sleep(1.5)  # every stream now waits for the next change
        during = connections(redis_server, name)
        print(f"Redis connections of the server: {before} before, {during} with {STREAMS} streams")
        assert during <= before + BOUNDED, (before, during)

        started = time.monotonic()
        for _ in range(20):  # gRPC clients are served meanwhile, from the same pool
            assert reader.skills(SHARED) == ["code-reviewer"]
        assert time.monotonic() - started < 5

        skill = f"live-{uuid.uuid4().hex[:6]}"
        reader.publish(SHARED, skill, {"SKILL.md": md(skill)})
        seen = read_until(socks, skill.encode(), timeout=20)
        missed = [s for s in seen if skill.encode() not in s]
        assert not missed, f"{len(missed)} of {STREAMS} streams missed the change"
    finally:
        for s in socks:
            s.close()
        reader.close()
        operator.close()


def test_streams_share_one_follower_and_a_slow_one_is_told_to_reload() -> None:
    """In process, on a memory store: two streams of a domain are one followed domain, which
    is dropped with the last stream; a stream that falls `QUEUE` changes behind is handed
    OVERFLOW (read the revision again), not an ever-growing queue."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "first", {"SKILL.md": md("first")})  # else the first commit resets
    live = LiveStreams(store, limit=4)

    async def run() -> None:
        with live.slot(f"agents/{AGENT}") as a, live.slot(f"agents/{AGENT}") as b:
            assert a is not None and b is not None
            await live.pool.run(live.feed.subscribe, a)
            await live.pool.run(live.feed.subscribe, b)
            assert live.feed.domains == [f"agents/{AGENT}"]
            # nobody reads b meanwhile; one change past the overflow, because the loop runs
            # the streams' deliveries in order: once a has change QUEUE + 2, b has had QUEUE + 1
            for i in range(LiveStreams.QUEUE + 2):
                await live.pool.run(store.publish, SHARED, f"s{i}", {"SKILL.md": md(f"s{i}")})
                first = await a.next(5)
                assert first is not None and not isinstance(first, str)
                assert first.skill == f"s{i}"
            deadline = time.monotonic() + 5
            while (got := await b.next(0.5)) != OVERFLOW and time.monotonic() < deadline:
                pass
            assert got == OVERFLOW
        assert live.feed.domains == []

    try:
        asyncio.run(run())
    finally:
        live.close()
        store.close()
