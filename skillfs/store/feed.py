"""The change feed: one follower of a store object's change log in this process, whatever
follows it — the server's hub, the console's live pages, MCP sessions, the runtime's
followers (docs/design.md §6.1, "One feed").

Every followed domain is waited on with one blocking call over all of them
(`Engine.changes_many`: on Redis one XREAD, on etcd one watch stream, on grpc:// one
WatchMany), so however many subscribers there are the process holds one store connection
waiting and makes no store call while nothing changes. A domain added during a long wait gets
a second, short wait over every domain (never more than two are out), so it is followed
within about `SHORT_WAIT` seconds on engines that cannot cut a wait short. The waits run in
the feed's two waiting threads; a third, the dispatcher, reads where new domains are and
hands what each wait found to the domain's subscribers, in order, on its thread. An asyncio
program subscribes through `on_loop`, which hands each batch to its event loop instead.

What a subscriber is told: `deliver(before, changes, started, returned)`, the changes after
`before` in order, found by a wait that began at `started` and returned at `returned`
(`time.monotonic()`). No changes means nothing new after `before` as of `started` (a
confirmation a cache may count as current). A subscription made with `since` gets every
change after it (the feed reads the log between `since` and where it is, once); one made
without gets a first, empty batch at the position it starts from. A batch may repeat
changes at or before what a subscriber already holds: it skips those.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import queue as queues
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from skillfs.engines.base import EMPTY, Engine
from skillfs.model import Change, Revision
from skillfs.model.names import check_domain
from skillfs.remote.hints import hints_of
from skillfs.util.outage import Outage

log = logging.getLogger(__name__)

#: The longest wait while nothing changes, unless a subscriber asks for a shorter one (a
#: follower that must confirm its cache every second).
WAIT = 30.0
#: A wait begun while another is out (a domain was added) ends after this long.
SHORT_WAIT = 0.5
#: A domain added during a wait this short or shorter waits for the next one instead of a
#: second wait (each wait holds a store connection).
NO_SHORT_WAIT_UNDER = 2.0
#: Waits out at once, at most: a long one and a short one.
MAX_WAITS = 2
#: The longest `close` waits for the feed's threads to end.
CLOSE_WAIT = 5.0

#: `(before, changes, started, returned)`: see the module's docstring.
Deliver = Callable[[Revision, list[Change], float, float], None]


class Subscription:
    """One subscriber's place on a domain; `close()` ends it (thread-safe)."""

    def __init__(
        self, feed: ChangeFeed, domain: str, deliver: Deliver, since: Revision | None,
        wait: float | None,
    ) -> None:  # fmt: skip
        self.domain = domain
        self.deliver = deliver
        self.since = since
        self._wait = wait
        self._feed = feed
        self.started = False

    @property
    def wait(self) -> float | None:
        """The longest wait this subscriber accepts between two batches (None: any)."""
        return self._wait

    @wait.setter
    def wait(self, seconds: float | None) -> None:
        self._wait = seconds
        self._feed._replan()

    def close(self) -> None:
        self._feed._unsubscribe(self)


@dataclass
class _Domain:
    position: Revision | None = None  # what every started subscriber was handed up to
    subs: list[Subscription] = field(default_factory=list)


#: What a wait found, when it began and returned, or its error.
_Result = tuple[int, dict[str, list[Change]] | BaseException, float, float]


class ChangeFeed:
    """See the module's docstring. Made by `store.changes.feed`, one per store object and
    process (a forked child makes its own), closed with the store."""

    def __init__(self, engine: Engine, *, short_wait: float = SHORT_WAIT) -> None:
        self._engine = engine
        self.short_wait = short_wait
        self._cond = threading.Condition()
        self._domains: dict[str, _Domain] = {}
        self._fresh: list[Subscription] = []
        #: The waits out, by id, each with the revisions it waits from.
        self._waits: dict[int, dict[str, Revision]] = {}
        #: The wait out that started from every domain's position as it is now, if any.
        self._current: int | None = None
        self._short: set[int] = set()  # the short waits out
        self._ends: dict[int, float] = {}  # wait → when it times out (`time.monotonic()`)
        self._waiting: dict[int, int] = {}  # wait → the thread it runs in, once started
        #: Waits cut short (`Hints.interrupt_wait`): their silence confirms nothing.
        self._cut: set[int] = set()
        self._results: list[_Result] = []
        self._ids = itertools.count()
        self._jobs: queues.SimpleQueue[Callable[[], None] | None] = queues.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._pid = os.getpid()
        #: Store calls the feed made (waits and position reads), for tests and /metrics.
        self.calls = 0

    @property
    def domains(self) -> list[str]:
        with self._cond:
            return sorted(self._domains)

    def position(self, domain: str) -> Revision | None:
        """How far the feed has handed `domain`'s changes out (None: not followed yet)."""
        with self._cond:
            d = self._domains.get(domain)
            return None if d is None else d.position

    def subscribe(
        self,
        domain: str,
        deliver: Deliver,
        *,
        since: Revision | None = None,
        wait: float | None = None,
    ) -> Subscription:
        """Hand `deliver` every batch of `domain`'s changes from `since` (None: from where
        the feed is, with a first empty batch there). `wait`: the longest this subscriber
        accepts between two batches, changes or not. Never blocks on the store."""
        sub = Subscription(self, check_domain(domain), deliver, since, wait)
        with self._cond:
            if self._closed:
                return sub  # a closed store's feed hands nothing out
            self._domains.setdefault(domain, _Domain()).subs.append(sub)
            self._fresh.append(sub)
            self._start_threads()
            self._cond.notify_all()
        return sub

    def on_loop(
        self,
        domain: str,
        loop: asyncio.AbstractEventLoop,
        deliver: Deliver,
        *,
        since: Revision | None = None,
        wait: float | None = None,
    ) -> Subscription:
        """`subscribe` for an asyncio program: `deliver` runs on `loop` (it must not block),
        batches in order; nothing is delivered once the loop is closed."""

        def post(before: Revision, changes: list[Change], started: float, ret: float) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
                loop.call_soon_threadsafe(deliver, before, changes, started, ret)

        return self.subscribe(domain, post, since=since, wait=wait)

    def close(self) -> None:
        """Stop following and let the threads end (at most `CLOSE_WAIT`) before the engine
        is closed: a Redis wait still in flight then reconnected and kept its connection.
        The waits out are ended (`_end_waits`) until their threads are gone, as a wait may
        begin just after one such call."""
        with self._cond:
            self._closed = True
            self._domains.clear()
            self._fresh.clear()
            self._cond.notify_all()
            threads, self._threads = self._threads, []
        for _ in range(MAX_WAITS):
            self._jobs.put(None)
        end = time.monotonic() + CLOSE_WAIT
        for thread in threads:
            while thread.is_alive() and thread is not threading.current_thread():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._end_waits()
                thread.join(min(left, 0.05))

    def _end_waits(self) -> None:
        with self._cond:
            waiting = [self._waiting[w] for w in self._waits if w in self._waiting]
        for thread_id in waiting:  # a skillfs server's wait would run its 25 s out
            hints_of(self._engine).interrupt_wait(thread_id)
        self._engine.wake_waits()

    # ------------------------------------------------------------------ internals

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._cond:
            d = self._domains.get(sub.domain)
            if d is not None and sub in d.subs:
                d.subs.remove(sub)
                if not d.subs:
                    del self._domains[sub.domain]
            if sub in self._fresh:
                self._fresh.remove(sub)
            self._cond.notify_all()

    def _replan(self) -> None:
        """A subscriber asks for shorter waits: the next wait is planned anew."""
        with self._cond:
            self._current = None
            self._cond.notify_all()

    def _start_threads(self) -> None:
        """The dispatcher, for good once started (under the lock)."""
        if not self._threads:
            self._spawn(self._run, f"skillfs-feed {self._engine.url}")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _wants_wait(self) -> bool:
        """Whether a wait should start now: none covers every followed domain, there is
        room for one, and the wait out (if any) does not end soon anyway, in which case the
        next one covers every domain (under the lock)."""
        if self._current is not None or len(self._waits) >= MAX_WAITS:
            return False
        if not any(d.position is not None for d in self._domains.values()):
            return False
        soon = time.monotonic() + NO_SHORT_WAIT_UNDER
        return not any(end <= soon for end in self._ends.values())

    def _long_wait(self) -> float:
        asked = [s.wait for d in self._domains.values() for s in d.subs if s.wait is not None]
        return min([WAIT, *asked])

    def _run(self) -> None:
        outage = Outage(log, f"change feed of {self._engine.url}", first=0.02)
        while True:
            with self._cond:
                while not (self._closed or self._fresh or self._results or self._wants_wait()):
                    self._cond.wait()
                if self._closed:
                    return
                fresh, self._fresh = self._fresh, []
                results, self._results = self._results, []
            pause = 0.0
            if fresh:
                try:
                    self._start(fresh)
                except Exception as exc:  # the store is down: try these again after a pause
                    with self._cond:
                        self._fresh[:0] = [s for s in fresh if not s.started]
                    pause = outage.failed(exc)
            for result in results:
                error = self._ended(result)
                if error is not None:
                    pause = outage.failed(error)
                elif not pause:
                    outage.recovered()
            if pause:
                time.sleep(pause)
            self._launch()

    def _start(self, fresh: list[Subscription]) -> None:
        """Place new subscribers: read where new domains are (one store call), read the log a
        subscriber is behind (one call each), hand each its first batch."""
        with self._cond:
            fresh = [s for s in fresh if s in self._domains.get(s.domain, _Domain()).subs]
            for sub in fresh:
                d = self._domains[sub.domain]
                if d.position is None and sub.since is not None:
                    d.position = sub.since
                    self._current = None  # the wait out does not cover it
            new = sorted({s.domain for s in fresh if self._domains[s.domain].position is None})
        started = time.monotonic()
        read = self._engine.revisions(new) if new else {}
        self.calls += bool(new)
        returned = time.monotonic()
        for sub in fresh:
            with self._cond:
                held = self._domains.get(sub.domain)
                if held is None or sub not in held.subs:
                    continue
                if held.position is None:
                    held.position = read[sub.domain] or EMPTY
                    self._current = None
                at = held.position
            since = sub.since
            if since is None or since.epoch != at.epoch or since.counter >= at.counter:
                batch: tuple[Revision, list[Change]] = (at, [])
            else:  # the domain is followed further already: this subscriber reads the gap
                started = time.monotonic()
                batch = (since, self._gap(sub.domain, since, at))
                returned = time.monotonic()
            sub.started = True
            if since is None or batch[1]:
                _hand(sub, batch[0], batch[1], started, returned)

    def _gap(self, domain: str, since: Revision, at: Revision) -> list[Change]:
        """The log of `domain` after `since` up to `at` (or up to a reset), page by page."""
        gap: list[Change] = []
        last = since
        while last.counter < at.counter:
            page = self._engine.changes(domain, last, 0)
            self.calls += 1
            kept = [c for c in page if c.op == "reset" or c.revision.counter <= at.counter]
            gap += kept
            if not page or len(kept) < len(page) or page[-1].op == "reset":
                break
            last = page[-1].revision
        return gap

    def _launch(self) -> None:
        """Start a wait over every domain from where it is, unless one is out already (a
        short one when another is out: a domain was added during it)."""
        with self._cond:
            if self._closed or not self._wants_wait():
                return
            since = {n: d.position for n, d in self._domains.items() if d.position is not None}
            timeout = self.short_wait if self._waits else self._long_wait()
            wait_id = next(self._ids)
            self._waits[wait_id] = since
            self._ends[wait_id] = time.monotonic() + timeout
            self._current = wait_id
            if self._waits.keys() - {wait_id}:
                self._short.add(wait_id)
            if len(self._threads) <= len(self._waits):  # a waiting thread for each wait out
                self._spawn(lambda: _serve(self._jobs), f"skillfs-feed-wait {self._engine.url}")
        self.calls += 1

        def work() -> None:
            with self._cond:
                self._waiting[wait_id] = threading.get_ident()
            started = time.monotonic()
            try:
                found: dict[str, list[Change]] | BaseException
                found = self._engine.changes_many(since, timeout)
            except BaseException as exc:  # handed to the dispatcher
                found = exc
            with self._cond:
                self._results.append((wait_id, found, started, time.monotonic()))
                self._cond.notify_all()

        self._jobs.put(work)

    def _ended(self, result: _Result) -> BaseException | None:
        """Hand out what a wait found; its error when it failed."""
        wait_id, found, started, returned = result
        with self._cond:
            since = self._waits.pop(wait_id, {})
            self._ends.pop(wait_id, None)
            self._waiting.pop(wait_id, None)
            cut = wait_id in self._cut
            self._cut.discard(wait_id)
            if self._current == wait_id:
                self._current = None
            older: list[int] = []
            if wait_id in self._short:
                # the long wait still out started before a domain came: where the engine can
                # cut it short, the next wait is a long one over every domain; elsewhere short
                # waits cover the new domains until it ends
                self._short.discard(wait_id)
                older = [self._waiting[w] for w in self._waits if w in self._waiting]
                self._cut.update(w for w in self._waits if w in self._waiting)
        for thread in older:
            hints_of(self._engine).interrupt_wait(thread)
        if isinstance(found, BaseException):
            return found
        for name, before in since.items():
            changes = found.get(name, [])
            with self._cond:
                d = self._domains.get(name)
                if d is None or d.position is not before or (cut and not changes):
                    continue  # dropped, moved on by another wait meanwhile, or cut short
                if changes:
                    d.position = changes[-1].revision
                    self._current = None  # the waits out start before this: wait from here
                subs = [s for s in d.subs if s.started]
            for sub in subs:
                _hand(sub, before, changes, started, returned)
        return None


def _hand(sub: Subscription, before: Revision, changes: list[Change], t0: float, t1: float) -> None:
    try:
        sub.deliver(before, changes, t0, t1)
    except Exception as exc:  # a subscriber's failure is its own: the others go on
        log.warning("change feed: a subscriber of %s failed: %s", sub.domain, exc, exc_info=exc)


def _serve(jobs: queues.SimpleQueue[Callable[[], None] | None]) -> None:
    while (job := jobs.get()) is not None:
        job()
