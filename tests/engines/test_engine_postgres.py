"""The PostgreSQL engine on a real server: URLs (libpq's options, masked passwords, errors),
the schema made on first use, the epoch, revisions in commit order under concurrent
committers, NOTIFY waking followers with no reads while idle, a listening connection cut and
made anew, and kill -9 of the server's process group mid-commit."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import skillfs
from skillfs.engines.base import EMPTY, CommitOp
from skillfs.engines.postgres.engine import PostgresEngine
from skillfs.engines.sql.schema import SCHEMA_VERSION
from skillfs.errors import (
    InvalidArgument,
    PermissionDenied,
    StoreFailed,
    StoreUnavailable,
)
from skillfs.model import Change, Revision, Scope
from skillfs.store.name_register import NAMES
from support.postgres import PASSWORD, PostgresServer
from support.servers import free_port
from tests.helpers import manifest, raw_engine, skill_md

SHARED = Scope.shared("support-bot")
DOMAIN = "agents/support-bot"


def ns(url: str) -> str:
    return f"{url}?prefix=t{uuid.uuid4().hex[:10]}/"


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    return ns(postgres_server.url)


@pytest.fixture
def engine(url: str) -> Iterator[PostgresEngine]:
    e = PostgresEngine(url)
    yield e
    e.close()


def put(skill: str, version: int) -> CommitOp:
    return CommitOp(scope=SHARED, manifest=manifest(skill, version), expect=version - 1)


# ---------------------------------------------------------------------------- URLs and errors


def test_skillfs_options_are_taken_out_and_the_rest_goes_to_libpq(url: str) -> None:
    e = PostgresEngine(f"{url}&pool_size=3&log_limit=7&application_name=mine&sslmode=disable")
    try:
        assert e.dialect.url.pool_size == 3 and e.log_limit == 7
        e.commit(DOMAIN, [put("a", 1)])
        names = e.sql.query(
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        assert names == [("mine",)]
    finally:
        e.close()


def test_an_option_libpq_does_not_know_is_refused_with_its_error(url: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        skillfs.open_store(f"{url}&colour=blue")
    said = str(info.value)
    assert "colour" in said and "libpq" in said
    assert PASSWORD not in said and "***" in said
    with pytest.raises(InvalidArgument, match="pool_size"):
        skillfs.open_store(f"{url}&pool_size=0")


def test_an_unreachable_server_is_unavailable_and_its_password_masked() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        PostgresEngine(f"postgresql://u:{PASSWORD}@127.0.0.1:{free_port()}/db?connect_timeout=2")
    assert time.monotonic() - started < 10
    assert PASSWORD not in str(info.value) and "u:***@127.0.0.1" in str(info.value)


def test_a_wrong_password_is_refused_and_a_missing_database_named(
    postgres_server: PostgresServer,
) -> None:
    with pytest.raises(PermissionDenied, match="check the user and password") as info:
        PostgresEngine(postgres_server.url.replace(PASSWORD, "wrong"))
    assert "wrong" not in str(info.value)
    with pytest.raises(StoreFailed, match="createdb"):
        PostgresEngine(postgres_server.url_of("nosuchdb"))


# ---------------------------------------------------------------------------- schema and epoch


def test_the_schema_is_made_on_first_use_and_versioned(postgres_server: PostgresServer) -> None:
    db = f"fresh{uuid.uuid4().hex[:8]}"
    with postgres_server.admin() as admin:
        admin.execute(f"CREATE DATABASE {db}")
    url = postgres_server.url_of(db)
    failed: list[BaseException] = []

    def open_one() -> None:
        try:
            PostgresEngine(url).close()
        except BaseException as exc:
            failed.append(exc)

    openers = [threading.Thread(target=open_one) for _ in range(4)]
    for t in openers:  # racing openers queue on the advisory lock: one migrates
        t.start()
    for t in openers:
        t.join(30)
    assert not failed
    with psycopg.connect(url, autocommit=True) as conn:
        versions = conn.execute("SELECT version FROM skillfs.skillfs_schema ORDER BY 1").fetchall()
        assert [v for (v,) in versions] == list(range(1, SCHEMA_VERSION + 1))
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'skillfs'"
        ).fetchall()
        assert {"manifests", "history", "revisions", "changes", "blobs", "leases"} <= {
            t for (t,) in tables
        }
        conn.execute("INSERT INTO skillfs.skillfs_schema (version) VALUES (99)")
    with pytest.raises(StoreFailed, match="newer skillfs"):
        PostgresEngine(url)


def test_the_epoch_names_the_cluster_and_its_timeline(
    engine: PostgresEngine, postgres_server: PostgresServer
) -> None:
    rev = engine.commit(DOMAIN, [put("a", 1)])
    with postgres_server.admin() as admin:
        sysid, wal = admin.execute(
            "SELECT system_identifier, pg_walfile_name(pg_current_wal_lsn())"
            " FROM pg_control_system()"
        ).fetchone()
    random, cluster, timeline = rev.epoch.split(".")
    assert len(random) == 32 and cluster == f"{sysid:x}" and timeline == wal[:8]
    assert engine.revisions([DOMAIN])[DOMAIN] == rev


# ---------------------------------------------------------------------------- commits


def test_revisions_of_concurrent_committers_become_visible_in_order(engine: PostgresEngine) -> None:
    """4 threads commit 40 times each to one domain while a follower reads the log from where
    it is: it must see every counter, each once, in order (a revision that became visible
    after a higher one would be skipped)."""
    done = threading.Event()
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for v in range(1, 41):
                engine.commit(DOMAIN, [put(f"w{i}", v)])
        except BaseException as exc:
            errors.append(exc)

    seen: list[Change] = []
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    since = EMPTY
    deadline = time.monotonic() + 60
    while len(seen) < 160 and time.monotonic() < deadline:
        batch = engine.changes(DOMAIN, since, 0)
        assert all(c.op != "reset" for c in batch[1:])
        if batch and batch[0].op == "reset":  # the domain came into being: from the start
            since = Revision(epoch=batch[0].revision.epoch, counter=0)
            continue
        seen += batch
        if batch:
            since = batch[-1].revision
    done.set()
    for t in threads:
        t.join(30)
    assert not errors
    assert [c.revision.counter for c in seen] == list(range(1, 161))


# ---------------------------------------------------------------------------- notifications


def _follow(store: skillfs.Store, wait: float) -> tuple[list[Change], threading.Event]:
    got: list[Change] = []
    arrived = threading.Event()

    def deliver(before: Revision, changes: list[Change], started: float, ret: float) -> None:
        held = got[-1].revision.counter if got else 0
        fresh = [c for c in changes if c.revision.counter > held]  # a batch may repeat some
        got.extend(fresh)
        if fresh:
            arrived.set()

    store.changes.feed.subscribe(DOMAIN, deliver, wait=wait)
    return got, arrived


def skills(changes: list[Change]) -> list[str | None]:
    """The skills changed, without the scope's name register each creation moves too."""
    return [c.skill for c in changes if c.skill != NAMES]


def test_followers_are_woken_by_notify_and_read_nothing_while_idle(url: str) -> None:
    with skillfs.open_store(url) as follower, skillfs.open_store(url) as writer:
        writer.publish(SHARED, "a", {"SKILL.md": skill_md("a")})
        engine = raw_engine(follower)
        assert isinstance(engine, PostgresEngine)
        got, arrived = _follow(follower, wait=0.1)
        time.sleep(0.5)  # subscribed, caught up, listening
        looks, waits = engine.looks, follower.changes.feed.calls
        time.sleep(2.0)
        assert follower.changes.feed.calls - waits >= 10, "the feed did not wait"
        assert engine.looks == looks, "a follower read the store while nothing changed"
        started = time.monotonic()
        writer.publish(SHARED, "b", {"SKILL.md": skill_md("b")})
        assert arrived.wait(5)
        print(f"woken {1000 * (time.monotonic() - started):.1f} ms after the publish returned")
        assert skills(got) == ["b"]
        assert engine.looks - looks <= 2
        assert engine.listener.received >= 1


def test_a_quiet_listening_connection_is_pinged(url: str) -> None:
    with skillfs.open_store(url) as store:
        engine = raw_engine(store)
        assert isinstance(engine, PostgresEngine)
        engine.listener.ping_every = 0.3
        _follow(store, wait=0.5)
        deadline = time.monotonic() + 15  # the thread looks once a second (SLICE)
        while engine.listener.pings < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert engine.listener.pings >= 2


def _listening_backends(server: PostgresServer) -> list[int]:
    with server.admin() as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %'"
        ).fetchall()
    return [pid for (pid,) in rows]


def test_a_cut_listening_connection_is_made_anew_and_catches_up(
    url: str, postgres_server: PostgresServer
) -> None:
    with skillfs.open_store(url) as follower, skillfs.open_store(url) as writer:
        writer.publish(SHARED, "a", {"SKILL.md": skill_md("a")})
        engine = raw_engine(follower)
        assert isinstance(engine, PostgresEngine)
        got, arrived = _follow(follower, wait=0.2)
        time.sleep(0.5)
        session = engine.listener.session
        assert session
        before = set(_listening_backends(postgres_server))
        with postgres_server.admin() as admin:
            for pid in before:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        writer.publish(SHARED, "b", {"SKILL.md": skill_md("b")})  # while it is down
        assert arrived.wait(10), "the change made while the listener was cut never came"
        assert skills(got) == ["b"]
        deadline = time.monotonic() + 15  # listening again, after a back-off
        while engine.listener.session <= session and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.listener.session > session
        arrived.clear()
        writer.publish(SHARED, "c", {"SKILL.md": skill_md("c")})  # and notifications again
        assert arrived.wait(5)
        assert skills(got) == ["b", "c"]


# ---------------------------------------------------------------------------- faults


@pytest.mark.server
def test_kill_9_of_the_server_mid_commit_keeps_every_acknowledged_write() -> None:
    """Commits run in a loop while the server's whole process group is SIGKILLed; after the
    restart (crash recovery) every acknowledged version is there, none half-written, and a
    follower of before the crash catches up without a reset (same cluster, same timeline)."""
    with PostgresServer(name="postgres-kill") as server:
        url = ns(server.url)
        with skillfs.open_store(url, retry_for=0.5) as store:
            first = store.publish(SHARED, "s", {"SKILL.md": skill_md("s")})
            acked: list[int] = [first.version]
            stop = threading.Event()

            def publish() -> None:
                while not stop.is_set():
                    body = skill_md("s", f"v{acked[-1] + 1}")
                    try:
                        acked.append(store.publish(SHARED, "s", {"SKILL.md": body}).version)
                    except StoreUnavailable:
                        return

            writer = threading.Thread(target=publish)
            writer.start()
            time.sleep(0.5)
            server.kill()
            stop.set()
            writer.join(30)
            server.start()
            m = store.manifest(SHARED, "s")
            assert m.version >= acked[-1] and len(acked) > 3
            assert store.read(SHARED, "s", "SKILL.md").decode().endswith(f"v{m.version}\n") or (
                m.version == 1
            )
            kept = {h.version for h in store.history(SHARED, "s")}
            assert set(acked) <= kept
            changes = store.engine.changes(DOMAIN, first.revision, 0)
            assert changes and changes[0].op != "reset"
            assert [c.version for c in changes] == list(range(2, m.version + 1))
