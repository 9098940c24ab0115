"""Leases (docs/governance.md, "Curation"): one holder at a time, refused while held, expiring
by themselves, renewed and released only by their holder — on every engine and topology (the
`store` fixture); over `grpc://` they are refused with a clear error."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis

import skillfs
from skillfs.errors import InvalidArgument, InvalidPath
from tests.stores import ENGINES, url_for


@pytest.fixture(params=[e for e in ENGINES if e != "grpc"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[skillfs.Store]:
    """A store of each engine and topology that has leases (not grpc://)."""
    with skillfs.open_store(url_for(request, request.param, tmp_path)) as opened:
        yield opened


def _waits(store: skillfs.Store) -> float:
    """A TTL the store can count (etcd grants whole seconds, at least its minimum, ~2 s) and a
    busy machine keeps: a renewal every third of 0.3 s missed it under make test's load."""
    return 1.0


def _until_free(engine: skillfs.Store, name: str, holder: str, limit: float) -> float:
    """`time.monotonic()` when `holder` got lease `name`, trying every 20 ms for at most
    `limit` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if engine.engine.acquire_lease(name, holder, 30):
            return time.monotonic()
        time.sleep(0.02)
    raise AssertionError(f"lease {name} still held after {limit}s")


@pytest.mark.serial  # expired within a second of its TTL: a wall-clock bound
def test_one_holder_until_it_expires(store: skillfs.Store) -> None:
    engine, ttl = store.engine, _waits(store)
    taken = time.monotonic()
    assert engine.acquire_lease("curate", "a", ttl)
    assert not engine.acquire_lease("curate", "b", ttl)  # refused while held
    assert not engine.acquire_lease("curate", "a", ttl)  # its holder renews instead
    assert not engine.renew_lease("curate", "b", ttl)
    assert not engine.release_lease("curate", "b")
    assert engine.acquire_lease("other", "b", ttl)  # another name is another lease
    held = _until_free(store, "curate", "b", ttl + 5) - taken
    assert held >= ttl * 0.9  # not free before its time
    # expired by itself, soon after (etcd grants whole seconds, at least its minimum ~2 s,
    # and revokes on its own schedule)
    assert held <= ttl + (2.5 if store.url.startswith("etcd") else 1.0), held
    assert not engine.renew_lease("curate", "a", ttl)  # a's lease ran out and b has it now
    assert not engine.release_lease("curate", "a")
    assert engine.release_lease("curate", "b")
    assert engine.acquire_lease("curate", "a", 30)  # released: free at once


@pytest.mark.serial
def test_renew_keeps_it(store: skillfs.Store) -> None:
    engine, ttl = store.engine, _waits(store)
    assert engine.acquire_lease("curate", "a", ttl)
    end = time.monotonic() + 3 * ttl + 1
    while time.monotonic() < end:  # renewed at a third of its time: never free meanwhile
        assert engine.renew_lease("curate", "a", ttl)
        assert not engine.acquire_lease("curate", "b", ttl)
        time.sleep(ttl / 3)
    assert engine.release_lease("curate", "a")
    assert engine.acquire_lease("curate", "b", ttl)


def test_bad_lease_input_is_refused(store: skillfs.Store) -> None:
    engine = store.engine
    for name, holder, ttl, says in [
        ("Bad Name", "a", 1.0, "invalid lease name"),
        ("", "a", 1.0, "invalid lease name"),
        ("curate", "", 1.0, "invalid lease holder"),
        ("curate", "a", 0.0, "invalid lease time"),
        ("curate", "a", float("nan"), "invalid lease time"),
    ]:
        with pytest.raises(InvalidArgument, match=says):
            engine.acquire_lease(name, holder, ttl)
    assert engine.acquire_lease("curate", "a", 30)  # nothing was taken by the bad calls


def test_grpc_refuses_leases(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = url_for(request, "grpc", tmp_path)
    with skillfs.open_store(url) as store:
        with pytest.raises(InvalidPath, match="not supported over grpc://"):
            store.engine.acquire_lease("curate", "a", 1.0)
        with pytest.raises(InvalidPath, match="not supported over grpc://"):
            store.engine.renew_lease("curate", "a", 1.0)
        with pytest.raises(InvalidPath, match="not supported over grpc://"):
            store.engine.release_lease("curate", "a")


def test_lease_keys_where_the_docs_say(redis_url: str, etcd_url: str, tmp_path: Path) -> None:
    """docs/engine-redis.md, engine-etcd.md, engine-sqlite.md: `P leases/{name}` (Redis, with
    the store's TTL), `P leases/name` on an etcd lease, a `leases` row (SQLite)."""
    raw = redis.Redis.from_url(redis_url)
    with skillfs.open_store(redis_url + "?prefix=t1/") as store:
        assert store.engine.acquire_lease("curate", "srv-1", 30)
    assert raw.get("t1/leases/{curate}") == b"srv-1"
    assert 29_000 < cast(int, raw.pttl("t1/leases/{curate}")) <= 30_000
    raw.close()
    with skillfs.open_store(etcd_url + "?prefix=t1/") as store:
        assert store.engine.acquire_lease("curate", "srv-1", 30)
        (kv,) = store.engine._etcd.get_many([b"t1/leases/curate"])  # type: ignore[attr-defined]
        assert kv.value == b"srv-1" and kv.lease != 0
    db = tmp_path / "skills.db"
    with skillfs.open_store(f"sqlite:///{db}?prefix=t1/") as store:
        before = time.time()
        assert store.engine.acquire_lease("curate", "srv-1", 30)
    with sqlite3.connect(db) as conn:
        ((key, holder, expires),) = conn.execute("SELECT key, holder, expires FROM leases")
    assert (key, holder) == ("t1/leases/curate", "srv-1") and expires >= before + 30
