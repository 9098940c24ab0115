"""The SQLite engine's leases (docs/engine-sqlite.md, "Leases"): a row per lease in `leases`
(its key, holder and expiry on the host's clock), read and written in one `BEGIN IMMEDIATE`
transaction, so the processes sharing the file agree on one holder."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from skillfs.engines.base import check_lease

if TYPE_CHECKING:
    from skillfs.engines.sqlite.file import SqliteFile

#: Migration 4 of the file (skillfs/engines/sqlite/engine.py): the leases table.
CREATE = (
    "CREATE TABLE leases (key TEXT PRIMARY KEY, holder TEXT NOT NULL, expires REAL NOT NULL)"
    " WITHOUT ROWID"
)


class SqliteLeases:
    """`acquire_lease`, `renew_lease` and `release_lease` of `SqliteEngine`."""

    if TYPE_CHECKING:
        _db: SqliteFile
        prefix: str

    def _lease_key(self, name: str) -> str:
        return f"{self.prefix}leases/{name}"

    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        key = self._lease_key(name)
        with self._db.write() as conn:
            now = time.time()
            row = conn.execute("SELECT expires FROM leases WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] > now:
                return False
            conn.execute(
                "INSERT INTO leases (key, holder, expires) VALUES (?, ?, ?) ON CONFLICT (key)"
                " DO UPDATE SET holder = excluded.holder, expires = excluded.expires",
                (key, holder, now + ms / 1000),
            )
            return True

    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        with self._db.write() as conn:
            now = time.time()
            done = conn.execute(
                "UPDATE leases SET expires = ? WHERE key = ? AND holder = ? AND expires > ?",
                (now + ms / 1000, self._lease_key(name), holder, now),
            )
            return done.rowcount == 1

    def release_lease(self, name: str, holder: str) -> bool:
        check_lease(name, holder)
        with self._db.write() as conn:
            done = conn.execute(
                "DELETE FROM leases WHERE key = ? AND holder = ? AND expires > ?",
                (self._lease_key(name), holder, time.time()),
            )
            return done.rowcount == 1
