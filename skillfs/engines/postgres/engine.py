"""`postgresql://` and `postgres://`: PostgreSQL as a production store (docs/engine-postgres.md).

The tables, the commit and the log are the SQL core's (`skillfs.engines.sql`); this engine
adds how its followers wait: pushed notifications instead of polling. A commit NOTIFYs the
store's channel in its transaction, one connection per engine and process LISTENs
(`skillfs.engines.postgres.listen`), and `changes_many` reads the log only for a domain that
something was heard of since it last read it, or when the listening connection was made
anew (then it catches up from the log). While nothing changes it reads nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

from skillfs.engines.postgres.dialect import PostgresDialect
from skillfs.engines.postgres.listen import Listener
from skillfs.engines.postgres.url import PostgresUrl
from skillfs.engines.sql.engine import SqlEngine
from skillfs.model import Change, Revision

#: The longest the first wait of a process waits for its listening connection.
LISTEN_START = 5.0


class PostgresEngine(SqlEngine):
    """One PostgreSQL database (its schema `skillfs`), shared by any number of processes."""

    def __init__(self, url: str) -> None:
        parsed = PostgresUrl(url)
        self.dialect = PostgresDialect(parsed)
        super().__init__(url, self.dialect, prefix=parsed.prefix, log_limit=parsed.log_limit)
        self.channel = parsed.channel
        self._lock = threading.Lock()
        self._listener_of_pid: tuple[int, Listener] | None = None
        #: domain → (the revision a look found it at, the session and the count of its
        #: notifications before that look): while both stay, nothing changed.
        self._confirmed: dict[str, tuple[Revision, int, int]] = {}
        #: Looks at the log that waits made (tests count them: none while idle).
        self.looks = 0
        self._wakes = 0  # `wake_waits` calls: a wait that sees it move answers

    @property
    def listener(self) -> Listener:
        """This process's listening connection (a forked child makes its own)."""
        pid = os.getpid()
        with self._lock:
            if self._listener_of_pid is None or self._listener_of_pid[0] != pid:
                listener = Listener(self.dialect.connect, self.channel, self.url)
                self._listener_of_pid = (pid, listener)
                self._confirmed = {}
            return self._listener_of_pid[1]

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        """Look at the domains not confirmed since their last notification, then wait for
        the next one heard of (see the module's docstring)."""
        deadline = time.monotonic() + timeout
        wakes = self._wakes
        listener = self.listener
        listener.start(min(timeout, LISTEN_START))
        while True:
            session, generation, heard = listener.state(list(since))
            stale = {
                d: r for d, r in since.items() if self._confirmed.get(d) != (r, session, heard[d])
            }
            if stale:
                self.looks += 1
                found = self.look(stale)
                if found:
                    return found
                if session:
                    for d, r in stale.items():
                        self._confirmed[d] = (r, session, heard[d])
            left = deadline - time.monotonic()
            if left <= 0 or self._wakes != wakes:
                return {}
            listener.wait(generation, left)

    def wake_waits(self) -> None:
        self._wakes += 1
        held = self._listener_of_pid
        if held is not None and held[0] == os.getpid():
            held[1].wake()

    def close(self) -> None:
        with self._lock:
            held, self._listener_of_pid = self._listener_of_pid, None
        if held is not None and held[0] == os.getpid():
            held[1].close()
        super().close()
