"""A worker's store outage, once known: steps that accept a stale view get it at once, while
one background probe asks the store until it answers (docs/runtime.md, "One budget per
step"). Without it every step of a worker whose store is down waited out its whole budget
again before returning the same stale view."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from skillfs.errors import SkillfsError
from skillfs.util.deadline import budget
from skillfs.util.outage import Outage

#: Seconds between two probes of a store that is down, and the budget of each.
PROBE_EVERY = 1.0
PROBE_BUDGET = 2.0


class Recovery:
    """Whether the store is known to be down, one warning when it goes and one when it is
    back, and the probe that finds out (a thread, only while it is down)."""

    def __init__(self, probe: Callable[[], object], logger: logging.Logger, what: str) -> None:
        self._probe = probe
        self._outage = Outage(logger, what)
        self._down = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def down(self) -> bool:
        return self._down.is_set()

    def failed(self, exc: BaseException) -> None:
        """A step found the store down: later steps that accept a stale view get it at once
        until the probe (started here) finds the store answering."""
        with self._lock:
            self._outage.failed(exc)
            self._down.set()
            if (self._thread is None or not self._thread.is_alive()) and not self._closed.is_set():
                self._thread = threading.Thread(
                    target=self._probing, name="skillfs-recovery", daemon=True
                )
                self._thread.start()

    def recovered(self) -> None:
        if self._down.is_set():
            with self._lock:
                self._down.clear()
                self._outage.recovered()

    def _probing(self) -> None:
        while self._down.is_set() and not self._closed.wait(PROBE_EVERY):
            try:
                with budget(PROBE_BUDGET):
                    self._probe()
            except SkillfsError:
                continue
            self.recovered()

    def close(self) -> None:
        self._closed.set()
