"""The tables of every SQL engine, written once: the few type names the dialects spell
differently come from `Types`, and `MIGRATIONS[N]` brings a database at version N-1 to N
(docs/engine-sqlite.md and docs/engine-postgres.md, "Schema"). Each dialect records the
version its own way (SQLite's `PRAGMA user_version`, PostgreSQL's `skillfs_schema` table)
and runs `upgrade` inside one transaction that racing openers queue on."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from skillfs.errors import StoreFailed


class Types(NamedTuple):
    """How a dialect spells the column types and table options of the schema."""

    #: Keys, compared and ranged by code point (`prefix` scans rely on it).
    text: str
    blob: str
    real: str
    integer: str
    #: Appended to tables whose rows are found by their primary key alone.
    keyed: str


#: The schema this code writes.
SCHEMA_VERSION = 5


def migrations(t: Types) -> dict[int, tuple[str, ...]]:
    """The statements of each version, in the dialect's types. Column `user` is quoted:
    PostgreSQL reserves the word."""
    return {
        1: (
            f"CREATE TABLE blobs (key {t.text} PRIMARY KEY, last_use {t.real} NOT NULL)",
            f"CREATE TABLE blob_chunks (key {t.text} NOT NULL, idx {t.integer} NOT NULL,"
            f" data {t.blob} NOT NULL, PRIMARY KEY (key, idx))",
            f"CREATE TABLE manifests (scope {t.text} NOT NULL, skill {t.text} NOT NULL,"
            f" version {t.integer} NOT NULL, body {t.text} NOT NULL, PRIMARY KEY (scope, skill))",
            f"CREATE TABLE history (scope {t.text} NOT NULL, skill {t.text} NOT NULL,"
            f" version {t.integer} NOT NULL, body {t.text} NOT NULL,"
            " PRIMARY KEY (scope, skill, version))",
            f"CREATE TABLE revisions (domain {t.text} PRIMARY KEY, epoch {t.text} NOT NULL,"
            f" counter {t.integer} NOT NULL, log_size {t.integer} NOT NULL,"
            f" trimmed {t.integer} NOT NULL)",
            f"CREATE TABLE changes (domain {t.text} NOT NULL, counter {t.integer} NOT NULL,"
            f" pos {t.integer} NOT NULL, op {t.text} NOT NULL, scope {t.text} NOT NULL,"
            f" skill {t.text} NOT NULL, version {t.integer} NOT NULL,"
            f" PRIMARY KEY (domain, counter, pos)){t.keyed}",
            f"CREATE TABLE scopes (domain {t.text} NOT NULL, key {t.text} NOT NULL,"
            f" scope {t.text} NOT NULL, PRIMARY KEY (domain, key)){t.keyed}",
            f'CREATE TABLE usage (agent {t.text} NOT NULL, "user" {t.text} NOT NULL,'
            f" skill {t.text} NOT NULL, count {t.integer} NOT NULL,"
            f' PRIMARY KEY (agent, "user", skill)){t.keyed}',
        ),
        2: (  # who made each change and why (docs/governance.md)
            f"ALTER TABLE changes ADD COLUMN actor {t.text} NOT NULL DEFAULT ''",
            f"ALTER TABLE changes ADD COLUMN message {t.text} NOT NULL DEFAULT ''",
        ),
        3: (  # when each (user, skill) was last used; 0: before this was recorded
            f"ALTER TABLE usage ADD COLUMN last_used {t.real} NOT NULL DEFAULT 0",
        ),
        4: (  # one holder per lease (docs/governance.md, "Curation")
            f"CREATE TABLE leases (key {t.text} PRIMARY KEY, holder {t.text} NOT NULL,"
            f" expires {t.real} NOT NULL){t.keyed}",
        ),
        5: (  # bytes each scope and token of a domain holds (docs/security.md, "Quotas")
            f"CREATE TABLE quota (domain {t.text} NOT NULL, key {t.text} NOT NULL,"
            f" used {t.integer} NOT NULL, PRIMARY KEY (domain, key)){t.keyed}",
        ),
    }


def check_version(found: int, where: str) -> None:
    """Refuse a database a newer skillfs wrote (`where` names it)."""
    if found > SCHEMA_VERSION:
        raise StoreFailed(
            f"{where} was written by a newer skillfs (schema version {found}; this skillfs "
            f"reads up to {SCHEMA_VERSION}): upgrade skillfs to use it"
        )


def upgrade(types: Types, found: int, where: str, execute: Callable[[str], object]) -> None:
    """Run the migrations after version `found`, in order, through `execute`."""
    check_version(found, where)
    steps = migrations(types)
    for version in range(found + 1, SCHEMA_VERSION + 1):
        for statement in steps[version]:
            execute(statement)
