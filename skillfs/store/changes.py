"""Following change logs (C8): one domain for `store.changes.follow` and `follow_domain`,
many over one store connection for `Watcher` (docs/design.md §6.1)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import ParamSpec, TypeVar

from skillfs.engines.base import EMPTY, Engine
from skillfs.errors import InvalidArgument, StoreUnavailable
from skillfs.model import Change, Revision, Scope, target_domain
from skillfs.model.names import check_domain
from skillfs.util.outage import Outage

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
#: The longest `Watcher.close` waits for its thread to end.
CLOSE_WAIT = 5.0


def follow_changes(
    engine: Engine,
    domain: str,
    since: Revision | None,
    timeout: float | None,
    poll: float,
    stop: threading.Event | None,
) -> Iterator[Change]:
    """Changes after `since` in order; a store outage is logged and waited out, since a
    follower's caller wants the changes, not the outage (docs/design.md §3, C8)."""
    end = None if timeout is None else time.monotonic() + timeout
    outage = Outage(log, f"follow {domain}")
    if since is None:
        since = engine.revisions([domain])[domain] or EMPTY
    while not (stop and stop.is_set()):
        wait = poll if end is None else min(poll, end - time.monotonic())
        if wait <= 0:
            return
        try:
            batch = engine.changes(domain, since, wait)
        except StoreUnavailable as exc:
            outage.failed(exc)
            time.sleep(min(wait, 0.5))
            continue
        outage.recovered()
        for change in batch:
            since = change.revision
            if change.scope is not None or change.op == "reset":
                yield change  # else changes the token may not see (grpc://): skip them


#: What a `Watcher` calls for each followed domain after each wait: `(domain, since,
#: changes, started, returned)`, the changes after `since` (empty: nothing new as of
#: `started`, a `time.monotonic()` before the look; `returned`: when the wait came back with
#: them, the newest they can be). It returns the revision to follow on from (None: from the
#: last change), so a caller whose own state moved meanwhile can say where it is.
OnChanges = Callable[[str, Revision, list[Change], float, float], "Revision | None"]


class Watcher:
    """Follows many domains over one store connection, on one thread, with the engine's
    `changes_many` (Redis: one XREAD over every stream; etcd: one watch stream; grpc://: one
    WatchMany call). Add and remove domains at any time; a domain added while the thread
    waits is looked at when that wait ends (the engine's `interrupt_wait` ends it at once
    where it can, else after at most `poll` seconds), from the revision it was added at, so
    nothing is skipped. The thread ends when the last domain is removed and starts again
    with the next one. Store outages are logged once and waited out (C8). A wait cut short
    reports only the domains it found changes in: its silence about the others proves
    nothing (the engine may have ended it before asking the store), so no follower takes it
    as confirmation that its cache is current (`max_staleness`)."""

    def __init__(
        self,
        engine: Engine,
        on_changes: OnChanges,
        *,
        poll: float | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.engine = engine
        #: The longest wait (default: the engine's `watch_wait`).
        self.poll = engine.watch_wait if poll is None else poll
        self._on_changes = on_changes
        self._log = logger or log
        self._since: dict[str, Revision] = {}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: The thread's ident while it waits in `changes_many` (for `interrupt_wait`).
        self._waiting: int | None = None
        #: The current wait was interrupted (`_interrupt`).
        self._cut_short = False

    @property
    def domains(self) -> list[str]:
        with self._lock:
            return sorted(self._since)

    @property
    def thread(self) -> threading.Thread | None:
        """The thread following the domains now (None while there are none)."""
        return self._thread

    def add(self, domain: str, since: Revision | None = None) -> None:
        """Follow `domain` from `since` (None: from now; again: move it to `since`)."""
        if since is None:
            since = self.engine.revisions([domain])[domain] or EMPTY
        with self._lock:
            new = domain not in self._since
            self._since[domain] = since
            if new:  # the wait under way does not cover the domain
                self._interrupt()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name=f"skillfs-watch {self.engine.url}", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def remove(self, domain: str) -> None:
        with self._lock:
            self._since.pop(domain, None)
            if not self._since:  # the thread ends sooner
                self._interrupt()

    def close(self) -> None:
        """Stop following, and let the thread end before the engine is closed: a wait still
        in flight then (Redis cannot cut an XREAD short) failed, reconnected and left its
        new connection open for as long as the process lived. The wait lasts `watch_wait`
        (1 s on a store) unless the engine cuts it short; `CLOSE_WAIT` bounds it anyway."""
        with self._lock:
            self._closed = True
            self._since.clear()
            self._interrupt()
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT)

    def _interrupt(self) -> None:
        """End the wait under way, if any (under the lock)."""
        if self._waiting is not None:
            self._cut_short = True
            self.engine.interrupt_wait(self._waiting)

    def _run(self) -> None:
        outage = Outage(self._log, f"watch {self.engine.url}")
        while True:
            with self._lock:
                if self._closed or not self._since:
                    self._thread = None  # `add` starts another
                    return
                since = dict(self._since)
                self._waiting = threading.get_ident()
                self._cut_short = False
            started = time.monotonic()
            try:
                found = self.engine.changes_many(since, self.poll)
            except Exception as exc:  # StoreUnavailable, or a closed engine under us
                with self._lock:
                    self._waiting = None
                    if self._closed:
                        self._thread = None
                        return
                time.sleep(outage.failed(exc))
                continue
            returned = time.monotonic()
            with self._lock:
                self._waiting = None
                cut_short = self._cut_short
            pause = 0.0  # after a handler failed: the back-off
            for domain, rev in since.items():
                with self._lock:
                    if self._since.get(domain) is not rev:
                        continue  # removed or moved meanwhile: the next wait looks from there
                changes = found.get(domain, [])
                if cut_short and not changes:
                    continue
                try:
                    after = self._on_changes(domain, rev, changes, started, returned)
                except Exception as exc:  # the store failed under the handler: again, later
                    pause = outage.failed(exc)
                    continue
                after = after or (changes[-1].revision if changes else rev)
                with self._lock:
                    if self._since.get(domain) is rev:  # else removed or moved meanwhile
                        self._since[domain] = after
            if pause:
                time.sleep(pause)
            else:
                outage.recovered()


def follow_many(
    engine: Engine,
    since: Mapping[str, Revision | None],
    timeout: float | None,
    poll: float,
    stop: threading.Event | None,
) -> Iterator[tuple[str, Change]]:
    """`follow_changes` of many domains over one connection: `(domain, change)` pairs, each
    domain's in order with nothing skipped (C8)."""
    end = None if timeout is None else time.monotonic() + timeout
    missing = [d for d, r in since.items() if r is None]
    now = engine.revisions(missing) if missing else {}
    at = {d: r if r is not None else (now[d] or EMPTY) for d, r in since.items()}
    while not (stop and stop.is_set()):
        wait = poll if end is None else min(poll, end - time.monotonic())
        if wait <= 0:
            return
        try:
            found = engine.changes_many(at, wait)
        except StoreUnavailable as exc:
            log.warning("follow %d domains: %s; retrying", len(at), exc)
            time.sleep(min(wait, 0.5))
            continue
        for domain, batch in found.items():
            for change in batch:
                at[domain] = change.revision
                if change.scope is not None or change.op == "reset":
                    yield domain, change


class Changes:
    """`store.changes`: following the change log of a domain (C8), and the watches to close
    with the store."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._watches: list[Watcher] = []

    def watched_by(self, watcher: Watcher) -> None:
        """Close `watcher` with this store object, before its engine: a runtime watch of a
        store closed under it retried on the closed connection, a thread per worker, for as
        long as the process lived."""
        self._watches.append(watcher)

    def close(self) -> None:
        for watcher in self._watches:
            watcher.close()

    def follow(
        self,
        target: str | Scope,
        since: Revision | None = None,
        *,
        timeout: float | None = None,
        poll: float = 1.0,
        stop: threading.Event | None = None,
    ) -> Iterator[Change]:
        """Changes after `since` in order (C8); a `reset` change means reload from scratch.

        Without `since`, follows from now. Stops after `timeout` seconds or when `stop` is set;
        runs forever otherwise."""
        return self.follow_domain(domain_of(target), since, timeout=timeout, poll=poll, stop=stop)

    def follow_domain(
        self,
        domain: str,
        since: Revision | None = None,
        *,
        timeout: float | None = None,
        poll: float = 1.0,
        stop: threading.Event | None = None,
    ) -> Iterator[Change]:
        """`follow` of a domain ("agents/A", "markets/M")."""
        return follow_changes(self._engine, check_domain(domain), since, timeout, poll, stop)


# An agent's skills and a market's live in one domain each ("agents/A", "markets/M"); the
# public methods take an agent id or a Scope (whose domain is meant), and the *_domain
# forms take a domain string, for callers that hold domains (the runtime, the console).


def domain_of(target: str | Scope) -> str:
    """The domain of an agent (by id) or of a scope."""
    if isinstance(target, Scope):
        return target.domain
    if "/" in target:
        raise InvalidArgument(
            f"{target!r} is not an agent id: give a Scope, or a domain to "
            "domain_revisions() or follow_domain()"
        )
    return target_domain(target)
