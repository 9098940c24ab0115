"""grpc.aio's wake-up socket is read whole each loop turn (skillfs/server/grpc_wakeups.py):
without it, a fan-out's completions reach the loop one per turn once the socket fills, and
new calls wait for the whole fan-out."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillfs.server.grpc_wakeups import drain_wakeups
from support.grpc_servers import running


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _grpc_like_reader(
    loop: asyncio.AbstractEventLoop,
) -> tuple[socket.socket, socket.socket, list[int]]:
    """A socket pair read as grpc.aio's poller queue is: a reader named `_handle_events`,
    taking one byte per call, bound to the loop with functools.partial."""
    read, write = socket.socketpair()
    read.setblocking(False)
    calls: list[int] = []

    def _handle_events(context_loop: object) -> None:
        try:
            calls.append(len(read.recv(1)))
        except BlockingIOError:
            calls.append(0)

    loop.add_reader(read, functools.partial(_handle_events, loop))
    return read, write, calls


def _pending(sock: socket.socket) -> int:
    try:
        return len(sock.recv(65536, socket.MSG_PEEK))
    except BlockingIOError:
        return 0


def test_one_loop_turn_reads_every_pending_wake_up(loop: asyncio.AbstractEventLoop) -> None:
    read, write, calls = _grpc_like_reader(loop)
    write.send(b"\0" * 500)  # 500 completions queued while the loop was busy
    loop.run_until_complete(asyncio.sleep(0))
    assert _pending(read) > 400  # grpc's own reader: one byte a turn
    assert drain_wakeups(loop)
    loop.run_until_complete(asyncio.sleep(0))
    assert _pending(read) == 0
    assert calls and calls[-1] == 0  # grpc's handler still ran, and found its byte taken
    write.send(b"\0")
    loop.run_until_complete(asyncio.sleep(0.01))
    assert _pending(read) == 0 and len(calls) >= 2  # later wake-ups still reach the handler
    read.close()
    write.close()


def test_a_loop_without_grpc_is_left_alone(loop: asyncio.AbstractEventLoop) -> None:
    read, write = socket.socketpair()
    seen: list[bytes] = []
    loop.add_reader(read, lambda: seen.append(read.recv(1)))
    assert not drain_wakeups(loop)
    write.send(b"ab")
    loop.run_until_complete(asyncio.sleep(0))
    assert seen and all(x in (b"a", b"b") for x in seen)  # its own reader, a byte a call
    read.close()
    write.close()


def test_the_server_drains_grpcs_wake_ups(tmp_path: Path) -> None:
    """Fails when a grpc release renames or reshapes its reader: the server then still
    serves, but a large fan-out holds up new calls again (docs/server.md)."""
    with running("memory://wakeups", tmp_path) as server:
        assert server.drains_wakeups

        async def readers() -> list[str]:
            loop = asyncio.get_running_loop()
            keys = loop._selector.get_map().values()  # type: ignore[attr-defined]
            handles = [k.data[0] for k in keys if k.data and k.data[0] is not None]
            return [getattr(h._callback, "__name__", "") for h in handles]

        names = asyncio.run_coroutine_threadsafe(readers(), server._loop).result(5)
        assert "drained" in names  # grpc's wake-up socket is read by the draining reader
