"""`sqlite:///path`: the embedded default engine, one SQLite file in WAL mode.

Several processes on one host share the file through SQLite's own locking; each thread
uses its own connection. Every commit is one `BEGIN IMMEDIATE` transaction, durable on
return (`synchronous=FULL`). The tables and statements are the SQL core's
(`skillfs.engines.sql`); the layout is in docs/engine-sqlite.md.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from skillfs.engines.base import LOG_LIMIT, Charge, Check, CommitOp, UrlOptions, redact
from skillfs.engines.sql.engine import SqlEngine
from skillfs.engines.sqlite.file import SqliteFile
from skillfs.errors import InvalidPath, StoreFailed
from skillfs.model import Change, Revision

#: Seconds a statement waits for another writer's lock before StoreUnavailable.
TIMEOUT = 5.0
#: Longest sleep between two checks for other processes' commits while `changes` waits.
POLL = 0.025


def parse_path(url: str) -> Path:
    """The file a `sqlite:` URL names, absolute.

    As in SQLAlchemy: `sqlite:///skills.db` is relative to the working directory,
    `sqlite:////var/lib/skillfs/skills.db` is absolute, `~` expands to the home directory."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidPath(
            f"SQLite URL {url!r} names a host: use sqlite:///relative/skills.db "
            "or sqlite:////absolute/skills.db"
        )
    raw = unquote(parts.path)[1:]
    if not raw or raw.endswith("/") or raw == ":memory:":
        raise InvalidPath(
            f"SQLite URL {url!r} names no database file: use sqlite:///relative/skills.db, "
            "sqlite:////absolute/skills.db, or memory:// for a throw-away store"
        )
    return Path(os.path.abspath(os.path.expanduser(raw)))


class SqliteEngine(SqlEngine):
    """One SQLite file; safe for many threads and several processes on one host."""

    def __init__(self, url: str) -> None:
        if sqlite3.sqlite_version_info < (3, 24, 0):
            raise StoreFailed(
                f"store {redact(url)}: SQLite {sqlite3.sqlite_version} is too old (skillfs "
                "needs 3.24 or newer for UPSERT): use a Python linked against a newer SQLite"
            )
        options = UrlOptions(url, ("prefix", "timeout", "log_limit"))
        self.path = parse_path(url)
        timeout = options.number("timeout", float, TIMEOUT)
        self._db = SqliteFile(redact(url), self.path, timeout)
        super().__init__(
            url,
            self._db,
            prefix=options.get("prefix"),
            log_limit=options.number("log_limit", int, LOG_LIMIT),
        )
        self._committed = threading.Condition()
        self._wakes = 0  # `wake_waits` calls: a wait that sees it move answers

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        """The SQL core's commit; this engine's own waits wake at once."""
        revision = super().commit(domain, ops, checks, charges)
        with self._committed:
            self._committed.notify_all()
        return revision

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        """Polls `PRAGMA data_version`, which moves when any other connection (another
        thread or process) commits; commits of this engine wake the wait at once."""
        deadline = time.monotonic() + timeout
        delay = 0.002
        wakes = self._wakes
        while True:
            seen = self._db.data_version()
            found = self.look(since)
            if found or self._wakes != wakes:
                return found
            while self._db.data_version() == seen and self._wakes == wakes:
                left = deadline - time.monotonic()
                if left <= 0:
                    return {}
                with self._committed:
                    self._committed.wait(min(delay, left))
                delay = min(delay * 2, POLL)

    def wake_waits(self) -> None:
        with self._committed:
            self._wakes += 1
            self._committed.notify_all()
