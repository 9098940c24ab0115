"""The SQLite dialect of the SQL core: one file shared by the threads and processes of one
host, a connection per thread (reopened after `close` and after fork()), WAL mode, durable
transactions, and the schema (`skillfs.engines.sql.schema`, its version in
`PRAGMA user_version`) brought up to date when the file is opened; docs/engine-sqlite.md."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from skillfs.engines.sql.dialect import Dialect
from skillfs.engines.sql.schema import SCHEMA_VERSION, Types, check_version, upgrade
from skillfs.errors import StoreFailed, StoreUnavailable

#: The WAL is truncated back to this size after a checkpoint (a 64 MiB blob grows it).
WAL_SIZE_LIMIT = 16 * 1024 * 1024
#: Seconds between two tries to switch a file to WAL while another connection writes it.
BUSY_RETRY = 0.005
#: What to do about an error that may pass (a lock held past the timeout, an I/O error).
_HINT = "check that no process holds a long write lock and that the disk answers; then retry"
#: SQLite's primary result codes that waiting does not fix (docs/engine-sqlite.md, "Errors"):
#: what the file's state is, and what to do; `{path}` and `{uid}` are filled in. Retrying
#: them for the store's `retry_for` only delayed the news, then called it an outage.
_FAILED = {
    sqlite3.SQLITE_CORRUPT: (
        "is corrupt: stop the processes using it, restore it from a backup (or salvage what "
        "SQLite can still read with `sqlite3 {path} .recover`) and open that; retrying will "
        "not help"
    ),
    sqlite3.SQLITE_NOTADB: (
        "is not an SQLite database: check that the URL names your skillfs store, or move the "
        "file away to have skillfs create a new store there"
    ),
    sqlite3.SQLITE_FULL: (
        "cannot grow, its disk is full: free space on the file system holding it (or move "
        "the store to a larger one), then retry; the failed write changed nothing"
    ),
    sqlite3.SQLITE_READONLY: (
        "cannot be written: make the file, its directory (SQLite writes {path}-wal and "
        "{path}-shm beside it) and their file system writable for this user (uid {uid}), "
        "then retry"
    ),
    sqlite3.SQLITE_CANTOPEN: (
        "cannot be opened: check that its directory exists and that this user (uid {uid}) "
        "may read and write the file and the directory, and that the process has file "
        "descriptors left; then retry"
    ),
    sqlite3.SQLITE_PERM: (
        "is refused to this user (uid {uid}): check the permissions of the file and its "
        "directory; then retry"
    ),
}


class SqliteFile(Dialect):
    """The file at `path`, named `url` in errors."""

    types = Types(text="TEXT", blob="BLOB", real="REAL", integer="INTEGER", keyed=" WITHOUT ROWID")
    deleted = "json_extract(body, '$.deleted')"

    def __init__(self, url: str, path: Path, timeout: float) -> None:
        self.url = url
        self.path = path
        self.timeout = timeout
        self._local = threading.local()
        #: Every connection with the process and thread that opened it.
        self._conns: list[tuple[int, threading.Thread, sqlite3.Connection]] = []
        self._conns_lock = threading.Lock()
        self._generation = 0
        self._open()

    def _open(self) -> None:
        """Create the file and its directories, switch it to WAL and bring its schema
        up to date, so that a bad path fails here with a clear error."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreFailed(
                f"store {self.url}: cannot create the directory {self.path.parent} "
                f"({type(exc).__name__}: {exc}); pick a writable path"
            ) from exc
        conn = self._connect()
        try:
            with self.guard():
                self._migrate(conn)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        with self.guard():
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            try:
                mode = self._wal(conn)
                if mode != "wal":
                    raise StoreFailed(
                        f"store {self.url}: {self.path} cannot use WAL mode (journal mode "
                        f"stays {mode!r}); put it on a local file system"
                    )
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA fullfsync=ON")
                conn.execute("PRAGMA checkpoint_fullfsync=ON")
                conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
                check_version(conn.execute("PRAGMA user_version").fetchone()[0], self._where)
            except BaseException:
                conn.close()
                raise
        return conn

    def _wal(self, conn: sqlite3.Connection) -> str:
        """Switch `conn`'s file to WAL (a no-op once it is) and return the journal mode. The
        switch of a new file needs it exclusively, and meeting another connection's write
        lock SQLite answers at once with SQLITE_BUSY instead of waiting the busy timeout
        (waiting could deadlock: sqlite3_busy_handler's docs) — as when processes open a new
        file together. So it waits here, up to the same timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
            time.sleep(BUSY_RETRY)

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use, after `close` and after fork().

        Opening one closes those of threads that ended, and this thread's own connection of
        before a `close`, so a thread per request does not pile up file handles."""
        local = self._local
        pid = os.getpid()
        if getattr(local, "key", None) != (pid, self._generation):
            conn = self._connect()
            me = threading.current_thread()
            stale = getattr(local, "conn", None) if getattr(local, "key", (0,))[0] == pid else None
            with self._conns_lock:
                ended = [c for p, t, c in self._conns if p == pid and not t.is_alive()]
                self._conns = [
                    e for e in self._conns
                    if e[0] != pid or (e[1].is_alive() and e[2] is not stale)
                ]  # fmt: skip
                self._conns.append((pid, me, conn))
                local.conn, local.key = conn, (pid, self._generation)
            for old in [*ended, *([stale] if stale is not None else [])]:
                old.close()
        current: sqlite3.Connection = local.conn
        return current

    @property
    def _where(self) -> str:
        return f"store {self.url}: {self.path}"

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Apply the missing migrations in one write transaction; racing openers queue on it."""
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            upgrade(self.types, found, self._where, conn.execute)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """SQLite's errors naming the file: a corrupt file, one that is not a database, a
        full disk, a read-only or unreachable file as StoreFailed saying what to do (waiting
        fixes none of them); a lock held past the timeout and the rest as StoreUnavailable,
        which the store retries. Integrity and programming errors stay what they are (bugs)."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise self._error(exc) from exc
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:
                raise
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.DatabaseError) -> StoreFailed | StoreUnavailable:
        code = getattr(exc, "sqlite_errorcode", None)
        advice = None if code is None else _FAILED.get(code & 0xFF)
        if advice is not None:
            what = advice.format(path=self.path, uid=os.getuid())
            return StoreFailed(f"store {self.url}: {self.path} {what} (SQLite: {exc})")
        return StoreUnavailable(f"store {self.url} is unavailable: {self.path}: {exc}; {_HINT}")

    def query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """The rows of one statement, which reads one snapshot without a transaction."""
        with self.guard():
            return self.conn().execute(sql, params).fetchall()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so a
        transaction never fails half-way on a lock upgrade; rolled back on any error."""
        conn = self.conn()
        with self.guard():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: its statements see one snapshot of the file."""
        conn = self.conn()
        with self.guard():
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def ping(self) -> None:
        self.query("SELECT count(*) FROM revisions")

    def data_version(self) -> int:
        """A number that moves when another connection (thread or process) commits."""
        version: int = self.query("PRAGMA data_version")[0][0]
        return version

    def close(self) -> None:
        """Close this thread's connection and those of ended threads; a later call opens a
        fresh one.

        A connection of another live thread may be inside a call right now (a follower's
        wait): closing it under that thread crashes the process, so that thread closes it
        itself at its next call. Connections inherited through fork() stay open and
        referenced, never closed in the child: SQLite forbids using a connection across
        fork(), and closing is a use."""
        pid = os.getpid()
        me = threading.current_thread()
        with self._conns_lock:
            self._generation += 1
            closing = [c for p, t, c in self._conns if p == pid and (t is me or not t.is_alive())]
            self._conns = [e for e in self._conns if e[2] not in closing]
        for conn in closing:
            conn.close()
