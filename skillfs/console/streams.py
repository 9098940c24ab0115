"""The console's two bounded thread pools: one for pages, one for live-update streams.

Pages call the store, which blocks, so they run in a pool sized below the store's connection
pool: a burst of requests queues for a thread instead of opening connections the store does
not have. A live-update stream waits on the store's change log for seconds at a time, so
streams wait in a pool of their own, capped, and never take the threads pages need
(docs/console.md, "The HTTP stack").
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


class Pool:
    """A fixed number of threads that blocking calls of async handlers run in."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` in the pool; the event loop goes on serving meanwhile."""
        return await asyncio.wrap_future(self._executor.submit(fn, *args))

    async def probe(self, timeout: float) -> bool:
        """Whether a call gets a thread within `timeout` seconds (readiness: a pool whose
        threads are all pinned cannot serve, whatever the store says)."""
        try:
            await asyncio.wait_for(self.run(lambda: None), timeout)
        except (TimeoutError, RuntimeError):  # RuntimeError: the pool was shut down
            return False
        return True

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class LiveStreams:
    """Open live-update streams: at most `limit` at once, each waiting in this pool."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pool = Pool(limit, "skillfs-live")
        #: Set by `close()`: every stream ends.
        self.stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(limit)
        self._open: set[threading.Event] = set()
        self._lock = threading.Lock()

    @contextmanager
    def slot(self) -> Iterator[threading.Event | None]:
        """A stream's place: its stop event (set when it ends or the console closes), or
        None when `limit` streams are open already."""
        if self.stopping.is_set() or not self._slots.acquire(blocking=False):
            yield None
            return
        stop = threading.Event()
        with self._lock:
            self._open.add(stop)
        try:
            yield stop
        finally:
            stop.set()  # the store wait in the pool ends within its poll
            with self._lock:
                self._open.discard(stop)
            self._slots.release()

    def close(self) -> None:
        self.stopping.set()
        with self._lock:
            for stop in self._open:
                stop.set()
        self.pool.close()
