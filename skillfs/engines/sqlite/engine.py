"""`sqlite:///path`: the embedded default engine, one SQLite file in WAL mode.

Several processes on one host share the file through SQLite's own locking; each thread
uses its own connection. Every commit is one `BEGIN IMMEDIATE` transaction, durable on
return (`synchronous=FULL`). The layout is in docs/engine-sqlite.md.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from skillfs.engines.base import (
    LOG_LIMIT,
    Charge,
    Check,
    CommitOp,
    Engine,
    UrlOptions,
    charged,
    check_current,
    check_unchanged,
    must_reset,
    reset_to,
)
from skillfs.engines.sqlite import lease as sqlite_lease
from skillfs.engines.sqlite.file import SqliteFile
from skillfs.errors import InvalidArgument, InvalidPath, StoreFailed
from skillfs.model import USAGE_MAX, Change, Manifest, Revision, Scope, UsageStat, saturated
from skillfs.model.names import check_domain

#: The schema this code writes; `PRAGMA user_version` of the file.
SCHEMA_VERSION = 5
#: Seconds a statement waits for another writer's lock before StoreUnavailable.
TIMEOUT = 5.0
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
    2: (  # who made each change and why (docs/governance.md)
        "ALTER TABLE changes ADD COLUMN actor TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE changes ADD COLUMN message TEXT NOT NULL DEFAULT ''",
    ),
    3: (  # when each (user, skill) was last used; 0: before this was recorded
        "ALTER TABLE usage ADD COLUMN last_used REAL NOT NULL DEFAULT 0",
    ),
    4: (sqlite_lease.CREATE,),  # one holder per lease (docs/governance.md, "Curation")
    5: (  # bytes each scope and token of a domain holds (docs/security.md, "Quotas")
        "CREATE TABLE quota (domain TEXT NOT NULL, key TEXT NOT NULL, used INTEGER NOT NULL,"
        " PRIMARY KEY (domain, key)) WITHOUT ROWID",
    ),
}


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


def _is_domain(name: str) -> bool:
    """Rows of other prefixes share the table (`t/agents/a` read without a prefix): skip them."""
    try:
        check_domain(name)
    except InvalidArgument:
        return False
    return True


class SqliteEngine(sqlite_lease.SqliteLeases, Engine):
    """One SQLite file; safe for many threads and several processes on one host."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        if sqlite3.sqlite_version_info < (3, 24, 0):
            raise StoreFailed(
                f"store {self.url}: SQLite {sqlite3.sqlite_version} is too old (skillfs needs "
                "3.24 or newer for UPSERT): use a Python linked against a newer SQLite"
            )
        options = UrlOptions(url, ("prefix", "timeout", "log_limit"))
        self.log_limit = options.number("log_limit", int, LOG_LIMIT)
        self.prefix = options.get("prefix")
        self.path = parse_path(url)
        timeout = options.number("timeout", float, TIMEOUT)
        self._db = SqliteFile(self.url, self.path, timeout, SCHEMA_VERSION, MIGRATIONS)
        self._committed = threading.Condition()
        self._wakes = 0  # `wake_waits` calls: a wait that sees it move answers

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
        with self._db.write() as conn:
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
        with self._db.write() as conn:
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
        with self._db.read() as conn:
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
            page = [
                k
                for (k,) in self._db.query(
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
        with self._db.write() as conn:
            gone = conn.execute(
                "DELETE FROM blobs WHERE key = ? AND last_use < ?", (key, cutoff)
            ).rowcount
            if gone:
                conn.execute("DELETE FROM blob_chunks WHERE key = ?", (key,))
        return bool(gone)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        rows = self._db.query(
            "SELECT skill, body FROM manifests WHERE scope = ?", (self._scope(scope),)
        )
        return {skill: Manifest.from_json(body) for skill, body in rows}

    def entry_names(self, scope: Scope) -> list[str]:
        rows = self._db.query("SELECT skill FROM manifests WHERE scope = ?", (self._scope(scope),))
        return [skill for (skill,) in rows]

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        key = self._scope(scope)
        out: dict[str, Manifest] = {}
        with self._db.read() as conn:
            for batch in _batches(list(dict.fromkeys(skills))):
                marks = _marks(batch)
                sql = f"SELECT skill, body FROM manifests WHERE scope = ? AND skill IN ({marks})"
                for skill, body in conn.execute(sql, [key, *batch]):
                    out[skill] = Manifest.from_json(body)
        return out

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        dkey = self._domain(domain)
        with self._db.write() as conn:
            for op in ops:
                row = conn.execute(
                    "SELECT version, json_extract(body, '$.deleted') FROM manifests"
                    " WHERE scope = ? AND skill = ?",
                    (self._scope(op.scope), op.manifest.skill),
                ).fetchone()
                check_current(op, 0 if row is None else int(row[0]), row is not None and not row[1])
            for c in checks:
                row = conn.execute(
                    "SELECT version FROM manifests WHERE scope = ? AND skill = ?",
                    (self._scope(c.scope), c.skill),
                ).fetchone()
                check_unchanged(c, 0 if row is None else int(row[0]))
            counted = [(dkey, c.key, charged(domain, c, self._used(conn, dkey, c.key)))
                       for c in charges]  # fmt: skip
            conn.executemany(
                "INSERT OR REPLACE INTO quota (domain, key, used) VALUES (?, ?, ?)", counted
            )
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
                    "INSERT INTO changes (domain, counter, pos, op, scope, skill, version,"
                    " actor, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        dkey,
                        counter,
                        pos,
                        "remove" if m.deleted else "put",
                        str(op.scope),
                        m.skill,
                        m.version,
                        m.actor,
                        m.message,
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
    def _used(conn: sqlite3.Connection, dkey: str, key: str) -> int:
        row = conn.execute(
            "SELECT used FROM quota WHERE domain = ? AND key = ?", (dkey, key)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def quota_used(self, domain: str) -> dict[str, int]:
        rows = self._db.query(
            "SELECT key, used FROM quota WHERE domain = ?", (self._domain(domain),)
        )
        return {key: int(used) for key, used in rows}

    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        dkey = self._domain(domain)
        with self._db.write() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO quota (domain, key, used) VALUES (?, ?, 0)",
                [(dkey, key) for key in deltas],
            )
            conn.executemany(
                "UPDATE quota SET used = max(0, used + ?) WHERE domain = ? AND key = ?",
                [(n, dkey, key) for key, n in deltas.items()],
            )

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
        rows = self._db.query(
            "SELECT body FROM history WHERE scope = ? AND skill = ? ORDER BY version DESC",
            (self._scope(scope), skill),
        )
        return [Manifest.from_json(body) for (body,) in rows]

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        """One query over the scope's history (GC reads whole scopes)."""
        wanted = set(skills)
        out: dict[str, list[Manifest]] = {}
        rows = self._db.query(
            "SELECT skill, body FROM history WHERE scope = ? ORDER BY skill, version DESC",
            (self._scope(scope),),
        )
        for skill, body in rows:
            if skill in wanted:
                out.setdefault(skill, []).append(Manifest.from_json(body))
        return out

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        key = self._scope(scope)
        with self._db.write() as conn:
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
            with self._db.guard():
                select(self._db.conn(), list(keys))
        else:
            with self._db.read() as conn:
                for batch in _batches(list(keys)):
                    select(conn, batch)
        return out

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        return self.changes_many({domain: since}, timeout).get(domain, [])

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
            found = {d: c for d, r in since.items() if (c := self._after(d, r))}
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

    def _after(self, domain: str, since: Revision) -> list[Change]:
        dkey = self._domain(domain)
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT epoch, counter, trimmed FROM revisions WHERE domain = ?", (dkey,)
            ).fetchone()
            epoch, counter, trimmed = row or ("", 0, 0)
            rev = None if row is None else Revision(epoch=epoch, counter=counter)
            if must_reset(rev, since, trimmed):
                return reset_to(rev)
            if row is None or (epoch == since.epoch and counter == since.counter):
                return []
            rows = conn.execute(
                "SELECT counter, op, scope, skill, version, actor, message FROM changes"
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
                actor=actor,
                message=message,
            )
            for c, op, s, skill, version, actor, message in rows
        ]

    # ------------------------------------------------------------------ listings

    def domains(self) -> list[str]:
        if self.prefix:
            low, high = self._range(self.prefix)
            sql = "SELECT domain FROM revisions WHERE domain >= ? AND domain < ?"
            rows = self._db.query(sql, (low, high))
        else:
            rows = self._db.query("SELECT domain FROM revisions")
        names = (d[len(self.prefix) :] for (d,) in rows)
        return sorted(d for d in names if _is_domain(d))

    def scopes(self, domain: str) -> list[Scope]:
        rows = self._db.query("SELECT scope FROM scopes WHERE domain = ?", (self._domain(domain),))
        return sorted((Scope.parse(s) for (s,) in rows), key=str)

    # ------------------------------------------------------------------ usage counters

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        key = self._domain(f"agents/{agent}")
        times, caps = last_used or {}, (USAGE_MAX, USAGE_MAX)
        with self._db.write() as conn:
            conn.executemany(
                "INSERT INTO usage (agent, user, skill, count, last_used) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (agent, user, skill) DO UPDATE SET count = CASE"
                " WHEN count > ? - excluded.count THEN ? ELSE count + excluded.count END,"
                " last_used = max(last_used, excluded.last_used)",
                [
                    (key, user, skill, saturated(n), times.get((user, skill), 0.0), *caps)
                    for (user, skill), n in counts.items()
                ],
            )

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        rows = self._db.query(
            "SELECT user, skill, count, last_used FROM usage WHERE agent = ?",
            (self._domain(f"agents/{agent}"),),
        )
        return {(user, skill): UsageStat(n, float(t)) for user, skill, n, t in rows}

    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        key = self._domain(f"agents/{agent}")
        with self._db.write() as conn:
            conn.executemany(
                "DELETE FROM usage WHERE agent = ? AND user = ? AND skill = ?",
                [(key, user, skill) for user, skill in keys],
            )

    def usage_agents(self) -> list[str]:
        start, end = self._range(self._domain("agents/"))
        rows = self._db.query(
            "SELECT DISTINCT agent FROM usage WHERE agent >= ? AND agent < ?", (start, end)
        )
        return sorted(agent[len(start) :] for (agent,) in rows)

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        self._db.query("SELECT count(*) FROM revisions")

    def close(self) -> None:
        """Close this thread's connection (see `SqliteFile.close`)."""
        self._db.close()


def _batches(items: list[str] | list[int]) -> Iterator[list[str] | list[int]]:
    for i in range(0, len(items), BATCH):
        yield items[i : i + BATCH]


def _marks(batch: Sequence[object]) -> str:
    return ", ".join("?" * len(batch))
