"""Following change logs (C8): one domain for `store.changes.follow` and `follow_domain`;
every domain the process follows, over one store connection, for `store.changes.feed`
(`skillfs.store.feed`, docs/design.md §6.1)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

from skillfs.engines.base import EMPTY, Engine
from skillfs.errors import InvalidArgument, StoreUnavailable
from skillfs.model import Change, Revision, Scope, target_domain
from skillfs.model.names import check_domain
from skillfs.store import name_register
from skillfs.store.feed import ChangeFeed
from skillfs.util.outage import Outage

log = logging.getLogger(__name__)


def follow_changes(
    engine: Engine,
    domain: str,
    since: Revision | None,
    timeout: float | None,
    poll: float,
    stop: threading.Event | None,
) -> Iterator[Change]:
    """Changes after `since` in order; a store outage is logged and waited out, since a
    follower's caller wants the changes, not the outage (docs/design.md §3, C8). A scope's
    name register moves with the commits that create a skill, which are listed: its own
    changes are left out (`store.name_register`)."""
    end = None if timeout is None else time.monotonic() + timeout
    outage = Outage(log, f"follow {domain}")
    while not (stop and stop.is_set()):
        wait = poll if end is None else min(poll, end - time.monotonic())
        if wait <= 0:
            return
        try:
            if since is None:  # from now: where the domain is once the store answers
                since = engine.revisions([domain])[domain] or EMPTY
            batch = engine.changes(domain, since, wait)
        except StoreUnavailable as exc:
            outage.failed(exc)
            time.sleep(min(wait, 0.5))
            continue
        outage.recovered()
        for change in batch:
            since = change.revision
            if change.op == "reset" or (
                change.scope is not None and not name_register.is_register(change.skill or "")
            ):
                yield change  # else changes the token may not see (grpc://): skip them


class Changes:
    """`store.changes`: following the change log of a domain (C8), and the store object's one
    change feed in this process (`feed`), closed with the store."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._feed: ChangeFeed | None = None

    @property
    def wait(self) -> float:
        """How long one wait of the store lasts by default (1 s on a store; 25 s on a skillfs
        server, whose waits end early when there is news)."""
        return self._engine.watch_wait

    @property
    def feed(self) -> ChangeFeed:
        """The one feed of this store object's change log in this process (docs/design.md
        §6.1): the hub, the console, MCP sessions and the runtime's followers subscribe to
        it. A forked child makes its own."""
        if self._pid != os.getpid():
            self._pid, self._lock, self._feed = os.getpid(), threading.Lock(), None
        with self._lock:
            if self._feed is None:
                self._feed = ChangeFeed(self._engine)
            return self._feed

    def close(self) -> None:
        with self._lock:
            feed, self._feed = self._feed, None
        if feed is not None:
            feed.close()

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
