"""History growth (docs/benchmarks.md, "History growth"): one-file commits to a skill of
4,000 files, and what each adds to what the engine holds — the sum of its keys' and values'
sizes in the store's namespace; on etcd every put since the start counts, superseded
revisions included, until a compaction. The new files' blobs are left out (they are the
change itself). Used by tests/engines/test_history_growth.py and by bench/history.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, cast

from etcd3 import etcdrpc
from etcd3.etcdrpc import kv_pb2

import skillfs
from skillfs import Scope
from skillfs.engines.base import Engine
from skillfs.engines.etcd.client import prefix_end
from skillfs.engines.etcd.engine import EtcdEngine
from skillfs.engines.memory import MemoryEngine
from skillfs.engines.redis.engine import RedisEngine
from skillfs.engines.sql.engine import SqlEngine
from skillfs.store.blobs import sha256

SHARED = Scope.shared("support-bot")
FILES = 4000
#: The most one one-file commit may add to what an engine holds (issue 28 §2).
LIMIT = 20 * 1024


def path_of(i: int) -> str:
    return f"references/part-{i // 100:02d}/note-{i:04d}.md"


def publish_large(store: skillfs.Store, texts: int = FILES) -> None:
    """Publish a skill of FILES files holding `texts` different texts (fewer blobs: a faster
    first publish, the same file table)."""
    files = {path_of(i): b"note %d\n" % (i % texts) for i in range(FILES - 1)}
    md = b"---\nname: large\ndescription: A skill of many files.\n---\nbody\n"
    store.publish(SHARED, "large", {"SKILL.md": md, **files})


def one_file_edits(store: skillfs.Store, commits: int, held: Held) -> tuple[float, float]:
    """`commits` one-file commits to the large skill (even ones change a file spread over the
    table, odd ones add one): the bytes each added to what `held` counts, on average, and
    the seconds each took."""
    new: list[str] = []
    m = store.manifest(SHARED, "large")
    started = time.monotonic()
    for n in range(commits):
        data = b"edit %d\n" % n
        new.append(sha256(data))
        path = path_of(n * 997 % (FILES - 1)) if n % 2 == 0 else f"references/new/add-{n:04d}.md"
        version = store.publish(
            SHARED, "large", {**m.files, path: data}, expected_version=m.version
        ).version
        m = store.manifest(SHARED, "large")
        assert m.version == version and m.files[path].sha256 == new[-1]
    seconds = (time.monotonic() - started) / commits
    return held.grown(new) / commits, seconds


class Held:
    """The bytes one store holds from now on (`grown`), or now (`total`)."""

    def __init__(self, store: skillfs.Store) -> None:
        #: The engine itself, under the store's file tables (skillfs/store/tables.py).
        self.engine = cast(Engine, getattr(store.engine, "inner", store.engine))
        self.start = self._etcd_revision() if isinstance(self.engine, EtcdEngine) else 0
        self.base = self.total(())

    def grown(self, exclude: Iterable[str]) -> int:
        """The bytes added since this object was made, leaving out the blobs `exclude`."""
        return self.total(exclude) - self.base

    def total(self, exclude: Iterable[str]) -> int:
        skip = set(exclude)
        e = self.engine
        if isinstance(e, MemoryEngine):
            return _memory(e, skip)
        if isinstance(e, SqlEngine):
            return _sql(e, skip)
        if isinstance(e, RedisEngine):
            return _redis(e, skip)
        if isinstance(e, EtcdEngine):
            return _etcd(e, self.start, skip)
        raise TypeError(f"no byte count for {type(e).__name__}")

    def _etcd_revision(self) -> int:
        e = cast(EtcdEngine, self.engine)
        response = e._etcd.range(etcdrpc.RangeRequest(key=b"\0", limit=1))
        return int(response.header.revision)


def _named(key: str | bytes, skip: set[str]) -> bool:
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    return any(sha in text for sha in skip)


def _memory(e: MemoryEngine, skip: set[str]) -> int:
    total = 0
    for (sha, _), data in e._chunks.items():
        if sha not in skip:
            total += len(sha) + 8 + len(data)
    total += sum(len(sha) + 8 for sha in e._blob_use if sha not in skip)
    for scope, live in e._live.items():
        total += sum(len(str(scope)) + len(k) + len(m.model_dump_json()) for k, m in live.items())
    for (scope, skill), older in e._history.items():
        total += sum(len(str(scope)) + len(skill) + len(m.model_dump_json()) for m in older)
    total += sum(len(c.model_dump_json()) for log in e._log.values() for c in log)
    return total


#: The first column of each table of the SQL engines, which starts with the store's prefix.
_SQL_TABLES = {
    "blobs": "key", "blob_chunks": "key", "manifests": "scope", "history": "scope",
    "revisions": "domain", "changes": "domain", "scopes": "domain", "usage": "agent",
    "leases": "key", "quota": "domain",
}  # fmt: skip


def _sql(e: SqlEngine, skip: set[str]) -> int:
    """Every row of the store's prefix (SQLite: every row), its values' bytes summed."""
    total = 0
    for table, first in _SQL_TABLES.items():
        where, params = "", ()
        if e.prefix:
            where, params = f" WHERE {first} >= ? AND {first} < ?", e._range(e.prefix)
        for row in e.sql.query(f"SELECT * FROM {table}{where}", params):
            if table.startswith("blob") and _named(row[0], skip):
                continue
            total += sum(
                len(v) if isinstance(v, bytes | memoryview) else len(str(v).encode())
                for v in row
                if v is not None
            )
    return total


def _redis(e: RedisEngine, skip: set[str]) -> int:
    client: Any = e._client
    total = 0
    for key in client.scan_iter(match=e.prefix.replace("*", r"\*") + "*", count=1000):
        if _named(key, skip):
            continue
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        total += len(key)
        if kind == "string":
            total += int(client.strlen(key))
        elif kind == "hash":
            total += sum(len(k) + len(v) for k, v in client.hgetall(key).items())
        elif kind == "set":
            total += sum(len(m) for m in client.smembers(key))
        elif kind == "zset":
            total += sum(len(m) + 8 for m in client.zrange(key, 0, -1))
        elif kind == "list":
            total += sum(len(m) for m in client.lrange(key, 0, -1))
        elif kind == "stream":
            for entry_id, fields in client.xrange(key):
                total += len(entry_id) + sum(len(k) + len(v) for k, v in fields.items())
    return total


def _etcd(e: EtcdEngine, start: int, skip: set[str]) -> int:
    """What was live under the engine's prefix at revision `start`, plus every put since
    (superseded ones included): the puts of etcd's history under the prefix, read with a
    watch from `start + 1`. (A range of the whole prefix per revision reads every key again
    for each: it was half of a 150-commit run's time on a skill of 4,000 blobs; it is left
    for the revisions the watch did not bring, if any.)"""
    prefix = e._prefix
    assert prefix, "measure etcd under a key prefix (?prefix= in the URL)"
    end = prefix_end(prefix)

    def size(revision: int, only: bool) -> int:
        request = etcdrpc.RangeRequest(key=prefix, range_end=end, revision=revision)
        if only:
            request.min_mod_revision = request.max_mod_revision = revision
        kvs = e._etcd.range(request).kvs
        return sum(len(kv.key) + len(kv.value) for kv in kvs if not _named(kv.key, skip))

    now = int(e._etcd.range(etcdrpc.RangeRequest(key=b"\0", limit=1)).header.revision)
    total = size(start, False)
    revision = start + 1
    while revision <= now:
        # whole revisions a batch; none at the deadline when nothing under the prefix is left
        batch = e._etcd.watch(prefix, revision, time.monotonic() + 1)
        assert batch is not None, f"etcd's history from revision {revision} unread"
        events = [ev for ev in batch[1] if ev.kv.mod_revision <= now]
        if not events:
            break
        total += sum(
            len(ev.kv.key) + len(ev.kv.value)
            for ev in events
            if ev.type == kv_pb2.Event.PUT and not _named(ev.kv.key, skip)
        )
        revision = events[-1].kv.mod_revision + 1
    return total + sum(size(r, True) for r in range(revision, now + 1))
