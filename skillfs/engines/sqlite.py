"""`sqlite:///path`: the embedded default engine, one SQLite file in WAL mode.

Several processes on one host share the file through SQLite's own locking; each thread
uses its own connection. Every commit is one `BEGIN IMMEDIATE` transaction, durable on
return (`synchronous=FULL`). The layout is in docs/engine-sqlite.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from skillfs.engines.base import EMPTY, CommitOp, Engine, VersionMismatch
from skillfs.errors import InvalidPath, StoreUnavailable
from skillfs.model import Change, Manifest, Revision, Scope

#: The schema this code writes; `PRAGMA user_version` of the file.
SCHEMA_VERSION = 1
#: Change log entries kept per domain (oldest trimmed in the committing transaction).
LOG_LIMIT = 10_000
#: Seconds a statement waits for another writer's lock before StoreUnavailable.
TIMEOUT = 5.0
#: The WAL is truncated back to this size after a checkpoint (a 64 MiB blob grows it).
WAL_SIZE_LIMIT = 16 * 1024 * 1024
#: Longest sleep between two checks for other processes' commits while `changes` waits.
POLL = 0.025
#: Bound parameters per statement, under SQLite's limit on every supported version.
BATCH = 500

#: Statements that bring a file at version N-1 to version N.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE blobs (key TEXT PRIMARY KEY, last_use REAL NOT NULL)",
        "CREATE TABLE blob_chunks (key TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL,"
        " PRIMARY KEY (key, idx))",
        "CREATE TABLE manifests (scope TEXT NOT NULL, skill TEXT NOT NULL,"
        " version INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (scope, skill))",
        "CREATE TABLE history (scope TEXT NOT NULL, skill TEXT NOT NULL,"
        " version INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (scope, skill, version))",
        "CREATE TABLE revisions (domain TEXT PRIMARY KEY, epoch TEXT NOT NULL,"
        " counter INTEGER NOT NULL, log_size INTEGER NOT NULL, trimmed INTEGER NOT NULL)",
        "CREATE TABLE changes (domain TEXT NOT NULL, counter INTEGER NOT NULL,"
        " pos INTEGER NOT NULL, op TEXT NOT NULL, scope TEXT NOT NULL, skill TEXT NOT NULL,"
        " version INTEGER NOT NULL, PRIMARY KEY (domain, counter, pos)) WITHOUT ROWID",
        "CREATE TABLE scopes (domain TEXT NOT NULL, key TEXT NOT NULL, scope TEXT NOT NULL,"
        " PRIMARY KEY (domain, key)) WITHOUT ROWID",
        "CREATE TABLE usage (agent TEXT NOT NULL, user TEXT NOT NULL, skill TEXT NOT NULL,"
        " count INTEGER NOT NULL, PRIMARY KEY (agent, user, skill)) WITHOUT ROWID",
    ),
}

_DOMAIN = re.compile(r"(agents|markets)/[^/]+")
_HINT = (
    "check that the file and its directory exist and are writable, that the file is a skillfs "
    "database and not corrupt, and that no process holds a long write lock; then retry"
)


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


class SqliteEngine(Engine):
    """One SQLite file; safe for many threads and several processes on one host."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        if sqlite3.sqlite_version_info < (3, 24, 0):
            raise StoreUnavailable(
                f"store {self.url}: SQLite {sqlite3.sqlite_version} is too old (skillfs needs "
                "3.24 or newer for UPSERT): use a Python linked against a newer SQLite"
            )
        query = parse_qs(urlsplit(url).query, keep_blank_values=True)
        unknown = set(query) - {"prefix", "timeout", "log_limit"}
        if unknown:
            raise InvalidPath(
                f"SQLite URL {url!r}: unknown option(s) {', '.join(sorted(unknown))}; "
                "known: prefix, timeout, log_limit"
            )

        def option(name: str) -> str | None:
            return query[name][-1] if name in query else None

        try:
            self.timeout = float(option("timeout") or TIMEOUT)
            self.log_limit = int(option("log_limit") or LOG_LIMIT)
        except ValueError as exc:
            raise InvalidPath(f"SQLite URL {url!r}: {exc}") from exc
        if self.timeout <= 0 or self.log_limit < 1:
            raise InvalidPath(f"SQLite URL {url!r}: timeout and log_limit must be positive")
        self.prefix = option("prefix") or ""
        self.path = parse_path(url)
        self._local = threading.local()
        #: Every connection with the process and thread that opened it.
        self._conns: list[tuple[int, threading.Thread, sqlite3.Connection]] = []
        self._conns_lock = threading.Lock()
        self._generation = 0
        self._committed = threading.Condition()
        self._open_file()

    # ------------------------------------------------------------------ connections

    def _open_file(self) -> None:
        """Create the file and its directories, switch it to WAL and bring its schema
        up to date, so that a bad path fails here with a clear error."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"store {self.url}: cannot create the directory {self.path.parent} "
                f"({type(exc).__name__}: {exc}); pick a writable path"
            ) from exc
        conn = self._connect()
        try:
            with self._guard():
                self._migrate(conn)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        with self._guard():
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode != "wal":
                    raise StoreUnavailable(
                        f"store {self.url}: {self.path} cannot use WAL mode (journal mode "
                        f"stays {mode!r}); put it on a local file system"
                    )
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA fullfsync=ON")
                conn.execute("PRAGMA checkpoint_fullfsync=ON")
                conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
                self._check_version(conn.execute("PRAGMA user_version").fetchone()[0])
            except BaseException:
                conn.close()
                raise
        return conn

    def _conn(self) -> sqlite3.Connection:
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

    def _check_version(self, found: int) -> None:
        if found > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"store {self.url}: {self.path} was written by a newer skillfs (schema version "
                f"{found}; this skillfs reads up to {SCHEMA_VERSION}): upgrade skillfs to use it"
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Apply the missing migrations in one write transaction; racing openers queue on it."""
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(found)
            for version in range(found + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite's locked, I/O, read-only and corruption errors as StoreUnavailable naming
        the file; integrity and programming errors stay what they are (bugs)."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise self._unavailable(exc) from exc
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:
                raise
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"store {self.url} is unavailable: {self.path}: {exc}; {_HINT}")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so a
        transaction never fails half-way on a lock upgrade; rolled back on any error."""
        conn = self._conn()
        with self._guard():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: its statements see one snapshot of the file."""
        conn = self._conn()
        with self._guard():
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    # ------------------------------------------------------------------ physical keys

    def _blob(self, sha: str) -> str:
        return f"{self.prefix}blobs/{sha}"

    def _scope(self, scope: Scope) -> str:
        return f"{self.prefix}{scope.prefix}"

    def _domain(self, domain: str) -> str:
        return f"{self.prefix}{domain}"

    def _range(self, start: str) -> tuple[str, str]:
        """Bounds of the keys that start with `start` (UTF-8 order is code point order)."""
        return start, start[:-1] + chr(ord(start[-1]) + 1)

    # ------------------------------------------------------------------ blobs

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        keys = {self._blob(s): s for s in shas}
        found: set[str] = set()
        with self._write() as conn:
            for batch in _batches(list(keys)):
                marks = _marks(batch)
                found.update(
                    keys[k]
                    for (k,) in conn.execute(f"SELECT key FROM blobs WHERE key IN ({marks})", batch)
                )
                conn.execute(
                    f"UPDATE blobs SET last_use = max(last_use, ?) WHERE key IN ({marks})",
                    [now, *batch],
                )
        return found

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float) -> None:
        key = self._blob(sha)
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO blob_chunks (key, idx, data) VALUES (?, ?, ?)",
                [(key, i, bytes(c)) for i, c in enumerate(chunks)],
            )
            conn.execute(
                "INSERT INTO blobs (key, last_use) VALUES (?, ?) ON CONFLICT (key)"
                " DO UPDATE SET last_use = max(last_use, excluded.last_use)",
                (key, now),
            )

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        out: list[bytes | None] = []
        with self._read() as conn:
            for sha, idx in keys:
                row = conn.execute(
                    "SELECT data FROM blob_chunks WHERE key = ? AND idx = ?", (self._blob(sha), idx)
                ).fetchone()
                out.append(None if row is None else bytes(row[0]))
        return out

    def blob_shas(self) -> Iterator[str]:
        """Pages of keys, each its own short read, so GC's deletes never wait on a cursor."""
        start = self._blob("")
        low, high = self._range(start)
        while True:
            with self._guard():
                page = [
                    k
                    for (k,) in self._conn().execute(
                        "SELECT key FROM blobs WHERE key > ? AND key < ? ORDER BY key LIMIT ?",
                        (low, high, BATCH),
                    )
                ]
            yield from (k[len(start) :] for k in page)
            if len(page) < BATCH:
                return
            low = page[-1]

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        key = self._blob(sha)
        with self._write() as conn:
            gone = conn.execute(
                "DELETE FROM blobs WHERE key = ? AND last_use < ?", (key, cutoff)
            ).rowcount
            if gone:
                conn.execute("DELETE FROM blob_chunks WHERE key = ?", (key,))
        return bool(gone)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        with self._guard():
            rows = (
                self._conn()
                .execute("SELECT skill, body FROM manifests WHERE scope = ?", (self._scope(scope),))
                .fetchall()
            )
        return {skill: Manifest.from_json(body) for skill, body in rows}

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        key = self._scope(scope)
        out: dict[str, Manifest] = {}
        with self._read() as conn:
            for batch in _batches(list(dict.fromkeys(skills))):
                marks = _marks(batch)
                sql = f"SELECT skill, body FROM manifests WHERE scope = ? AND skill IN ({marks})"
                for skill, body in conn.execute(sql, [key, *batch]):
                    out[skill] = Manifest.from_json(body)
        return out

    def commit(self, domain: str, ops: Sequence[CommitOp]) -> Revision:
        dkey = self._domain(domain)
        with self._write() as conn:
            for op in ops:
                row = conn.execute(
                    "SELECT version FROM manifests WHERE scope = ? AND skill = ?",
                    (self._scope(op.scope), op.manifest.skill),
                ).fetchone()
                current = 0 if row is None else int(row[0])
                if current != op.expect:
                    raise VersionMismatch(op.scope, op.manifest.skill, current)
            rev = conn.execute(
                "SELECT epoch, counter, log_size, trimmed FROM revisions WHERE domain = ?", (dkey,)
            ).fetchone()
            epoch, counter, log_size, trimmed = rev or (uuid.uuid4().hex, 0, 0, 0)
            counter += 1
            for pos, op in enumerate(ops):
                m, skey = op.manifest, self._scope(op.scope)
                conn.execute(
                    "INSERT OR REPLACE INTO history (scope, skill, version, body)"
                    " SELECT scope, skill, version, body FROM manifests"
                    " WHERE scope = ? AND skill = ?",
                    (skey, m.skill),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO manifests (scope, skill, version, body)"
                    " VALUES (?, ?, ?, ?)",
                    (skey, m.skill, m.version, m.model_dump_json()),
                )
                conn.execute(
                    "INSERT OR IGNORE INTO scopes (domain, key, scope) VALUES (?, ?, ?)",
                    (dkey, skey, str(op.scope)),
                )
                conn.execute(
                    "INSERT INTO changes (domain, counter, pos, op, scope, skill, version)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        dkey,
                        counter,
                        pos,
                        "remove" if m.deleted else "put",
                        str(op.scope),
                        m.skill,
                        m.version,
                    ),
                )
            log_size += len(ops)
            if log_size > self.log_limit:
                trimmed = self._trim(conn, dkey, log_size - self.log_limit)
                log_size = self.log_limit
            conn.execute(
                "INSERT OR REPLACE INTO revisions (domain, epoch, counter, log_size, trimmed)"
                " VALUES (?, ?, ?, ?, ?)",
                (dkey, epoch, counter, log_size, trimmed),
            )
        with self._committed:
            self._committed.notify_all()
        return Revision(epoch=epoch, counter=counter)

    @staticmethod
    def _trim(conn: sqlite3.Connection, dkey: str, excess: int) -> int:
        """Delete a domain's `excess` oldest log entries; return the newest revision
        that lost an entry (a follower from before it must reload)."""
        counter, pos = conn.execute(
            "SELECT counter, pos FROM changes WHERE domain = ? ORDER BY counter, pos"
            " LIMIT 1 OFFSET ?",
            (dkey, excess - 1),
        ).fetchone()
        conn.execute(
            "DELETE FROM changes WHERE domain = ? AND (counter, pos) <= (?, ?)",
            (dkey, counter, pos),
        )
        return int(counter)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        with self._guard():
            rows = (
                self._conn()
                .execute(
                    "SELECT body FROM history WHERE scope = ? AND skill = ? ORDER BY version DESC",
                    (self._scope(scope), skill),
                )
                .fetchall()
            )
        return [Manifest.from_json(body) for (body,) in rows]

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        key = self._scope(scope)
        with self._write() as conn:
            for batch in _batches(list(versions)):
                marks = _marks(batch)
                conn.execute(
                    f"DELETE FROM history WHERE scope = ? AND skill = ? AND version IN ({marks})",
                    [key, skill, *batch],
                )

    # ------------------------------------------------------------------ revisions, change log

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        out: dict[str, Revision | None] = dict.fromkeys(domains)
        keys = {self._domain(d): d for d in domains}

        def select(conn: sqlite3.Connection, batch: Sequence[str | int]) -> None:
            sql = f"SELECT domain, epoch, counter FROM revisions WHERE domain IN ({_marks(batch)})"
            for key, epoch, counter in conn.execute(sql, batch):
                out[keys[key]] = Revision(epoch=epoch, counter=counter)

        if len(keys) <= BATCH:  # one statement reads one snapshot: no transaction needed
            with self._guard():
                select(self._conn(), list(keys))
        else:
            with self._read() as conn:
                for batch in _batches(list(keys)):
                    select(conn, batch)
        return out

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """Polls `PRAGMA data_version`, which moves when any other connection (another
        thread or process) commits; commits of this engine wake the wait at once."""
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            seen = self._data_version()
            found = self._after(domain, since)
            if found:
                return found
            while self._data_version() == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                with self._committed:
                    self._committed.wait(min(delay, left))
                delay = min(delay * 2, POLL)

    def _data_version(self) -> int:
        with self._guard():
            version: int = self._conn().execute("PRAGMA data_version").fetchone()[0]
        return version

    def _after(self, domain: str, since: Revision) -> list[Change]:
        dkey = self._domain(domain)
        with self._read() as conn:
            row = conn.execute(
                "SELECT epoch, counter, trimmed FROM revisions WHERE domain = ?", (dkey,)
            ).fetchone()
            if row is None:
                return [] if since.epoch == "" else [Change(revision=EMPTY, op="reset")]
            epoch, counter, trimmed = row
            rev = Revision(epoch=epoch, counter=counter)
            if epoch == since.epoch and counter == since.counter:
                return []
            if epoch != since.epoch or counter < since.counter or trimmed > since.counter:
                return [Change(revision=rev, op="reset")]
            rows = conn.execute(
                "SELECT counter, op, scope, skill, version FROM changes"
                " WHERE domain = ? AND counter > ? ORDER BY counter, pos",
                (dkey, since.counter),
            ).fetchall()
        scopes = {s: Scope.parse(s) for s in {row[2] for row in rows}}
        return [
            Change(
                revision=Revision(epoch=epoch, counter=c),
                op=op,
                scope=scopes[s],
                skill=skill,
                version=version,
            )
            for c, op, s, skill, version in rows
        ]

    # ------------------------------------------------------------------ listings

    def domains(self) -> list[str]:
        with self._guard():
            if self.prefix:
                low, high = self._range(self.prefix)
                rows = (
                    self._conn()
                    .execute(
                        "SELECT domain FROM revisions WHERE domain >= ? AND domain < ?", (low, high)
                    )
                    .fetchall()
                )
            else:
                rows = self._conn().execute("SELECT domain FROM revisions").fetchall()
        names = (d[len(self.prefix) :] for (d,) in rows)
        return sorted(d for d in names if _DOMAIN.fullmatch(d))

    def scopes(self, domain: str) -> list[Scope]:
        with self._guard():
            rows = (
                self._conn()
                .execute("SELECT scope FROM scopes WHERE domain = ?", (self._domain(domain),))
                .fetchall()
            )
        return sorted((Scope.parse(s) for (s,) in rows), key=str)

    # ------------------------------------------------------------------ usage counters

    def add_usage(self, agent: str, counts: Mapping[tuple[str, str], int]) -> None:
        key = self._domain(f"agents/{agent}")
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO usage (agent, user, skill, count) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (agent, user, skill) DO UPDATE SET count = count + excluded.count",
                [(key, user, skill, n) for (user, skill), n in counts.items()],
            )

    def usage(self, agent: str) -> dict[tuple[str, str], int]:
        with self._guard():
            rows = (
                self._conn()
                .execute(
                    "SELECT user, skill, count FROM usage WHERE agent = ?",
                    (self._domain(f"agents/{agent}"),),
                )
                .fetchall()
            )
        return {(user, skill): n for user, skill, n in rows}

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        with self._guard():
            self._conn().execute("SELECT count(*) FROM revisions").fetchone()

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


def _batches(items: list[str] | list[int]) -> Iterator[list[str] | list[int]]:
    for i in range(0, len(items), BATCH):
        yield items[i : i + BATCH]


def _marks(batch: Sequence[object]) -> str:
    return ", ".join("?" * len(batch))
