"""The SQL engines' shared core: every engine primitive written once over a `Dialect`
(SQLite, PostgreSQL; docs/engine-sqlite.md, docs/engine-postgres.md).

A commit is one transaction that first locks its domain's row of `revisions` (SQLite's
`BEGIN IMMEDIATE` already runs writers one at a time; PostgreSQL takes the row with
`FOR UPDATE`), then compares versions, moves the replaced manifests to history, puts the
new ones, appends to the change log and advances the counter of that same row. Revisions
therefore become visible in order: the next commit of a domain cannot read the counter
before the one that raised it has committed (a sequence would hand numbers out before
commit, and a follower that read 11 could miss 10).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from skillfs.engines.base import (
    Charge,
    Check,
    CommitOp,
    Engine,
    charged,
    check_current,
    check_lease,
    check_unchanged,
    must_reset,
    reset_to,
)
from skillfs.engines.sql.dialect import Dialect, Tx
from skillfs.errors import InvalidArgument
from skillfs.model import USAGE_MAX, Change, Manifest, Revision, Scope, UsageStat, saturated
from skillfs.model.names import check_domain

#: Bound parameters per statement, under every dialect's limit.
BATCH = 500


def batches(items: Sequence[str] | Sequence[int], size: int = BATCH) -> Iterator[list[object]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def marks(batch: Sequence[object]) -> str:
    return ", ".join("?" * len(batch))


def _is_domain(name: str) -> bool:
    """Rows of other prefixes share the table (`t/agents/a` read without a prefix): skip them."""
    try:
        check_domain(name)
    except InvalidArgument:
        return False
    return True


class SqlEngine(Engine):
    """The tables of `skillfs.engines.sql.schema` through `dialect`; keys start with
    `prefix` (several deployments share one database)."""

    def __init__(self, url: str, dialect: Dialect, *, prefix: str, log_limit: int) -> None:
        super().__init__(url)
        self.sql = dialect
        self.prefix = prefix
        self.log_limit = log_limit

    # ------------------------------------------------------------------ physical keys

    def _blob(self, sha: str) -> str:
        return f"{self.prefix}blobs/{sha}"

    def _scope(self, scope: Scope) -> str:
        return f"{self.prefix}{scope.prefix}"

    def _domain(self, domain: str) -> str:
        return f"{self.prefix}{domain}"

    @staticmethod
    def _range(start: str) -> tuple[str, str]:
        """Bounds of the keys that start with `start` (compared by code point)."""
        return start, start[:-1] + chr(ord(start[-1]) + 1)

    # ------------------------------------------------------------------ blobs

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        keys = {self._blob(s): s for s in sorted(shas)}
        found: set[str] = set()
        with self.sql.write() as tx:
            for batch in batches(list(keys)):
                found.update(
                    keys[k]
                    for (k,) in tx.execute(
                        f"SELECT key FROM blobs WHERE key IN ({marks(batch)})", batch
                    )
                )
                tx.execute(
                    "UPDATE blobs SET last_use = CASE WHEN last_use < ? THEN ? ELSE last_use END"
                    f" WHERE key IN ({marks(batch)})",
                    [now, now, *batch],
                )
        return found

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float, domain: str = "") -> None:
        """The blob's row first, then its chunks: the order GC deletes them in, so the two
        never wait on each other's rows."""
        key = self._blob(sha)
        with self.sql.write() as tx:
            tx.execute(
                "INSERT INTO blobs (key, last_use) VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
                " SET last_use = CASE WHEN blobs.last_use < excluded.last_use"
                " THEN excluded.last_use ELSE blobs.last_use END",
                (key, now),
            )
            tx.executemany(
                "INSERT INTO blob_chunks (key, idx, data) VALUES (?, ?, ?)"
                " ON CONFLICT (key, idx) DO UPDATE SET data = excluded.data",
                [(key, i, bytes(c)) for i, c in enumerate(chunks)],
            )

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """One statement per batch and no transaction: chunks never change."""
        found: dict[tuple[str, int], bytes] = {}
        pairs = list(dict.fromkeys((self._blob(sha), idx) for sha, idx in keys))
        for i in range(0, len(pairs), BATCH // 2):
            batch = pairs[i : i + BATCH // 2]
            rows = ", ".join("(?, ?)" for _ in batch)
            params = [x for pair in batch for x in pair]
            sql = f"SELECT key, idx, data FROM blob_chunks WHERE (key, idx) IN (VALUES {rows})"
            for key, idx, data in self.sql.query(sql, params):
                found[(key, int(idx))] = bytes(data)
        return [found.get((self._blob(sha), idx)) for sha, idx in keys]

    def blob_shas(self) -> Iterator[str]:
        """Pages of keys, each its own short read, so GC's deletes never wait on a cursor."""
        start = self._blob("")
        low, high = self._range(start)
        while True:
            page = [
                k
                for (k,) in self.sql.query(
                    "SELECT key FROM blobs WHERE key > ? AND key < ? ORDER BY key LIMIT ?",
                    (low, high, BATCH),
                )
            ]
            yield from (k[len(start) :] for k in page)
            if len(page) < BATCH:
                return
            low = page[-1]

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        """The blob's row is read (and held) before anything is deleted: a statement's row
        count is not known yet where the dialect sends writes ahead (PostgreSQL's pipeline)."""
        key = self._blob(sha)
        with self.sql.write() as tx:
            idle = tx.execute(
                f"SELECT key FROM blobs WHERE key = ? AND last_use < ?{self.sql.lock}",
                (key, cutoff),
            ).fetchone()
            if idle is not None:
                tx.execute("DELETE FROM blobs WHERE key = ?", (key,))
                tx.execute("DELETE FROM blob_chunks WHERE key = ?", (key,))
        return idle is not None

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        rows = self.sql.query(
            "SELECT skill, body FROM manifests WHERE scope = ?", (self._scope(scope),)
        )
        return {skill: Manifest.from_json(body) for skill, body in rows}

    def entry_names(self, scope: Scope) -> list[str]:
        rows = self.sql.query("SELECT skill FROM manifests WHERE scope = ?", (self._scope(scope),))
        return [skill for (skill,) in rows]

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        key = self._scope(scope)
        out: dict[str, Manifest] = {}
        with self.sql.read() as tx:
            for batch in batches(list(dict.fromkeys(skills))):
                sql = "SELECT skill, body FROM manifests WHERE scope = ? AND skill IN "
                for skill, body in tx.execute(f"{sql}({marks(batch)})", [key, *batch]):
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
        with self.sql.write() as tx:
            tx.execute(
                "INSERT INTO revisions (domain, epoch, counter, log_size, trimmed)"
                " VALUES (?, ?, 0, 0, 0) ON CONFLICT (domain) DO NOTHING",
                (dkey, uuid.uuid4().hex),
            )
            epoch, counter, log_size, trimmed = tx.execute(
                f"SELECT {self.sql.epoch}, counter, log_size, trimmed FROM revisions"
                f" WHERE domain = ?{self.sql.lock}",
                (dkey,),
            ).fetchone()
            self._compare(tx, ops, checks)
            for c in charges:
                used = self._held_counter(tx, dkey, c.key)
                tx.execute(
                    "UPDATE quota SET used = ? WHERE domain = ? AND key = ?",
                    (charged(domain, c, used), dkey, c.key),
                )
            counter += 1
            for pos, op in enumerate(ops):
                self._put(tx, dkey, counter, pos, op)
            log_size += len(ops)
            if log_size > self.log_limit:
                trimmed = self._trim(tx, dkey, log_size - self.log_limit)
                log_size = self.log_limit
            tx.execute(
                "UPDATE revisions SET counter = ?, log_size = ?, trimmed = ? WHERE domain = ?",
                (counter, log_size, trimmed, dkey),
            )
            revision = Revision(epoch=epoch, counter=counter)
            self.sql.committed(tx, domain, revision)
        return revision

    def _compare(self, tx: Tx, ops: Sequence[CommitOp], checks: Sequence[Check]) -> None:
        """Every op and check at the version it expects (else VersionMismatch or NotFound)."""
        for op in ops:
            row = tx.execute(
                f"SELECT version, {self.sql.deleted} FROM manifests WHERE scope = ? AND skill = ?",
                (self._scope(op.scope), op.manifest.skill),
            ).fetchone()
            check_current(op, 0 if row is None else int(row[0]), row is not None and not row[1])
        for c in checks:
            row = tx.execute(
                "SELECT version FROM manifests WHERE scope = ? AND skill = ?",
                (self._scope(c.scope), c.skill),
            ).fetchone()
            check_unchanged(c, 0 if row is None else int(row[0]))

    def _put(self, tx: Tx, dkey: str, counter: int, pos: int, op: CommitOp) -> None:
        """One op of a commit: the replaced manifest to history, the new one live, the scope
        indexed, the change logged."""
        m, skey = op.manifest, self._scope(op.scope)
        tx.execute(
            "INSERT INTO history (scope, skill, version, body)"
            " SELECT scope, skill, version, body FROM manifests WHERE scope = ? AND skill = ?"
            " ON CONFLICT (scope, skill, version) DO UPDATE SET body = excluded.body",
            (skey, m.skill),
        )
        tx.execute(
            "INSERT INTO manifests (scope, skill, version, body) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (scope, skill) DO UPDATE"
            " SET version = excluded.version, body = excluded.body",
            (skey, m.skill, m.version, m.model_dump_json()),
        )
        tx.execute(
            "INSERT INTO scopes (domain, key, scope) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (dkey, skey, str(op.scope)),
        )
        tx.execute(
            "INSERT INTO changes (domain, counter, pos, op, scope, skill, version, actor,"
            " message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (dkey, counter, pos, "remove" if m.deleted else "put", str(op.scope), m.skill,
             m.version, m.actor, m.message),
        )  # fmt: skip

    def _held_counter(self, tx: Tx, dkey: str, key: str) -> int:
        """A quota counter's bytes, its row (made at 0 where there is none) held until the
        transaction ends, so GC's re-count waits rather than being overwritten."""
        tx.execute(
            "INSERT INTO quota (domain, key, used) VALUES (?, ?, 0) ON CONFLICT DO NOTHING",
            (dkey, key),
        )
        row = tx.execute(
            f"SELECT used FROM quota WHERE domain = ? AND key = ?{self.sql.lock}", (dkey, key)
        ).fetchone()
        return int(row[0])

    def quota_used(self, domain: str) -> dict[str, int]:
        rows = self.sql.query(
            "SELECT key, used FROM quota WHERE domain = ?", (self._domain(domain),)
        )
        return {key: int(used) for key, used in rows}

    def charge_quota(self, domain: str, charge: Charge) -> None:
        dkey = self._domain(domain)
        with self.sql.write() as tx:
            used = self._held_counter(tx, dkey, charge.key)
            tx.execute(
                "UPDATE quota SET used = ? WHERE domain = ? AND key = ?",
                (charged(domain, charge, used), dkey, charge.key),
            )

    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        dkey = self._domain(domain)
        with self.sql.write() as tx:
            tx.executemany(
                "INSERT INTO quota (domain, key, used) VALUES (?, ?, 0) ON CONFLICT DO NOTHING",
                [(dkey, key) for key in sorted(deltas)],
            )
            tx.executemany(
                "UPDATE quota SET used = CASE WHEN used + ? < 0 THEN 0 ELSE used + ? END"
                " WHERE domain = ? AND key = ?",
                [(n, n, dkey, key) for key, n in sorted(deltas.items())],
            )

    @staticmethod
    def _trim(tx: Tx, dkey: str, excess: int) -> int:
        """Delete a domain's `excess` oldest log entries; return the newest revision
        that lost an entry (a follower from before it must reload)."""
        counter, pos = tx.execute(
            "SELECT counter, pos FROM changes WHERE domain = ? ORDER BY counter, pos"
            " LIMIT 1 OFFSET ?",
            (dkey, excess - 1),
        ).fetchone()
        tx.execute(
            "DELETE FROM changes WHERE domain = ? AND (counter, pos) <= (?, ?)",
            (dkey, counter, pos),
        )
        return int(counter)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        rows = self.sql.query(
            "SELECT body FROM history WHERE scope = ? AND skill = ? ORDER BY version DESC",
            (self._scope(scope), skill),
        )
        return [Manifest.from_json(body) for (body,) in rows]

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        """One query over the scope's history (GC reads whole scopes)."""
        wanted = set(skills)
        out: dict[str, list[Manifest]] = {}
        rows = self.sql.query(
            "SELECT skill, body FROM history WHERE scope = ? ORDER BY skill, version DESC",
            (self._scope(scope),),
        )
        for skill, body in rows:
            if skill in wanted:
                out.setdefault(skill, []).append(Manifest.from_json(body))
        return out

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        key = self._scope(scope)
        with self.sql.write() as tx:
            for batch in batches(list(versions)):
                tx.execute(
                    "DELETE FROM history WHERE scope = ? AND skill = ?"
                    f" AND version IN ({marks(batch)})",
                    [key, skill, *batch],
                )

    # ------------------------------------------------------------------ revisions, change log

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        out: dict[str, Revision | None] = dict.fromkeys(domains)
        keys = {self._domain(d): d for d in domains}

        def select(rows: Iterable[Any]) -> None:
            for key, epoch, counter in rows:
                out[keys[key]] = Revision(epoch=epoch, counter=counter)

        sql = f"SELECT domain, {self.sql.epoch}, counter FROM revisions WHERE domain IN "
        if len(keys) <= BATCH:  # one statement reads one snapshot: no transaction needed
            select(self.sql.query(f"{sql}({marks(list(keys))})", list(keys)))
        else:
            with self.sql.read() as tx:
                for batch in batches(list(keys)):
                    select(tx.execute(f"{sql}({marks(batch)})", batch))
        return out

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """One look at once; a wait is the dialect engine's `changes_many`."""
        if timeout <= 0:
            return self.look({domain: since}).get(domain, [])
        return self.changes_many({domain: since}, timeout).get(domain, [])

    def look(self, since: Mapping[str, Revision]) -> dict[str, list[Change]]:
        """The changes after `since` of each domain that has some (or a reset), read in one
        snapshot: the log never loses an entry between reading where it was trimmed and
        reading the entries."""
        out: dict[str, list[Change]] = {}
        with self.sql.read() as tx:
            for domain, rev in since.items():
                found = self._after(tx, domain, rev)
                if found:
                    out[domain] = found
        return out

    def _after(self, tx: Tx, domain: str, since: Revision) -> list[Change]:
        dkey = self._domain(domain)
        row = tx.execute(
            f"SELECT {self.sql.epoch}, counter, trimmed FROM revisions WHERE domain = ?", (dkey,)
        ).fetchone()
        epoch, counter, trimmed = row or ("", 0, 0)
        rev = None if row is None else Revision(epoch=epoch, counter=counter)
        if must_reset(rev, since, trimmed):
            return reset_to(rev)
        if row is None or (epoch == since.epoch and counter == since.counter):
            return []
        rows = tx.execute(
            "SELECT counter, op, scope, skill, version, actor, message FROM changes"
            " WHERE domain = ? AND counter > ? ORDER BY counter, pos",
            (dkey, since.counter),
        ).fetchall()
        scopes = {s: Scope.parse(s) for s in {row[2] for row in rows}}
        return [
            Change(
                revision=Revision(epoch=epoch, counter=c), op=op, scope=scopes[s], skill=skill,
                version=version, actor=actor, message=message,
            )
            for c, op, s, skill, version, actor, message in rows
        ]  # fmt: skip

    # ------------------------------------------------------------------ listings

    def domains(self) -> list[str]:
        if self.prefix:
            low, high = self._range(self.prefix)
            sql = "SELECT domain FROM revisions WHERE domain >= ? AND domain < ?"
            rows = self.sql.query(sql, (low, high))
        else:
            rows = self.sql.query("SELECT domain FROM revisions")
        names = (d[len(self.prefix) :] for (d,) in rows)
        return sorted(d for d in names if _is_domain(d))

    def scopes(self, domain: str) -> list[Scope]:
        rows = self.sql.query("SELECT scope FROM scopes WHERE domain = ?", (self._domain(domain),))
        return sorted((Scope.parse(s) for (s,) in rows), key=str)

    # ------------------------------------------------------------------ usage counters

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> set[tuple[str, str]]:
        key = self._domain(f"agents/{agent}")
        times, caps = last_used or {}, (USAGE_MAX, USAGE_MAX)
        wanted = sorted(k for k, n in counts.items() if n)
        with self.sql.write() as tx:
            held: set[tuple[str, str]] = set()
            for i in range(0, len(wanted), BATCH // 2):
                some = wanted[i : i + BATCH // 2]
                rows = ", ".join(["(?, ?)"] * len(some))
                held.update(
                    tx.execute(
                        f'SELECT "user", skill FROM usage WHERE agent = ? AND ("user", skill) IN'
                        f" (VALUES {rows})",
                        [key, *(x for k in some for x in k)],
                    )
                )
            tx.executemany(
                'INSERT INTO usage (agent, "user", skill, count, last_used) VALUES (?, ?, ?, ?, ?)'
                ' ON CONFLICT (agent, "user", skill) DO UPDATE SET count = CASE'
                " WHEN usage.count > ? - excluded.count THEN ?"
                " ELSE usage.count + excluded.count END,"
                " last_used = CASE WHEN usage.last_used < excluded.last_used"
                " THEN excluded.last_used ELSE usage.last_used END",
                [
                    (key, user, skill, saturated(n), times.get((user, skill), 0.0), *caps)
                    for (user, skill), n in sorted(counts.items())
                ],
            )
        return set(wanted) - held

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        rows = self.sql.query(
            'SELECT "user", skill, count, last_used FROM usage WHERE agent = ?',
            (self._domain(f"agents/{agent}"),),
        )
        return {(user, skill): UsageStat(n, float(t)) for user, skill, n, t in rows}

    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        key = self._domain(f"agents/{agent}")
        with self.sql.write() as tx:
            tx.executemany(
                'DELETE FROM usage WHERE agent = ? AND "user" = ? AND skill = ?',
                [(key, user, skill) for user, skill in keys],
            )

    def usage_agents(self) -> list[str]:
        start, end = self._range(self._domain("agents/"))
        rows = self.sql.query(
            "SELECT DISTINCT agent FROM usage WHERE agent >= ? AND agent < ?", (start, end)
        )
        return sorted(agent[len(start) :] for (agent,) in rows)

    # ------------------------------------------------------------------ leases

    def _lease_key(self, name: str) -> str:
        return f"{self.prefix}leases/{name}"

    def _held_lease(self, tx: Tx, key: str) -> tuple[str, float, float]:
        """The lease's holder and expiry, its row held until the transaction ends (an empty
        one made first), and the time now on the lease clock."""
        tx.execute(
            "INSERT INTO leases (key, holder, expires) VALUES (?, '', 0) ON CONFLICT DO NOTHING",
            (key,),
        )
        holder, expires = tx.execute(
            f"SELECT holder, expires FROM leases WHERE key = ?{self.sql.lock}", (key,)
        ).fetchone()
        return holder, float(expires), self.sql.now(tx)

    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        key = self._lease_key(name)
        with self.sql.write() as tx:
            _, expires, now = self._held_lease(tx, key)
            if expires > now:
                return False
            tx.execute(
                "UPDATE leases SET holder = ?, expires = ? WHERE key = ?",
                (holder, now + ms / 1000, key),
            )
            return True

    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        key = self._lease_key(name)
        with self.sql.write() as tx:
            current, expires, now = self._held_lease(tx, key)
            if current != holder or expires <= now:
                return False
            tx.execute("UPDATE leases SET expires = ? WHERE key = ?", (now + ms / 1000, key))
            return True

    def release_lease(self, name: str, holder: str) -> bool:
        check_lease(name, holder)
        key = self._lease_key(name)
        with self.sql.write() as tx:
            current, expires, now = self._held_lease(tx, key)
            if current != holder or expires <= now:
                return False
            tx.execute("DELETE FROM leases WHERE key = ?", (key,))
            return True

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        self.sql.ping()

    def close(self) -> None:
        self.sql.close()
