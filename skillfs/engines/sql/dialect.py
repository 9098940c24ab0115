"""What an SQL engine's dialect provides to the shared core (`skillfs.engines.sql.engine`):
connections and their transactions, the spelling of the few expressions that differ, and
what a commit tells the database's listeners. Statements are written once, with `?`
placeholders; a dialect whose driver takes another style translates them."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from skillfs.engines.sql.schema import Types
from skillfs.model import Revision


class Cursor(Protocol):
    """The rows of one statement (sqlite3's and psycopg's cursors both are). No row count:
    a dialect that sends writes ahead (PostgreSQL's pipeline) knows it only later."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Tx(Protocol):
    """Statements inside one transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> Any: ...


class Dialect(ABC):
    """One database product's connections and spelling."""

    types: Types
    #: An expression of a `manifests` row: true when its body is a tombstone.
    deleted: str
    #: An expression of a `revisions` row: the epoch a reader is told (the stored random
    #: value, with what identifies the database's history where the dialect has it).
    epoch: str = "epoch"
    #: Appended to a SELECT whose rows the transaction must hold until it ends (where
    #: transactions do not already run one at a time).
    lock: str = ""

    @abstractmethod
    def write(self) -> AbstractContextManager[Tx]:
        """A read-write transaction, committed on success and rolled back on any error;
        the dialect's errors become skillfs's (StoreUnavailable, StoreFailed, …)."""

    @abstractmethod
    def read(self) -> AbstractContextManager[Tx]:
        """A read-only transaction whose statements see one snapshot."""

    @abstractmethod
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of one statement, which sees one snapshot without a transaction."""

    def now(self, tx: Tx) -> float:
        """The clock that decides when leases run out (seconds since the epoch): the
        host's here; a server database's own where there is one."""
        return time.time()

    def committed(self, tx: Tx, domain: str, revision: Revision) -> None:  # noqa: B027
        """Called inside a commit's transaction, last: tell the database's listeners that
        `domain` moved to `revision` (nothing where nobody listens)."""

    @abstractmethod
    def ping(self) -> None:
        """Raise StoreUnavailable unless the database answers."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
