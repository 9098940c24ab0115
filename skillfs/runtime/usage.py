"""Usage counts and last-used times per (user, skill), kept in memory and written to the store
in batches.

Counting a load must not cost the reasoning step a round trip, so `add` only bumps a counter
and notes the time;
a background thread writes the batch every `interval` seconds (sooner once `max_pending` loads
are waiting) and at interpreter exit. A batch the store refused is kept for the next try.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import Counter

from skillfs.api import Store
from skillfs.errors import StoreFailed, StoreUnavailable

log = logging.getLogger(__name__)


class UsageRecorder:
    """The batched load counter (and last-used clock) of one agent in one process."""

    def __init__(
        self,
        store: Store,
        agent: str,
        interval: float = 5.0,
        max_pending: int = 1000,
        *,
        background: bool = True,
    ) -> None:
        self.store = store
        self.agent = agent
        #: False: no thread of its own; the owner (the server) calls `flush`.
        self.background = background
        self.interval = interval
        self.max_pending = max_pending
        self._counts: Counter[tuple[str, str]] = Counter()
        #: the time of each key's latest load in this batch
        self._times: dict[tuple[str, str], float] = {}
        self._pending = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: The process whose exit writes the pending counts (`_flush_at_exit`).
        self._pid = os.getpid()

    def add(self, user: str, skill: str) -> None:
        """Count one load at this time; never touches the store."""
        now = time.time()
        with self._lock:
            self._counts[(user, skill)] += 1
            self._times[(user, skill)] = max(now, self._times.get((user, skill), 0.0))
            self._pending += 1
            if self._thread is None and self.background and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name=f"skillfs-usage {self.agent}", daemon=True
                )
                self._thread.start()
                self._pid = os.getpid()
                atexit.register(self._flush_at_exit)  # until closed
            if self._pending >= self.max_pending:
                self._wake.set()

    def flush(self) -> None:
        """Write the counts gathered so far (one store call); keep them if the store is down."""
        with self._flush_lock:
            with self._lock:
                counts, self._counts, self._pending = self._counts, Counter(), 0
                times, self._times = self._times, {}
            if not counts:
                return
            try:
                self.store.usage.record(self.agent, dict(counts), times)
            except (StoreUnavailable, StoreFailed) as exc:  # a full disk may be freed
                log.warning("usage of %s not recorded yet: %s", self.agent, exc)
                with self._lock:
                    self._counts.update(counts)
                    self._pending += counts.total()
                    for key, t in times.items():
                        self._times[key] = max(t, self._times.get(key, 0.0))

    def close(self) -> None:
        """Write the pending counts and end the flush thread: its store is being closed (a
        thread left behind would hold the store, and its connections, for good)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        atexit.unregister(self._flush_at_exit)
        self.flush()

    def _flush_at_exit(self) -> None:
        if os.getpid() != self._pid:  # a forked child: its copy holds its parent's counts
            return
        try:
            self.flush()
        except Exception as exc:  # the store may be closed already: report, do not mask exit
            log.warning("usage of %s lost at exit: %s", self.agent, exc)

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self._wake.clear()
            self.flush()


def recorder_for(store: Store, agent: str) -> UsageRecorder:
    """The one recorder of `agent` for this store object in this process (closed with the
    store; a forked child starts with no counts and no flush thread of its own)."""
    return store.local(UsageRecorder, agent)
