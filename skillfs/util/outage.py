"""One warning when a background loop starts failing and one when it recovers, and the back-off
between its tries: the rule every loop that retries a store follows (a worker's watch, a
server's hub, an engine's listener)."""

from __future__ import annotations

import logging
import time

#: The longest wait between two tries of a failing store (seconds).
LONGEST = 2.0


class Outage:
    """One warning when a background loop starts failing and one when it recovers, instead of a
    line per retry: a worker whose servers are all down would otherwise log one every two
    seconds for as long as they are (each retry is logged at DEBUG). The recovery is logged at
    the warning's level, so whoever saw the one sees the other."""

    def __init__(self, logger: logging.Logger, what: str, first: float = 0.05) -> None:
        self._log = logger
        self._what = what
        self._since: float | None = None
        self._failures = 0
        self._first = self._wait = first

    def failed(self, exc: BaseException) -> float:
        """Count a failure (the first one logged); returns how long to wait before the next
        try: `first`, then twice as long each time, up to LONGEST."""
        self._failures += 1
        wait, self._wait = self._wait, min(self._wait * 2, LONGEST)
        if self._since is not None:
            self._log.debug("%s: %s; still retrying", self._what, exc)
            return wait
        self._since = time.monotonic()
        self._log.warning(
            "%s: %s; retrying in the background (one more line when it recovers)", self._what, exc
        )
        return wait

    def recovered(self) -> None:
        self._wait = self._first
        if self._since is None:
            return
        self._log.warning(
            "%s: recovered after %.1fs and %d failed attempts",
            self._what,
            time.monotonic() - self._since,
            self._failures,
        )
        self._since, self._failures = None, 0
