"""grpc.aio tells the event loop of each completed operation by writing one byte to a socket
pair; its reader on the loop takes one byte per call and then handles every queued completion.
When a fan-out sends thousands of messages at once, the bytes outrun the reads, the socket's
buffer fills after a few hundred, and grpc's poller thread blocks in `write`: from then on
completions reach the loop one per loop turn, new calls included. Measured on a publish to
10,000 Watch streams: a step call arriving meanwhile waited ~520 ms, for the whole fan-out (a
py-spy profile: the poller thread in `write` 73 % of the time). Reading every pending byte
before grpc's handler runs keeps the poller from blocking; the same call then took 45-110 ms
(docs/server.md, "The serving model").

Safe because the poller queues each completion before it writes that completion's byte, and
the handler drains the whole queue: a byte read here stands for a completion the handler is
about to take."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import selectors
import socket

#: Bytes read from the wake-up socket per read (its buffer holds a few hundred wake-ups).
READ = 65536


def drain_wakeups(loop: asyncio.AbstractEventLoop) -> bool:
    """Make grpc.aio's wake-up reader on `loop` read every pending byte first. False when the
    loop has no such reader (a grpc without it): its own reader stays, slower but correct."""
    selector: selectors.BaseSelector | None = getattr(loop, "_selector", None)
    if selector is None:
        return False
    for key in list(selector.get_map().values()):
        reader = key.data[0] if key.data else None
        handle = getattr(reader, "_callback", None)
        if (
            not isinstance(key.fileobj, socket.socket)
            or not isinstance(handle, functools.partial)
            or getattr(handle.func, "__name__", "") != "_handle_events"
        ):
            continue
        wake = key.fileobj

        def drained(wake: socket.socket = wake, handle: functools.partial[None] = handle) -> None:
            # A short read emptied the socket: stop there rather than pay another recv and its
            # BlockingIOError (bytes written meanwhile wake the loop again).
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while len(wake.recv(READ)) == READ:
                    pass
            handle()

        loop.remove_reader(wake)
        loop.add_reader(wake, drained)
        return True
    return False
