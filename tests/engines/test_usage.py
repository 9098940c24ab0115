"""Usage with last-used times (docs/governance.md, "Usage and last use"): per (user, skill) a
count and the latest time of use that never moves backwards, on every engine and topology
(the `store` fixture), the runtime's recorder, the SQLite schema migration, and the CLI."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest

import skillfs
from skillfs import UsageStat
from skillfs.cli.common import iso
from skillfs.engines.sql.schema import migrations
from skillfs.engines.sqlite.file import SqliteFile
from skillfs.errors import InvalidArgument, InvalidPath
from skillfs.runtime.usage import UsageRecorder
from tests.cli_helpers import as_json, ok
from tests.stores import url_for

BOT = "support-bot"


def test_add_usage_says_which_keys_it_created(store: skillfs.Store) -> None:
    """What a token's charge for new usage counters keeps (docs/security.md, "Quotas");
    over grpc:// the server charges them, so the client is told of none."""
    engine = store.engine
    first = engine.add_usage(BOT, {("alice", "a"): 1, ("bob", "a"): 2})
    again = engine.add_usage(BOT, {("alice", "a"): 1, ("", "b"): 1})
    if store.url.startswith("grpc://"):
        assert first == again == set()
    else:
        assert first == {("alice", "a"), ("bob", "a")} and again == {("", "b")}
    assert store.usage.counts(BOT) == {("alice", "a"): 2, ("bob", "a"): 2, ("", "b"): 1}


def test_last_used_moves_forward_only(store: skillfs.Store) -> None:
    t = time.time() - 1000  # in the past: a server never takes a time past its own clock
    store.usage.record(BOT, {("alice", "a"): 2, ("bob", "a"): 1}, {("alice", "a"): t})
    store.usage.record(BOT, {("alice", "a"): 3, ("alice", "b"): 1}, {("alice", "a"): t - 500})
    before = time.time()
    detail = store.usage.detail(BOT)
    assert detail[("alice", "a")] == UsageStat(5, t)  # the older batch did not move it back
    assert t + 900 < detail[("bob", "a")].last_used <= before  # no time given: now
    store.usage.record(BOT, {("alice", "a"): 1}, {("alice", "a"): t + 10.25})
    assert store.usage.detail(BOT)[("alice", "a")] == UsageStat(6, t + 10.25)
    assert store.usage.counts(BOT) == {("alice", "a"): 6, ("bob", "a"): 1, ("alice", "b"): 1}
    per_skill = store.usage.by_skill(BOT)
    assert per_skill["a"].count == 7
    assert per_skill["a"].last_used == detail[("bob", "a")].last_used  # the latest of users
    assert per_skill["b"].count == 1
    assert store.usage.detail("nobody") == {}


def test_an_operator_drops_usage_and_the_drop_is_recorded(store: skillfs.Store) -> None:
    """`store.usage.drop` forgets the counters it names (users, skills, or all), records who,
    when and why (`drops`, newest first; over grpc:// the server's token is the actor), and
    refuses a drop without a reason or with a bad id before anything is dropped."""
    t = time.time() - 100
    counts = {("alice", "a"): 2, ("bob", "a"): 1, ("alice", "b"): 5, ("", "a"): 1}
    store.usage.record(BOT, counts, dict.fromkeys(counts, t))
    with pytest.raises(InvalidArgument, match="say why"):
        store.usage.drop(BOT, users=["alice"], reason=" ")
    with pytest.raises(InvalidPath):
        store.usage.drop(BOT, users=["_x"], reason="bad id")
    first = store.usage.drop(BOT, users=["alice"], reason="made-up names", actor="ops")
    assert (first.users, first.skills, first.dropped) == (("alice",), None, 2)
    assert store.usage.counts(BOT) == {("bob", "a"): 1, ("", "a"): 1}
    second = store.usage.drop(BOT, skills=["a"], reason="reset")
    assert second.dropped == 2 and store.usage.detail(BOT) == {}
    drops = store.usage.drops(BOT)
    assert [d.reason for d in drops] == ["reset", "made-up names"]
    assert drops[1].actor in ("ops", "admin")  # grpc://: the server's token
    assert drops[0].at >= drops[1].at >= t
    store.usage.record(BOT, {("alice", "a"): 1})  # counting goes on
    assert store.usage.counts(BOT) == {("alice", "a"): 1}


def test_a_count_of_zero_records_nothing(store: skillfs.Store) -> None:
    """Outside (differential) testing: a 0 count stored a last use without a load on most
    engines, was dropped on etcd, and made a server refuse the whole batch. It records
    nothing everywhere; a negative count still refuses the batch."""
    store.usage.record(BOT, {("u1", "alpha"): 0, ("u1", "beta"): 1})
    assert store.usage.detail(BOT).keys() == {("u1", "beta")}
    with pytest.raises(InvalidPath, match="usage count -1"):
        store.usage.record(BOT, {("u1", "alpha"): -1, ("u1", "beta"): 1})
    assert store.usage.counts(BOT) == {("u1", "beta"): 1}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, "soon", True])
def test_bad_last_used_records_nothing(store: skillfs.Store, bad: object) -> None:
    with pytest.raises(InvalidArgument, match="last-used time"):
        store.usage.record(BOT, {("alice", "a"): 1}, {("alice", "a"): bad})  # type: ignore[dict-item]
    assert store.usage.detail(BOT) == {}


def test_recorder_records_the_time_of_use(store: skillfs.Store) -> None:
    recorder = UsageRecorder(store, BOT, background=False)
    t0 = time.time()
    recorder.add("alice", "a")
    recorder.add("alice", "a")
    t1 = time.time()
    recorder.flush()
    stat = store.usage.detail(BOT)[("alice", "a")]
    assert stat.count == 2 and t0 <= stat.last_used <= max(t1, time.time())


def test_sqlite_file_of_schema_2_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    for version in (1, 2):
        for statement in migrations(SqliteFile.types)[version]:
            raw.execute(statement)
    raw.execute("INSERT INTO usage VALUES ('agents/support-bot', 'alice', 'a', 4)")
    raw.execute("PRAGMA user_version=2")
    raw.commit()
    raw.close()
    with skillfs.open_store(f"sqlite:///{path}") as store:
        assert store.usage.detail(BOT) == {("alice", "a"): UsageStat(4, 0.0)}
        store.usage.record(BOT, {("alice", "a"): 1}, {("alice", "a"): 1000.5})
        assert store.usage.detail(BOT) == {("alice", "a"): UsageStat(5, 1000.5)}


@pytest.mark.parametrize("engine", ["sqlite", "grpc"])
def test_cli_usage_per_user_and_per_skill(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    url = url_for(request, engine, tmp_path)
    t = 1_700_000_000.0
    with skillfs.open_store(url) as store:
        store.usage.record(BOT, {("alice", "a"): 3, ("bob", "b"): 5}, {("alice", "a"): t})
        store.usage.record(BOT, {("bob", "a"): 1}, {("bob", "a"): t + 60})
        bob_b = store.usage.detail(BOT)[("bob", "b")].last_used
    assert as_json(url, "usage", "--agent", BOT) == [
        {"user": "bob", "skill": "b", "count": 5, "last_used": iso(bob_b)},
        {"user": "alice", "skill": "a", "count": 3, "last_used": "2023-11-14T22:13:20+00:00"},
        {"user": "bob", "skill": "a", "count": 1, "last_used": "2023-11-14T22:14:20+00:00"},
    ]
    assert as_json(url, "usage", "--agent", BOT, "--by-skill") == [
        {"skill": "b", "count": 5, "last_used": iso(bob_b)},
        {"skill": "a", "count": 4, "last_used": "2023-11-14T22:14:20+00:00"},
    ]
    table = ok(url, "usage", "-a", BOT).stdout
    assert "last used" in table and "2023-11-1" in table
    assert "user" not in ok(url, "usage", "-a", BOT, "--by-skill").stdout.splitlines()[0]
