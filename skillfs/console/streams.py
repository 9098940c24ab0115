"""The console's bounded thread pools and its one follower of the store for live updates.

Pages call the store, which blocks, so they run in a pool sized below the store's connection
pool: a burst of requests queues for a thread instead of opening connections the store does
not have. Live-update streams hold neither a thread nor a store connection while they wait:
each subscribes to the store's one change feed (`store.changes.feed`, which the server's hub
and MCP sessions share: one store connection waiting for all of them), which hands the
stream its domain's changes through a bounded queue on the event loop. A stream takes a
thread of a small pool of its own only to read a revision (docs/console.md, "The HTTP stack").
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Literal, TypeVar

from skillfs.api import Store
from skillfs.engines.base import EMPTY
from skillfs.model import Change, Revision
from skillfs.store.feed import Subscription as FeedSubscription
from skillfs.store.name_register import is_register

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


#: What a stream is handed instead of changes it fell too far behind to be given.
Overflow = Literal["overflow"]
OVERFLOW: Overflow = "overflow"


class Subscription:
    """One stream's queue of its domain's changes, on the stream's event loop. At most `limit`
    wait: a stream that falls further behind is handed `OVERFLOW` instead and reads its
    revision again (C8's reset); the follower never waits for a stream."""

    def __init__(self, domain: str, limit: int) -> None:
        self.domain = domain
        self.limit = limit
        self.stopped = False
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        self._pending: deque[Change | Overflow] = deque()

    def offer(self, changes: list[Change]) -> None:
        """Queue `changes` (from the follower's thread)."""
        with suppress(RuntimeError):  # the event loop is closed: no one reads this stream
            self._loop.call_soon_threadsafe(self._take, changes)

    def stop(self) -> None:
        """End the stream's wait (from any thread)."""
        self.stopped = True
        with suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._ready.set)

    def _take(self, changes: list[Change]) -> None:
        if self._pending and self._pending[0] == OVERFLOW:
            return  # the stream reads its revision again, which covers these
        if len(self._pending) + len(changes) > self.limit:
            self._pending.clear()
            self._pending.append(OVERFLOW)
        else:
            self._pending.extend(changes)
        self._ready.set()

    async def next(self, timeout: float) -> Change | Overflow | None:
        """The next change, `OVERFLOW`, or None after `timeout` seconds (or once stopped)."""
        if not self._pending and not self.stopped:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return None
        if self.stopped or not self._pending:
            return None
        return self._pending.popleft()


class Feed:
    """The console's streams on the store's change feed: each stream's subscription hands
    it every change of its domain after the revision it opened at."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._subs: dict[Subscription, FeedSubscription] = {}
        self._lock = threading.Lock()  # guards _subs; never held over a store call

    def subscribe(self, sub: Subscription) -> Revision | None:
        """Hand `sub` every change of its domain after its revision, read here and returned
        (blocks: call it in a pool), but the name register's (`store.name_register`: it moves
        with the commits that create skills, which are handed). A change at or before it may
        still come: the stream skips it."""
        rev = self.store.domain_revisions([sub.domain])[sub.domain]

        def deliver(_before: Revision, changes: list[Change], _t0: float, _t1: float) -> None:
            shown = [c for c in changes if not is_register(c.skill or "")]  # the store's own
            if shown:
                sub.offer(shown)

        held = self.store.changes.feed.subscribe(sub.domain, deliver, since=rev or EMPTY)
        with self._lock:
            if sub.stopped:  # the stream ended while its revision was read
                held.close()
            else:
                self._subs[sub] = held
        return rev

    def unsubscribe(self, sub: Subscription) -> None:
        """Never blocks on the store (the event loop calls it)."""
        with self._lock:
            held = self._subs.pop(sub, None)
        if held is not None:
            held.close()

    @property
    def domains(self) -> list[str]:
        """The domains followed now."""
        with self._lock:
            return sorted({s.domain for s in self._subs})

    def close(self) -> None:
        with self._lock:
            held, self._subs = list(self._subs.values()), {}
        for each in held:
            each.close()


class LiveStreams:
    """Open live-update streams: at most `limit` at once, all fed by one `Feed`; `pool` reads
    a stream's revision when it opens and after a reset."""

    #: Changes a stream may have waiting before it reads its revision again instead.
    QUEUE = 64
    #: Threads that read revisions for streams (each one store call at a time).
    THREADS = 4

    def __init__(self, store: Store, limit: int) -> None:
        self.limit = limit
        self.pool = Pool(self.THREADS, "skillfs-live")
        self.feed = Feed(store)
        #: Set by `close()`: every stream ends.
        self.stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(limit)
        self._open: set[Subscription] = set()
        self._lock = threading.Lock()

    @contextmanager
    def slot(self, domain: str) -> Iterator[Subscription | None]:
        """A stream's place (call it on the stream's event loop): its subscription, not yet
        subscribed (`feed.subscribe` it in the pool), stopped when the block ends or the
        console closes; None when `limit` streams are open already."""
        if self.stopping.is_set() or not self._slots.acquire(blocking=False):
            yield None
            return
        sub = Subscription(domain, self.QUEUE)
        with self._lock:
            self._open.add(sub)
        try:
            yield sub
        finally:
            sub.stop()
            self.feed.unsubscribe(sub)
            with self._lock:
                self._open.discard(sub)
            self._slots.release()

    def close(self) -> None:
        self.stopping.set()
        with self._lock:
            for sub in self._open:
                sub.stop()
        self.feed.close()
        self.pool.close()
