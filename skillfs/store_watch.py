"""Following a domain's change log (C8), for `Store.follow` and `Store.follow_domain`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from skillfs.engines.base import EMPTY, Engine
from skillfs.errors import StoreUnavailable
from skillfs.model import Change, Revision

log = logging.getLogger(__name__)


class Outage:
    """One warning when a background loop starts failing and one when it recovers, instead of a
    line per retry: a worker whose servers are all down would otherwise log one every two
    seconds for as long as they are (each retry is logged at DEBUG). The recovery is logged at
    the warning's level, so whoever saw the one sees the other."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what
        self._since: float | None = None
        self._failures = 0

    def failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._since is not None:
            self._log.debug("%s: %s; still retrying", self._what, exc)
            return
        self._since = time.monotonic()
        self._log.warning(
            "%s: %s; retrying in the background (one more line when it recovers)", self._what, exc
        )

    def recovered(self) -> None:
        if self._since is None:
            return
        self._log.warning(
            "%s: recovered after %.1fs and %d failed attempts",
            self._what,
            time.monotonic() - self._since,
            self._failures,
        )
        self._since, self._failures = None, 0


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
