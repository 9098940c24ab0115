"""The SQLite engine: URLs, physical layout, several processes on one file, durability across
kill -9, schema versions, error mapping, change log trimming, prefixes, threads."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

import skillfs
from skillfs.engines.base import CommitOp, VersionMismatch
from skillfs.engines.sql.schema import SCHEMA_VERSION
from skillfs.engines.sqlite.engine import SqliteEngine, parse_path
from skillfs.errors import InvalidArgument, StoreFailed, StoreUnavailable
from skillfs.model import Manifest, Revision, Scope
from support.grpc_servers import ADMIN as GRPC_ADMIN
from support.grpc_servers import running
from tests.helpers import manifest, raw_engine, skill_md

ALICE = Scope.user("support-bot", "alice")
BOB = Scope.user("support-bot", "bob")
SHARED = Scope.shared("support-bot")
MARKET = Scope.market("team")
DOMAIN = "agents/support-bot"
SPAWN = mp.get_context("spawn")


def url_of(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def bump(engine: SqliteEngine, scope: Scope, skill: str) -> tuple[int, Revision]:
    """Commit the next version of a skill, retrying on VersionMismatch; (version, revision)."""
    while True:
        live = engine.load_skills(scope, [skill]).get(skill)
        current = live.version if live else 0
        try:
            op = CommitOp(scope=scope, manifest=manifest(skill, current + 1), expect=current)
            return current + 1, engine.commit(scope.domain, [op])
        except VersionMismatch:
            continue


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "skills.db"


@pytest.fixture
def engine(db: Path) -> Iterator[SqliteEngine]:
    e = SqliteEngine(url_of(db))
    yield e
    e.close()


# ----------------------------------------------------------------- URLs


def test_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_path("sqlite:///skills.db") == tmp_path / "skills.db"
    assert parse_path("sqlite:///sub/skills.db") == tmp_path / "sub" / "skills.db"
    assert parse_path("sqlite:////var/lib/skillfs/skills.db") == Path("/var/lib/skillfs/skills.db")
    assert parse_path("sqlite://localhost//srv/s.db") == Path("/srv/s.db")
    assert parse_path("sqlite:///~/s.db") == Path.home() / "s.db"
    assert parse_path("sqlite:///my%20skills.db?prefix=t/") == tmp_path / "my skills.db"
    for bad in [
        "sqlite://host/x.db",
        "sqlite://",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///d/",
    ]:
        with pytest.raises(InvalidArgument, match="sqlite:///"):
            parse_path(bad)
    with pytest.raises(InvalidArgument, match="unknown option"):
        SqliteEngine(url_of(tmp_path / "x.db", "colour=red"))
    with pytest.raises(InvalidArgument, match="positive"):
        SqliteEngine(url_of(tmp_path / "x.db", "log_limit=0"))


def test_open_store_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "skills.db"
    with skillfs.open_store(url_of(path)) as store:
        store.publish(ALICE, "s", {"SKILL.md": skill_md("s")})
    assert path.is_file()


# ----------------------------------------------------------------- physical layout (docs)


def test_physical_layout(db: Path) -> None:
    """The tables and keys that docs/engine-sqlite.md describes."""
    with skillfs.open_store(url_of(db, "prefix=tenant1/")) as store:
        c1 = store.publish(ALICE, "code-reviewer", {"SKILL.md": skill_md("code-reviewer")})
        store.publish(ALICE, "code-reviewer", {"SKILL.md": skill_md("code-reviewer", "v2")})
        store.publish(MARKET, "m", {"SKILL.md": skill_md("m")})
        store.usage.record("support-bot", {("alice", "code-reviewer"): 2})
        store.usage.record("support-bot", {("alice", "code-reviewer"): 3})
        engine = raw_engine(store)
        assert isinstance(engine, SqliteEngine)
        conn = engine._db.conn()
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (5000,)
        m = store.manifest(ALICE, "code-reviewer")
        market_epoch = store.engine.revisions(["markets/team"])["markets/team"].epoch  # type: ignore[union-attr]

    raw = sqlite3.connect(db)
    q = raw.execute
    assert q("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    tables = {n for (n,) in q("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {
        "blobs",
        "blob_chunks",
        "manifests",
        "history",
        "revisions",
        "changes",
        "scopes",
        "usage",
        "leases",
        "quota",
    }
    held = q("SELECT domain, key FROM quota ORDER BY domain").fetchall()  # bytes per scope
    assert held == [
        ("tenant1/agents/support-bot", "scope:user:support-bot/alice"),
        ("tenant1/markets/team", "scope:market:team"),
    ]
    sha = m.files["SKILL.md"].sha256
    assert q("SELECT key FROM blobs WHERE key = ?", (f"tenant1/blobs/{sha}",)).fetchone()
    assert q(
        "SELECT idx, length(data) FROM blob_chunks WHERE key = ?", (f"tenant1/blobs/{sha}",)
    ).fetchall() == [(0, m.files["SKILL.md"].size)]
    # each scope's name register, written by the commit that created its skill
    assert q("SELECT scope, skill, version FROM manifests ORDER BY scope, skill").fetchall() == [
        ("tenant1/agents/support-bot/users/alice/skills/", "_settings/names", 1),
        ("tenant1/agents/support-bot/users/alice/skills/", "code-reviewer", 2),
        ("tenant1/markets/team/skills/", "_settings/names", 1),
        ("tenant1/markets/team/skills/", "m", 1),
    ]
    body = q("SELECT body FROM manifests WHERE skill = 'code-reviewer'").fetchone()[0]
    assert Manifest.model_validate_json(body) == m
    assert q("SELECT scope, skill, version FROM history").fetchall() == [
        ("tenant1/agents/support-bot/users/alice/skills/", "code-reviewer", 1)
    ]
    assert q(
        "SELECT domain, epoch, counter, log_size, trimmed FROM revisions ORDER BY domain"
    ).fetchall() == [
        ("tenant1/agents/support-bot", c1.revision.epoch, 2, 3, 0),
        ("tenant1/markets/team", market_epoch, 1, 2, 0),
    ]
    assert q(
        "SELECT domain, counter, pos, op, scope, skill, version FROM changes"
        " WHERE domain = 'tenant1/agents/support-bot'"
    ).fetchall() == [
        ("tenant1/agents/support-bot", 1, 0, "put", "user:support-bot/alice", "code-reviewer", 1),
        ("tenant1/agents/support-bot", 1, 1, "put", "user:support-bot/alice", "_settings/names", 1),
        ("tenant1/agents/support-bot", 2, 0, "put", "user:support-bot/alice", "code-reviewer", 2),
    ]
    assert q("SELECT domain, key, scope FROM scopes ORDER BY domain").fetchall() == [
        (
            "tenant1/agents/support-bot",
            "tenant1/agents/support-bot/users/alice/skills/",
            "user:support-bot/alice",
        ),
        ("tenant1/markets/team", "tenant1/markets/team/skills/", "market:team"),
    ]
    assert q("SELECT agent, user, skill, count FROM usage").fetchall() == [
        ("tenant1/agents/support-bot", "alice", "code-reviewer", 5)
    ]
    assert q("SELECT last_used FROM usage").fetchone()[0] > 0
    raw.close()


def test_prefixes_isolate_deployments_in_one_file(db: Path) -> None:
    plain = skillfs.open_store(url_of(db))
    t1 = skillfs.open_store(url_of(db, "prefix=t1/"))
    t1.publish(ALICE, "only-t1", {"SKILL.md": skill_md("only-t1")})
    t1.usage.record("support-bot", {("alice", "only-t1"): 1})
    plain.publish(SHARED, "only-plain", {"SKILL.md": skill_md("only-plain", "plain")})
    assert plain.agents() == ["support-bot"] and t1.agents() == ["support-bot"]
    assert plain.scopes("support-bot") == [SHARED]
    assert t1.scopes("support-bot") == [ALICE]
    assert plain.usage.counts("support-bot") == {}
    assert t1.usage.counts("support-bot") == {("alice", "only-t1"): 1}
    assert len(list(plain.engine.blob_shas())) == 1
    assert len(list(t1.engine.blob_shas())) == 1
    assert set(plain.engine.blob_shas()).isdisjoint(t1.engine.blob_shas())
    assert plain.revision("support-bot") != t1.revision("support-bot")
    plain.close()
    t1.close()


# ----------------------------------------------------------------- several processes


def _racer(url: str, n: int, start: Barrier, out: Connection) -> None:
    """Commit n versions of one skill, each expecting the version it read."""
    engine = SqliteEngine(url)
    won: list[int] = []
    mismatches = 0
    start.wait()
    while len(won) < n:
        live = engine.load_skills(ALICE, ["race"]).get("race")
        current = live.version if live else 0
        op = CommitOp(scope=ALICE, manifest=manifest("race", current + 1), expect=current)
        try:
            rev = engine.commit(DOMAIN, [op])
        except VersionMismatch as exc:
            assert exc.current > current
            mismatches += 1
            continue
        won.append(current + 1)
        assert rev.counter == current + 1
    out.send((won, mismatches))
    engine.close()


def test_two_processes_commit_concurrently(db: Path) -> None:
    url = url_of(db)
    SqliteEngine(url).close()
    n = 150
    start = SPAWN.Barrier(3)
    pipes = [SPAWN.Pipe(duplex=False) for _ in range(2)]
    procs = [SPAWN.Process(target=_racer, args=(url, n, start, w)) for _, w in pipes]
    for p in procs:
        p.start()
    start.wait(timeout=30)
    results = []
    for (r, _), p in zip(pipes, procs, strict=True):
        # A racer that failed sends nothing: see its exit code instead of blocking forever.
        assert r.poll(120), f"racer exited with {p.exitcode} before reporting"
        results.append(r.recv())
    for p in procs:
        p.join(timeout=10)
        assert p.exitcode == 0
    won = sorted(results[0][0] + results[1][0])
    assert won == list(range(1, 2 * n + 1)), "each version was won by exactly one process"
    assert results[0][1] + results[1][1] > 0, "the processes never raced"
    engine = SqliteEngine(url)
    assert engine.load_skills(ALICE, ["race"])["race"].version == 2 * n
    assert [m.version for m in engine.history(ALICE, "race")] == list(range(2 * n - 1, 0, -1))
    rev = engine.revisions([DOMAIN])[DOMAIN]
    assert rev is not None and rev.counter == 2 * n
    log = engine.changes(DOMAIN, Revision(epoch=rev.epoch, counter=0), 0)
    assert [c.version for c in log] == list(range(1, 2 * n + 1))
    with pytest.raises(VersionMismatch) as info:
        engine.commit(DOMAIN, [CommitOp(scope=ALICE, manifest=manifest("race", 5), expect=4)])
    assert info.value.current == 2 * n
    engine.close()


def _reader(url: str, requests: Connection, replies: Connection) -> None:
    """Answer each request with what this process reads now: the revision, or the changes
    after a given revision (waiting for them)."""
    engine = SqliteEngine(url)
    replies.send("ready")
    while (req := requests.recv()) is not None:
        if req == "revision":
            replies.send(engine.revisions([DOMAIN])[DOMAIN])
        else:
            replies.send(engine.changes(DOMAIN, req, timeout=10))
    engine.close()


@pytest.mark.serial
def test_reader_in_another_process_sees_commits_at_once(engine: SqliteEngine) -> None:
    req_r, req_w = SPAWN.Pipe(duplex=False)
    rep_r, rep_w = SPAWN.Pipe(duplex=False)
    proc = SPAWN.Process(target=_reader, args=(engine.url, req_r, rep_w))
    proc.start()
    try:
        assert rep_r.recv() == "ready"
        for _ in range(20):
            _, rev = bump(engine, ALICE, "s")
            req_w.send("revision")
            assert rep_r.recv() == rev
        # a follower waiting in the other process wakes for a commit made here
        req_w.send(rev)
        time.sleep(0.2)
        started = time.monotonic()
        version, new = bump(engine, BOB, "t")
        changes = rep_r.recv()
        assert time.monotonic() - started < 1.0
        assert [(c.revision, c.op, c.scope, c.skill, c.version) for c in changes] == [
            (new, "put", BOB, "t", version)
        ]
        req_w.send(None)
        proc.join(timeout=10)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()


def _writer(url: str, acks: Connection) -> None:
    """Publish versions forever, acknowledging each after `publish` returned."""
    store = skillfs.open_store(url, history_policy=skillfs.HistoryPolicy(keep_versions=10_000))
    while True:
        live = store.manifests(ALICE).get("d")
        n = (live.version if live else 0) + 1
        c = store.publish(ALICE, "d", {"SKILL.md": skill_md("d", f"v{n}"), "n.txt": b"%d" % n})
        acks.send((c.version, c.revision))


def test_every_acknowledged_commit_survives_kill_9(db: Path) -> None:
    """Three writers in turn, each killed with SIGKILL at a random point of its stream."""
    url = url_of(db)
    acked: list[tuple[int, Revision]] = []
    for _ in range(3):
        acks_r, acks_w = SPAWN.Pipe(duplex=False)
        proc = SPAWN.Process(target=_writer, args=(url, acks_w))
        proc.start()
        target = len(acked) + 40
        try:
            while len(acked) < target:
                assert acks_r.poll(30), "the writer stopped"
                acked.append(acks_r.recv())
            time.sleep(random.uniform(0, 0.01))
        finally:
            os.kill(proc.pid, signal.SIGKILL)  # type: ignore[arg-type]
            proc.join(timeout=10)
        assert proc.exitcode == -signal.SIGKILL
        while acks_r.poll():  # acknowledgements sent before the kill landed
            acked.append(acks_r.recv())

    with skillfs.open_store(url) as store:
        conn = store.engine._db.conn()  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        last_version, last_rev = acked[-1]
        rev = store.revision("support-bot")
        assert rev is not None and rev.epoch == last_rev.epoch and rev.counter >= last_rev.counter
        assert store.manifest(ALICE, "d").version >= last_version
        for version, _ in acked:
            assert store.read(ALICE, "d", "n.txt", version=version) == b"%d" % version
        versions = [v for v, _ in acked]
        assert versions == sorted(set(versions)), "each writer went on from the last commit"


# ----------------------------------------------------------------- schema versions and errors


def test_schema_version_from_a_newer_skillfs_is_refused(db: Path) -> None:
    SqliteEngine(url_of(db)).close()
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    with pytest.raises(StoreFailed, match="newer skillfs") as info:
        SqliteEngine(url_of(db))
    assert str(db) in str(info.value)


def test_a_running_engine_refuses_a_file_upgraded_under_it(engine: SqliteEngine, db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    errors: list[BaseException] = []

    def new_thread() -> None:
        try:
            engine.revisions([DOMAIN])
        except StoreFailed as exc:
            errors.append(exc)

    t = threading.Thread(target=new_thread)
    t.start()
    t.join()
    assert len(errors) == 1 and "newer skillfs" in str(errors[0])


def test_unwritable_paths_are_said_at_once(tmp_path: Path) -> None:
    """Waiting makes no path writable: StoreFailed naming it, not an outage to retry."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for path in [blocker / "skills.db", Path("/proc/skillfs-no-such/skills.db")]:
        with pytest.raises(StoreFailed, match=str(path.parent)):
            SqliteEngine(url_of(path))
    directory = tmp_path / "dir.db"
    directory.mkdir()
    with pytest.raises(StoreFailed, match=f"{directory} cannot be opened"):
        SqliteEngine(url_of(directory))


def test_a_file_that_is_not_a_database_is_said_at_once(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not an SQLite database, just some bytes " * 100)
    with pytest.raises(StoreFailed, match="is not an SQLite database") as info:
        SqliteEngine(url_of(db))
    assert str(db) in str(info.value) and "file is not a database" in str(info.value)


def _store_of_30_skills(path: Path) -> None:
    store = skillfs.open_store(url_of(path))
    for i in range(30):
        store.publish(SHARED, f"s{i}", {"SKILL.md": skill_md(f"s{i}"), "data": os.urandom(5000)})
    store.close()


def test_a_corrupt_file_is_said_at_once_not_retried(db: Path) -> None:
    """Issue 28: "database disk image is malformed" was retried for 10 s, then reported as
    "unavailable … retry". It is StoreFailed at once, saying what to do."""
    _store_of_30_skills(db)
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    with open(db, "r+b") as f:  # every page but the first (the header and the schema)
        for offset in range(4096, db.stat().st_size, 4096):
            f.seek(offset)
            f.write(b"\xde\xad\xbe\xef" * 256)
    store = skillfs.open_store(url_of(db))  # retry_for: 10 s
    started = time.monotonic()
    with pytest.raises(StoreFailed) as info:
        store.manifests(SHARED, ["s1", "s2"])
    assert time.monotonic() - started < 2
    assert not isinstance(info.value, StoreUnavailable)
    message = str(info.value)
    assert f"{db} is corrupt" in message and "backup" in message and ".recover" in message
    assert "database disk image is malformed" in message
    store.close()


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount here (root needed): {done.stderr.strip()}")


def _unmount(where: Path) -> None:
    if subprocess.run(["umount", str(where)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(where)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB file system (tmpfs), unmounted after the test."""
    where = tmp_path / "small"
    where.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where))
    yield where
    _unmount(where)


def test_a_full_disk_is_said_at_once_and_reads_go_on(small_disk: Path) -> None:
    """Issue 28: "database or disk is full" was retried for 10 s as an outage."""
    store = skillfs.open_store(url_of(small_disk / "skills.db"))
    store.publish(SHARED, "kept", {"SKILL.md": skill_md("kept")})
    with pytest.raises(StoreFailed) as info:
        for i in range(100):
            started = time.monotonic()
            store.publish(SHARED, f"s{i}", {"SKILL.md": skill_md(f"s{i}"), "d": os.urandom(10**5)})
    assert time.monotonic() - started < 2
    message = str(info.value)
    assert "disk is full: free space" in message and "database or disk is full" in message
    assert store.manifest(SHARED, "kept").version == 1  # reads go on
    store.close()


def test_a_full_disk_is_said_at_once_through_a_server(small_disk: Path, tmp_path: Path) -> None:
    """The error keeps its class over grpc:// (FAILED_PRECONDITION with its name): neither
    the client nor the server retries it, nor does the client try another server."""
    with running(url_of(small_disk / "skills.db"), tmp_path / "server") as server:
        client = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=GRPC_ADMIN)
        with pytest.raises(StoreFailed, match="disk is full: free space"):
            for i in range(100):
                started = time.monotonic()
                data = {"SKILL.md": skill_md(f"s{i}"), "d": os.urandom(10**5)}
                client.publish(SHARED, f"s{i}", data)
        assert time.monotonic() - started < 2
        client.close()


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A directory and a read-only bind mount of it, unmounted after the test."""
    writable, read_only = tmp_path / "rw", tmp_path / "ro"
    writable.mkdir()
    read_only.mkdir()
    _mount("--bind", str(writable), str(read_only))
    try:
        _mount("-o", "remount,bind,ro", str(read_only))
        yield writable, read_only
    finally:
        _unmount(read_only)


def test_a_read_only_file_is_said_at_once(read_only_view: tuple[Path, Path]) -> None:
    writable, read_only = read_only_view
    owner = skillfs.open_store(url_of(writable / "skills.db"))
    owner.publish(SHARED, "s", {"SKILL.md": skill_md("s")})
    store = skillfs.open_store(url_of(read_only / "skills.db"))
    assert store.skills(SHARED) == ["s"]  # reads go on
    started = time.monotonic()
    with pytest.raises(StoreFailed, match=r"cannot be written: make the file, its directory"):
        store.publish(SHARED, "t", {"SKILL.md": skill_md("t")})
    assert time.monotonic() - started < 2
    store.close()
    owner.close()


@pytest.mark.serial
def test_opening_a_new_file_another_connection_writes_waits_for_it(db: Path) -> None:
    """A new file is switched to WAL on open, which needs it exclusively; SQLite refuses that
    switch at once ("database is locked", no busy timeout) while another connection holds a
    write lock on it (as when processes open a new store together: CI's concurrency test
    lost a worker to it). The open waits for the lock, up to the timeout, then fails clearly."""
    db.parent.mkdir(parents=True)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (a)")  # the file exists, still in rollback mode
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    engine = SqliteEngine(url_of(db))
    assert time.monotonic() - started >= 0.25
    release.join()
    assert engine.revisions([DOMAIN]) == {DOMAIN: None}
    engine.close()

    holder.execute("BEGIN IMMEDIATE")
    fresh = db.parent / "other.db"
    other = sqlite3.connect(fresh, isolation_level=None)
    other.execute("CREATE TABLE other (a)")
    other.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="locked") as info:
        SqliteEngine(url_of(fresh, "timeout=0.2"))
    assert 0.15 < time.monotonic() - started < 2
    assert str(fresh) in str(info.value)
    other.execute("ROLLBACK")
    holder.execute("ROLLBACK")
    other.close()
    holder.close()


@pytest.mark.serial
def test_locked_past_timeout_is_store_unavailable_then_recovers(db: Path) -> None:
    engine = SqliteEngine(url_of(db, "timeout=0.2"))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    op = CommitOp(scope=ALICE, manifest=manifest("s", 1), expect=0)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="locked") as info:
        engine.commit(DOMAIN, [op])
    assert 0.15 < time.monotonic() - started < 2
    assert str(db) in str(info.value)
    assert engine.revisions([DOMAIN]) == {DOMAIN: None}, "readers are not blocked by a writer"
    holder.execute("ROLLBACK")
    holder.close()
    assert engine.commit(DOMAIN, [op]).counter == 1
    engine.close()


# ----------------------------------------------------------------- the change log


def test_change_log_is_trimmed_in_the_commit(db: Path) -> None:
    engine = SqliteEngine(url_of(db, "log_limit=5"))
    revs = [bump(engine, ALICE, f"s{i}")[1] for i in range(4)]
    epoch = revs[0].epoch

    def multi(names: list[str]) -> Revision:
        live = engine.load_skills(ALICE, names)
        ops = [
            CommitOp(
                scope=ALICE,
                manifest=manifest(s, (v := live[s].version if s in live else 0) + 1),
                expect=v,
            )
            for s in names
        ]
        return engine.commit(DOMAIN, ops)

    revs.append(multi(["a", "b", "c"]))  # 7 entries: revisions 1 and 2 trimmed
    assert engine.changes(DOMAIN, revs[0], 0) == [engine.changes(DOMAIN, revs[0], 0)[0]]
    assert engine.changes(DOMAIN, revs[0], 0)[0].op == "reset"
    assert [(c.revision.counter, c.skill) for c in engine.changes(DOMAIN, revs[1], 0)] == [
        (3, "s2"),
        (4, "s3"),
        (5, "a"),
        (5, "b"),
        (5, "c"),
    ]
    revs.append(multi(["a", "b", "c"]))  # trims 3, 4 and the first entry of revision 5
    assert engine.changes(DOMAIN, revs[3], 0)[0].op == "reset"
    assert [(c.revision.counter, c.skill) for c in engine.changes(DOMAIN, revs[4], 0)] == [
        (6, "a"),
        (6, "b"),
        (6, "c"),
    ]
    log_size = engine._db.conn().execute("SELECT count(*) FROM changes").fetchone()[0]
    assert log_size == 5
    # the epoch differs or the counter went back: reset
    assert engine.changes(DOMAIN, Revision(epoch="other", counter=6), 0)[0].op == "reset"
    assert engine.changes(DOMAIN, Revision(epoch=epoch, counter=99), 0)[0].op == "reset"
    assert engine.changes(DOMAIN, revs[-1], 0) == []
    engine.close()


@pytest.mark.serial
def test_changes_waits_and_wakes(engine: SqliteEngine) -> None:
    _, rev = bump(engine, ALICE, "s")
    started = time.monotonic()
    assert engine.changes(DOMAIN, rev, 0.3) == []
    assert 0.3 <= time.monotonic() - started < 1.0
    got: list[float] = []

    def follow() -> None:
        changes = engine.changes(DOMAIN, rev, 5)
        got.append(time.monotonic())
        assert [c.skill for c in changes] == ["s"]

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.2)
    committed = time.monotonic()
    bump(engine, ALICE, "s")
    t.join()
    assert got and got[0] - committed < 0.1


# ----------------------------------------------------------------- threads and life cycle


def test_many_threads_one_engine(engine: SqliteEngine) -> None:
    # the connections themselves, not their id()s: a thread that ended before the next began
    # (a loaded machine) has its connection closed and freed, and the next one's may reuse
    # its id
    conns: list[object] = []

    def work() -> None:
        conns.append(engine._db.conn())
        for _ in range(20):
            bump(engine, SHARED, "hot")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in conns}) == 8, "a connection per thread"
    assert engine.load_skills(SHARED, ["hot"])["hot"].version == 160
    assert len(engine.history(SHARED, "hot")) == 159


def test_connections_of_ended_threads_are_closed(engine: SqliteEngine) -> None:
    for _ in range(30):
        t = threading.Thread(target=engine.ping)
        t.start()
        t.join()
    assert len(engine._db._conns) <= 2


def _forked_child(engine: SqliteEngine) -> None:
    bump(engine, ALICE, "forked")
    engine.close()


def test_an_engine_used_before_fork_works_in_the_child(engine: SqliteEngine) -> None:
    bump(engine, ALICE, "s")
    proc = mp.get_context("fork").Process(target=_forked_child, args=(engine,))
    proc.start()
    proc.join(timeout=10)
    assert proc.exitcode == 0
    assert engine.load_skills(ALICE, ["forked"])["forked"].version == 1
    assert bump(engine, ALICE, "s")[0] == 2


def test_close_then_use_reopens(engine: SqliteEngine) -> None:
    bump(engine, ALICE, "s")
    engine.close()
    engine.ping()
    assert engine.load_skills(ALICE, ["s"])["s"].version == 1


def test_blobs_and_gc_primitives(engine: SqliteEngine) -> None:
    engine.put_blob("aa", [b"one", b"two"], now=100.0)
    assert engine.touch_blobs(["aa", "bb"], now=50.0) == {"aa"}
    assert engine.get_chunks([("aa", 1), ("aa", 0), ("aa", 2), ("bb", 0)]) == [
        b"two",
        b"one",
        None,
        None,
    ]
    assert not engine.delete_blob_if_idle("aa", cutoff=100.0), "last use never goes back"
    engine.put_blob("bb", [b""], now=10.0)
    assert list(engine.blob_shas()) == ["aa", "bb"]
    assert engine.delete_blob_if_idle("aa", cutoff=100.5)
    assert engine.get_chunks([("aa", 0), ("aa", 1)]) == [None, None]
    assert list(engine.blob_shas()) == ["bb"]


def test_blob_listing_pages(engine: SqliteEngine) -> None:
    shas = [f"{i:064x}" for i in range(1203)]
    for sha in shas:
        engine.put_blob(sha, [b"x"], now=1.0)
    assert list(engine.blob_shas()) == shas
