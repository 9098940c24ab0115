"""One connection per engine and process LISTENing on the store's channel, on its own
thread (docs/engine-postgres.md, "Notifications"). It is not one of the pool's: it stays
in LISTEN for as long as the engine lives, whatever number of domains are followed.

A commit NOTIFYs `<domain> <counter>` in its transaction; each notification raises its
domain's count in `heard` and wakes the waiters. Each (re)connection starts a new `session`
(0 while not listening): what a reader confirmed in an earlier session is void, so it
catches up from the change log. A connection silent for `PING_EVERY` seconds is pinged
(`SELECT 1`, no read of skillfs's tables), and TCP keepalives run under it, so a half-open
connection is found and replaced."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from skillfs.util.outage import Outage

log = logging.getLogger(__name__)

#: Longest silence on the connection before a ping (at most 30 s: docs/engine-postgres.md).
PING_EVERY = 25.0
#: How often the thread looks whether the engine closed while nothing arrives.
SLICE = 1.0


class Listener:
    """LISTEN on `channel` over connections `connect` makes; see the module's docstring."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        channel: str,
        name: str,
        *,
        ping_every: float = PING_EVERY,
    ) -> None:
        self._connect = connect
        self.channel = channel
        self.name = name
        self.ping_every = ping_every
        self._cond = threading.Condition()
        self.session = 0
        self.generation = 0
        self.heard: dict[str, int] = {}
        self._sessions = 0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        #: For tests and metrics: pings sent, notifications received.
        self.pings = 0
        self.received = 0

    def start(self, timeout: float) -> None:
        """Start the thread once; wait (at most `timeout`) until it listens."""
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name=f"skillfs-pg-listen {self.name}", daemon=True
                )
                self._thread.start()
            self._cond.wait_for(lambda: self.session or self._closed.is_set(), timeout)

    def state(self, domains: list[str]) -> tuple[int, int, dict[str, int]]:
        """The session, the generation and how many notifications each domain had."""
        with self._cond:
            return self.session, self.generation, {d: self.heard.get(d, 0) for d in domains}

    def wait(self, generation: int, timeout: float) -> None:
        """Until something is heard after `generation` (or the connection changes)."""
        with self._cond:
            self._cond.wait_for(lambda: self.generation != generation, timeout)

    def wake(self) -> None:
        """Wake every waiter now (they look whether they should answer)."""
        self._bump()

    def _bump(self, session: int | None = None, domain: str | None = None) -> None:
        with self._cond:
            if session is not None:
                self.session = session
            if domain is not None:
                self.heard[domain] = self.heard.get(domain, 0) + 1
                self.received += 1
            self.generation += 1
            self._cond.notify_all()

    def _run(self) -> None:
        outage = Outage(log, f"notifications of {self.name}")
        while not self._closed.is_set():
            try:
                self._listen(outage)
            except Exception as exc:  # the connection failed: listen again on a new one
                self._bump(session=0)
                if self._closed.is_set():
                    return
                self._closed.wait(outage.failed(exc))
            else:
                return

    def _listen(self, outage: Outage) -> None:
        conn = self._connect()
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            self._sessions += 1
            self._bump(session=self._sessions)
            outage.recovered()
            quiet_since = time.monotonic()
            while not self._closed.is_set():
                for note in conn.notifies(timeout=SLICE, stop_after=1):
                    domain, _, _ = note.payload.rpartition(" ")
                    self._bump(domain=domain)
                    quiet_since = time.monotonic()
                if time.monotonic() - quiet_since >= self.ping_every:
                    conn.execute("SELECT 1")
                    self.pings += 1
                    quiet_since = time.monotonic()
        finally:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()

    def close(self) -> None:
        """Stop listening: the thread ends, closing its connection, within `SLICE`."""
        self._closed.set()
        self._bump(session=0)
