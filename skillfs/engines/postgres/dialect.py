"""The PostgreSQL dialect of the SQL core (docs/engine-postgres.md): a psycopg connection
pool, its transactions, the schema `skillfs` brought up to date on first use (versioned in
`skillfs_schema`), the epoch's cluster identity, NOTIFY at commit, and psycopg's errors as
skillfs's.

Every pooled connection is told, once, where the tables are (`search_path`) and which
history of the database it talks to (`skillfs.cluster`: the cluster's `system_identifier`
and the current timeline): a reader's epoch is the domain's random value followed by it, so
a restore to a point in time or a promoted replica (a new timeline, or a new cluster) makes
every follower reload."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pe

from skillfs.engines.base import unavailable_error
from skillfs.engines.postgres.url import PostgresUrl
from skillfs.engines.sql.dialect import Cursor, Dialect, Tx
from skillfs.engines.sql.schema import SCHEMA_VERSION, Types, upgrade
from skillfs.errors import InvalidArgument, PermissionDenied, StoreFailed, StoreUnavailable
from skillfs.model import Revision

#: The PostgreSQL schema holding skillfs's tables.
SCHEMA = "skillfs"
#: The advisory lock that openers of a database take to bring its schema up to date.
MIGRATION_LOCK = 0x736B696C6C6673  # "skillfs"
#: Seconds a call waits for a free connection of the pool before StoreUnavailable.
POOL_WAIT = 5.0
#: Says which history of the database a connection talks to: `<system_identifier>.<timeline>`.
#: (The timeline is the first 8 hex digits of the current WAL file's name.)
CLUSTER = (
    "SELECT set_config('search_path', %s, false), set_config('skillfs.cluster',"
    " to_hex(system_identifier) || '.' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8),"
    " false) FROM pg_control_system()"
)


@functools.lru_cache(maxsize=1024)
def _pg(sql: str) -> str:
    """The core's `?` placeholders in psycopg's style."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Tx:
    """The core's statements on one psycopg connection, rows in binary: a chunk's bytes
    arrive as they are (text would send each byte as two hex digits, 5x slower to read)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor:
        return self.conn.execute(_pg(sql), params, binary=True)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> Any:
        cursor = self.conn.cursor(binary=True)
        cursor.executemany(_pg(sql), rows)
        return cursor


class PostgresDialect(Dialect):
    """One database through a pool of `url.pool_size` connections (made anew after fork())."""

    types = Types(
        text='text COLLATE "C"', blob="bytea", real="double precision", integer="bigint", keyed=""
    )
    deleted = "coalesce((body::json ->> 'deleted')::boolean, false)"
    epoch = "epoch || '.' || current_setting('skillfs.cluster')"
    lock = " FOR UPDATE"

    def __init__(self, url: PostgresUrl) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._pid = 0
        self._pool_of_pid: psycopg_pool.ConnectionPool[Any] | None = None
        with self.guard(), self.connect() as conn:
            self._migrate(conn)
        self._pool()

    # ------------------------------------------------------------------ connections

    def connect(self) -> psycopg.Connection[Any]:
        """A connection of its own (the pool's first check, the listener), configured."""
        conn = psycopg.connect(self.url.conninfo, autocommit=True)
        try:
            self._configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(CLUSTER, (SCHEMA,))

    def _pool(self) -> psycopg_pool.ConnectionPool[Any]:
        pool = self._pool_of_pid
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:  # first use, or a forked child: the parent's sockets are not ours
            if self._pool_of_pid is None or self._pid != os.getpid():
                self._pool_of_pid = psycopg_pool.ConnectionPool(
                    self.url.conninfo,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self.url.pool_size,
                    configure=self._configure,
                    timeout=POOL_WAIT,
                    name=f"skillfs {self.url.redacted}",
                    open=True,
                )
                self._pid = os.getpid()
            return self._pool_of_pid

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create or upgrade the schema in one transaction under an advisory lock, which
        racing openers queue on; a database already current costs one read."""
        if self._version(conn) == SCHEMA_VERSION:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            found = self._version(conn)
            if found is None:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.skillfs_schema"
                    " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
            found = found or 0
            where = f"store {self.url.redacted}: the database"
            upgrade(self.types, found, where, conn.execute)
            for version in range(found + 1, SCHEMA_VERSION + 1):
                conn.execute(
                    f"INSERT INTO {SCHEMA}.skillfs_schema (version) VALUES (%s)", (version,)
                )

    @staticmethod
    def _version(conn: psycopg.Connection[Any]) -> int | None:
        """The schema's version; None before the schema exists."""
        row = conn.execute(  # the catalog as of this statement: an opener that waited for
            # the lock sees the table another one just made
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables"
            " WHERE schemaname = %s AND tablename = 'skillfs_schema')",
            (SCHEMA,),
        ).fetchone()
        if not row or not row[0]:
            return None
        found = conn.execute(f"SELECT max(version) FROM {SCHEMA}.skillfs_schema").fetchone()
        return int(found[0] or 0) if found else 0

    # ------------------------------------------------------------------ the core's calls

    @contextlib.contextmanager
    def write(self) -> Iterator[Tx]:
        """In pipeline mode: statements whose rows are not read yet go out together, so a
        commit costs a round trip per read it makes and one for all its writes."""
        with (
            self.guard(),
            self._pool().connection() as conn,
            conn.pipeline(),
            conn.transaction(),
        ):
            yield _Tx(conn)

    @contextlib.contextmanager
    def read(self) -> Iterator[Tx]:
        """In pipeline mode too: BEGIN goes out with the first statement, COMMIT with the
        last, so a read of one statement costs one round trip."""
        with self.guard(), self._pool().connection() as conn, conn.pipeline():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                yield _Tx(conn)
            except BaseException:
                with contextlib.suppress(psycopg.Error):  # a broken connection: dropped
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self.guard(), self._pool().connection() as conn:
            rows: list[Any] = _Tx(conn).execute(sql, params).fetchall()
            return rows

    def now(self, tx: Tx) -> float:
        """The database server's clock: every host sharing it agrees on a lease's end."""
        return float(tx.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])

    def committed(self, tx: Tx, domain: str, revision: Revision) -> None:
        """NOTIFY the store's channel inside the commit: delivered when, and only if, the
        commit is (docs/engine-postgres.md, "Notifications")."""
        tx.execute("SELECT pg_notify(?, ?)", (self.url.channel, f"{domain} {revision.counter}"))

    def ping(self) -> None:
        self.query("SELECT 1")

    def close(self) -> None:
        with self._lock:
            pool, self._pool_of_pid = self._pool_of_pid, None
        if pool is not None and self._pid == os.getpid():
            pool.close()

    # ------------------------------------------------------------------ errors

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """psycopg's errors as skillfs's, naming the store (password masked): what waiting
        fixes (a connection lost, a deadlock, a failover) as StoreUnavailable, which the
        store retries; refused credentials and rights as PermissionDenied; what someone must
        fix first as StoreFailed. Programming errors stay what they are (bugs)."""
        try:
            yield
        except psycopg_pool.PoolTimeout as exc:
            raise self._unavailable(exc) from exc
        except (pe.InsufficientPrivilege, pe.InvalidAuthorizationSpecification) as exc:
            raise PermissionDenied(
                f"store {self.url.redacted} refused this user ({exc}); check the user and "
                "password in the URL, and that the user owns the database or may create in it"
            ) from None
        except (pe.InvalidCatalogName, pe.DiskFull, pe.ObjectNotInPrerequisiteState) as exc:
            raise StoreFailed(f"store {self.url.redacted}: {_failed(exc)}") from None
        except psycopg.ProgrammingError as exc:
            if exc.sqlstate is not None:
                raise
            raise InvalidArgument(
                f"store URL {self.url.redacted}: libpq refused it ({exc})"
            ) from None
        except (psycopg.OperationalError, psycopg.InterfaceError, pe.ReadOnlySqlTransaction) as exc:
            refused = _refused(exc)
            if refused is not None:
                kind, advice = refused
                said = str(exc).strip().replace("\n", " ")
                raise kind(f"store {self.url.redacted}: {said}; {advice}") from None
            pool = self._pool_of_pid
            state = getattr(exc, "sqlstate", None)
            lost = state is None or state.startswith(("08", "57"))
            if lost and pool is not None and self._pid == os.getpid():
                pool.check()  # drop the pool's other dead connections before the retry
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return unavailable_error(self.url.redacted, exc)


#: What libpq says (it gives no SQLSTATE) when it cannot connect for a reason that waiting
#: does not fix, and what that is.
_CHECK_USER = "the server refused this user: check the user and password in the URL"
_CONNECT_REFUSED: dict[str, tuple[type[PermissionDenied | StoreFailed], str]] = {
    "authentication failed": (PermissionDenied, _CHECK_USER),
    "no pg_hba.conf entry": (PermissionDenied, f"{_CHECK_USER} and the server's pg_hba.conf"),
    "does not exist": (
        StoreFailed,
        "create the database (createdb NAME) and its user, or fix their names in the URL",
    ),
}


def _refused(exc: BaseException) -> tuple[type[PermissionDenied | StoreFailed], str] | None:
    """What a connection was refused for that waiting does not fix, and what to do, by
    libpq's text."""
    if getattr(exc, "sqlstate", None) is not None:
        return None
    text = str(exc)
    return next((kind for said, kind in _CONNECT_REFUSED.items() if said in text), None)


def _failed(exc: psycopg.Error) -> str:
    """What an error that waiting does not fix means, and what to do."""
    if isinstance(exc, pe.InvalidCatalogName):
        return f"{exc}: create the database (createdb NAME) or fix its name in the URL"
    if isinstance(exc, pe.DiskFull):
        return f"the database's disk is full ({exc}): free space, then retry"
    return (
        f"the server is in recovery (a standby) and cannot take writes ({exc}): point the URL "
        "at the primary"
    )
