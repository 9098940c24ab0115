"""The Redis engine on real servers: physical layout and slots, atomic commits, the stream change
log (waiting, trimming, resets), WAIT, error mapping, recovery after kill -9 of an AOF server,
and Sentinel failovers, including one to a replica that missed writes."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis
from redis.connection import AbstractConnection
from redis.crc import key_slot

import skillfs
from skillfs.engines.base import LOG_LIMIT, CommitOp, VersionMismatch
from skillfs.engines.redis.engine import RedisEngine, ReplicationTimeout
from skillfs.errors import (
    InvalidArgument,
    InvalidPath,
    NotFound,
    PermissionDenied,
    StoreUnavailable,
)
from skillfs.model import Manifest, Revision, Scope
from support.servers import RedisCluster, RedisSentinel, RedisServer, free_port
from tests.helpers import manifest, skill_md

ALICE = Scope.user("support-bot", "alice")
SHARED = Scope.shared("support-bot")
MARKET = Scope.market("team")
DOMAIN = "agents/support-bot"


def put(scope: Scope, skill: str, version: int, expect: int | None = None) -> CommitOp:
    """The op writing `version` of a skill, expecting the one before (or `expect`)."""
    expect = version - 1 if expect is None else expect
    return CommitOp(scope=scope, manifest=manifest(skill, version), expect=expect)


def ns() -> str:
    return f"t{uuid.uuid4().hex[:10]}/"


@pytest.fixture
def engine(redis_url: str) -> Iterator[RedisEngine]:
    e = RedisEngine(redis_url)
    yield e
    e.close()


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis_server.client() as r:
        yield r


# ----------------------------------------------------------------- physical layout


def test_physical_layout_matches_the_doc(redis_url: str, raw: redis.Redis) -> None:
    store = skillfs.open_store(redis_url + "?prefix=t1/", actor="tester")
    store.publish(ALICE, "code-reviewer", {"SKILL.md": skill_md("code-reviewer")})
    store.publish(ALICE, "code-reviewer", {"SKILL.md": skill_md("code-reviewer", "v2")})
    store.publish(SHARED, "greeter", {"SKILL.md": skill_md("greeter")})
    store.publish(MARKET, "lint", {"SKILL.md": skill_md("lint")})
    store.usage.record("support-bot", {("alice", "code-reviewer"): 2})
    shas = {
        e.sha256
        for scope, skill in ((ALICE, "code-reviewer"), (SHARED, "greeter"), (MARKET, "lint"))
        for m in store.history(scope, skill)
        for e in m.files.values()
    }
    keys = {k.decode(): cast(bytes, raw.type(k)).decode() for k in cast(list[bytes], raw.keys("*"))}
    expected = {
        "t1/domains": "set",
        "t1/agents/{support-bot}/rev": "hash",
        "t1/agents/{support-bot}/log": "stream",
        "t1/agents/{support-bot}/scopes": "set",
        "t1/agents/{support-bot}/quota": "hash",
        "t1/agents/{support-bot}/usage": "hash",
        "t1/agents/{support-bot}/usage/at": "hash",
        "t1/agents/{support-bot}/users/alice/skills": "hash",
        "t1/agents/{support-bot}/users/alice/history/code-reviewer": "hash",
        "t1/agents/{support-bot}/shared/skills": "hash",
        "t1/markets/{team}/rev": "hash",
        "t1/markets/{team}/log": "stream",
        "t1/markets/{team}/scopes": "set",
        "t1/markets/{team}/quota": "hash",
        "t1/markets/{team}/skills": "hash",
    }
    for sha in shas:
        expected |= {f"t1/blobs/{{{sha}}}/meta": "string", f"t1/blobs/{{{sha}}}/0": "string"}
    assert keys == expected
    # One hash field per skill holding the manifest JSON; history fields are versions.
    live = raw.hgetall("t1/agents/{support-bot}/users/alice/skills")
    assert sorted(live) == [b"_settings/names", b"code-reviewer"]  # and the name register
    assert Manifest.model_validate_json(live[b"code-reviewer"]).version == 2
    hist = raw.hgetall("t1/agents/{support-bot}/users/alice/history/code-reviewer")
    assert list(hist) == [b"1"] and Manifest.model_validate_json(hist[b"1"]).version == 1
    rev = raw.hgetall("t1/agents/{support-bot}/rev")
    assert set(rev) == {b"epoch", b"counter", b"replid"} and rev[b"counter"] == b"3"
    log = raw.xrange("t1/agents/{support-bot}/log") or []
    assert [i for i, _ in log] == [b"1-0", b"1-1", b"2-0", b"3-0", b"3-1"]
    assert log[0][1] == {b"scope": b"user:support-bot/alice", b"skill": b"code-reviewer",
                         b"op": b"put", b"version": b"1", b"actor": b"tester",
                         b"message": b""}  # fmt: skip
    assert raw.smembers("t1/agents/{support-bot}/scopes") == {
        b"user:support-bot/alice",
        b"shared:support-bot",
    }
    assert raw.smembers("t1/domains") == {b"agents/support-bot", b"markets/team"}
    # Every key of the agent hashes to the slot of its id; every blob's keys to the blob's.
    agent_keys = [k for k in keys if k.startswith("t1/agents/")]
    assert {key_slot(k.encode()) for k in agent_keys} == {key_slot(b"support-bot")}
    for sha in shas:
        assert key_slot(f"t1/blobs/{{{sha}}}/meta".encode()) == key_slot(sha.encode())


def test_cluster_keeps_an_agent_in_one_slot_and_commits_across_its_scopes(
    redis_cluster: RedisCluster,
) -> None:
    prefix = ns()
    store = skillfs.open_store(f"{redis_cluster.url}?prefix={prefix}")
    c = store.commit([
        skillfs.Put(ALICE, "a", {"SKILL.md": skill_md("a")}),
        skillfs.Put(SHARED, "b", {"SKILL.md": skill_md("b")}),
    ])  # fmt: skip
    assert c.versions == {"a": 1, "b": 1}
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a", "v2")})
    with redis_cluster.client() as rc:
        keys = [k.decode() for k in rc.scan_iter(match=f"{prefix}agents/*")]
        per_node = {
            n.port: len(list(n.client().scan_iter(match=f"{prefix}agents/*")))
            for n in redis_cluster.nodes
        }
    assert len(keys) == 7  # rev, log, scopes, quota, two skills hashes, one history
    assert {rc.keyslot(k) for k in keys} == {key_slot(b"support-bot")}
    assert sorted(per_node.values()) == [0, 0, 7]
    assert store.agents() == ["support-bot"] and store.users("support-bot") == ["alice"]


def test_prefix_with_a_hash_tag_is_refused() -> None:
    with pytest.raises(InvalidPath, match="hash tags"):
        RedisEngine("redis://127.0.0.1:1/0?prefix=a{b}/")


# ----------------------------------------------------------------- atomic commit


def test_version_mismatch_names_the_skill_and_writes_nothing(
    engine: RedisEngine, raw: redis.Redis
) -> None:
    first = engine.commit(DOMAIN, [put(ALICE, "a", 1)])
    before = {k: raw.dump(k) for k in raw.keys("*")}
    with pytest.raises(VersionMismatch) as err:
        engine.commit(DOMAIN, [put(SHARED, "new", 1), put(ALICE, "a", 2, expect=5)])
    assert (err.value.scope, err.value.skill, err.value.current) == (ALICE, "a", 1)
    with pytest.raises(VersionMismatch) as err:
        engine.commit(DOMAIN, [put(ALICE, "a", 1, expect=0)])
    assert err.value.current == 1
    assert {k: raw.dump(k) for k in raw.keys("*")} == before
    second = engine.commit(DOMAIN, [put(SHARED, "new", 1), put(ALICE, "a", 2)])
    assert second == Revision(epoch=first.epoch, counter=first.counter + 1)
    assert [m.version for m in engine.history(ALICE, "a")] == [1]
    assert engine.revisions([DOMAIN, "agents/nobody", "markets/team"]) == {
        DOMAIN: second,
        "agents/nobody": None,
        "markets/team": None,
    }


def test_racing_commits_in_one_slot_serialize(engine: RedisEngine, redis_url: str) -> None:
    """Eight clients bump one skill 25 times each: no version is written twice or lost."""
    won: list[int] = []
    lock = threading.Lock()

    def bump() -> None:
        e = RedisEngine(redis_url)
        for _ in range(25):
            while True:
                cur = e.load_skills(ALICE, ["a"]).get("a")
                v = cur.version if cur else 0
                try:
                    e.commit(DOMAIN, [put(ALICE, "a", v + 1)])
                except VersionMismatch:
                    continue
                with lock:
                    won.append(v + 1)
                break
        e.close()

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == list(range(1, 201))
    assert engine.load_skills(ALICE, ["a"])["a"].version == 200
    assert [m.version for m in engine.history(ALICE, "a")] == list(range(199, 0, -1))
    rev = engine.revisions([DOMAIN])[DOMAIN]
    assert rev is not None and rev.counter == 200


# ----------------------------------------------------------------- change log


@pytest.mark.serial
def test_changes_wait_for_a_commit_and_time_out(redis_url: str) -> None:
    engine = RedisEngine(redis_url, socket_timeout=1.0)
    rev = engine.commit(DOMAIN, [put(ALICE, "a", 1)])
    timer = threading.Timer(0.3, lambda: engine.commit(DOMAIN, [put(SHARED, "b", 1)]))
    t0 = time.monotonic()
    timer.start()
    got = engine.changes(DOMAIN, rev, timeout=5)
    assert 0.25 < time.monotonic() - t0 < 2
    assert [(c.op, c.scope, c.skill, c.version, c.revision.counter) for c in got] == [
        ("put", SHARED, "b", 1, rev.counter + 1)
    ]
    # Waiting longer than the socket timeout (1 s) must not raise a TimeoutError.
    t0 = time.monotonic()
    assert engine.changes(DOMAIN, got[-1].revision, timeout=2.5) == []
    assert 2.4 < time.monotonic() - t0 < 4
    assert engine.changes("agents/nobody", Revision(epoch="", counter=0), timeout=0.1) == []
    engine.close()


def test_changes_are_whole_commits_in_order(engine: RedisEngine) -> None:
    start = engine.commit(DOMAIN, [put(ALICE, "x", 1)])
    for i in range(150):
        engine.commit(DOMAIN, [put(ALICE, f"s{i}", 1), put(SHARED, f"s{i}", 1)])
    seen: list[tuple[int, str]] = []
    since = start
    while batch := engine.changes(DOMAIN, since, timeout=0):
        assert len(batch) % 2 == 0  # a batch never splits a commit
        seen += [(c.revision.counter, str(c.scope)) for c in batch]
        since = batch[-1].revision
    scopes = [str(ALICE), str(SHARED)]  # in a commit, in the order of its ops
    assert seen == [(counter, s) for counter in range(2, 152) for s in scopes]
    assert since == engine.revisions([DOMAIN])[DOMAIN]


def test_changes_reset_on_trimmed_log_other_epoch_or_counter_back(
    redis_url: str, raw: redis.Redis
) -> None:
    engine = RedisEngine(f"{redis_url}?log_limit=10")
    first = engine.commit(DOMAIN, [put(ALICE, "x", 1)])
    for round_ in range(3):
        engine.commit(DOMAIN, [put(ALICE, f"r{round_}-{i}", 1) for i in range(150)])
    before_last = engine.revisions([DOMAIN])[DOMAIN]
    assert before_last is not None
    last = engine.commit(DOMAIN, [put(ALICE, "y", 1), put(ALICE, "z", 1)])
    assert raw.xlen("agents/{support-bot}/log") < 300  # MAXLEN ~ trimmed whole stream nodes
    assert engine.changes(DOMAIN, first, 0) == [skillfs.Change(revision=last, op="reset")]
    assert [c.skill for c in engine.changes(DOMAIN, before_last, 0)] == ["y", "z"]
    reset = [skillfs.Change(revision=last, op="reset")]
    assert engine.changes(DOMAIN, Revision(epoch="other", counter=1), 0) == reset
    assert engine.changes(DOMAIN, Revision(epoch=last.epoch, counter=last.counter + 5), 0) == reset
    # A commit whose first entries were trimmed is a reset too, not a partial commit.
    raw.xtrim("agents/{support-bot}/log", minid=f"{last.counter}-1", approximate=False)
    assert engine.changes(DOMAIN, before_last, 0) == reset
    assert LOG_LIMIT == 10_000 and RedisEngine(redis_url).log_limit == LOG_LIMIT


def test_follow_through_the_store(redis_url: str) -> None:
    store = skillfs.open_store(redis_url)
    rev = store.publish(ALICE, "a", {"SKILL.md": skill_md("a")}).revision
    threading.Timer(0.2, lambda: store.delete(ALICE, "a")).start()
    got = list(store.changes.follow("support-bot", since=rev, timeout=1.5))
    assert [(c.op, c.skill, c.version) for c in got] == [("remove", "a", 2)]


# ----------------------------------------------------------------- blobs and usage


@pytest.mark.parametrize("topology", ["standalone", "cluster"])
def test_blob_primitives(request: pytest.FixtureRequest, topology: str) -> None:
    server = request.getfixturevalue(f"redis_{'server' if topology == 'standalone' else topology}")
    engine = RedisEngine(f"{server.url}?prefix={ns()}")
    sha, other = "a" * 64, "b" * 64
    engine.put_blob(sha, [b"x" * 10, b"y" * 10, b"z"], now=100.0)
    engine.put_blob(other, [b"o"], now=100.0)
    assert engine.get_chunks([(sha, 2), (other, 0), (sha, 0), (sha, 3), ("c" * 64, 0)]) == [
        b"z", b"o", b"x" * 10, None, None,
    ]  # fmt: skip
    assert engine.touch_blobs([sha, "c" * 64], now=200.0) == {sha}
    assert sorted(engine.blob_shas()) == [sha, other]
    assert not engine.delete_blob_if_idle(sha, cutoff=150.0)  # touched at 200
    assert engine.delete_blob_if_idle(sha, cutoff=250.0)
    assert not engine.delete_blob_if_idle(sha, cutoff=250.0)
    assert engine.get_chunks([(sha, 0), (sha, 1), (sha, 2), (other, 0)]) == [None, None, None, b"o"]
    assert list(engine.blob_shas()) == [other]
    engine.add_usage("support-bot", {("alice", "a"): 2, ("", "market:team/x"): 1})
    engine.add_usage("support-bot", {("alice", "a"): 3})
    assert engine.usage("support-bot") == {("alice", "a"): 5, ("", "market:team/x"): 1}
    engine.close()


def test_cluster_gc_keeps_live_blobs_when_the_domain_index_is_lost(
    redis_cluster: RedisCluster,
) -> None:
    """Outside (fault) testing: the domain index is one key on one Cluster node; restarted
    without persistence it came back empty while the agents on the other nodes stayed, and
    `gc` marked nothing and swept every live skill's blobs (C4). GC now finds the domains
    by their revision keys too; the next commit of a domain lists it again."""
    prefix = ns()
    store = skillfs.open_store(f"{redis_cluster.url}?prefix={prefix}", clock=lambda: 1000.0)
    for i in range(6):
        store.publish(Scope.shared(f"agent-{i}"), "s", {"SKILL.md": skill_md("s", f"v{i}")})
    store.publish(MARKET, "m", {"SKILL.md": skill_md("m")})
    with redis_cluster.client() as rc:
        assert rc.delete(f"{prefix}domains") == 1  # what the restarted node lost
    assert store.agents() == []  # listings read the index
    report = skillfs.open_store(f"{redis_cluster.url}?prefix={prefix}").gc(grace=0)
    assert report.blobs_deleted == 0 and report.blobs_referenced == 7
    for i in range(6):
        assert b"v" + str(i).encode() in store.read(Scope.shared(f"agent-{i}"), "s", "SKILL.md")
    store.publish(Scope.shared("agent-0"), "s", {"SKILL.md": skill_md("s", "again")})
    assert store.agents() == ["agent-0"]
    store.close()


def test_gc_frees_a_store_at_maxmemory(tmp_path: Path) -> None:
    """Outside (fault) testing: at maxmemory with `noeviction` (engine-redis.md's advice)
    every write fails, and `gc` did too: its delete script was refused as a write. It only
    deletes, and now runs over maxmemory."""
    server = RedisServer(
        tmp_path, extra_args=["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]
    ).start()
    try:
        store = skillfs.open_store(server.url, retry_for=0)
        stored = 0
        with pytest.raises(StoreUnavailable, match="maxmemory"):
            for _ in range(200):  # garbage: blobs no manifest names (an upload never committed)
                data = os.urandom(64 * 1024)
                store.blobs.put(hashlib.sha256(data).hexdigest(), data, 0.0)
                stored += 1
        assert stored > 10
        report = store.gc(grace=0)
        assert report.blobs_deleted == stored
        store.publish(ALICE, "fits-again", {"SKILL.md": skill_md("fits-again")})
        store.close()
    finally:
        server.stop()


def test_revisions_of_many_domains_across_cluster_slots(redis_cluster: RedisCluster) -> None:
    engine = RedisEngine(f"{redis_cluster.url}?prefix={ns()}")
    want: dict[str, Revision | None] = {}
    for i in range(40):
        scope = Scope.shared(f"agent-{i}") if i % 2 else Scope.market(f"market-{i}")
        want[scope.domain] = engine.commit(scope.domain, [put(scope, "s", 1)])
    want["agents/never-written"] = None
    with redis_cluster.client() as rc:
        nodes = {rc.get_node_from_key(f"x/{{{d.split('/')[1]}}}").port for d in want}
    assert len(nodes) == 3  # the domains really are spread over every node
    assert engine.revisions(list(want)) == want
    engine.close()


# ----------------------------------------------------------------- WAIT and error mapping


def test_wait_for_replicas(redis_sentinel: RedisSentinel, redis_server: RedisServer) -> None:
    prefix = ns()
    store = skillfs.open_store(f"{redis_sentinel.url}?prefix={prefix}&wait=1")
    assert store.publish(ALICE, "a", {"SKILL.md": skill_md("a")}).version == 1
    # Two replicas never confirm: the error says so, and the commit stays (WAIT is no rollback).
    strict = skillfs.open_store(f"{redis_sentinel.url}?prefix={prefix}&wait=2&wait_timeout=100")
    with pytest.raises(ReplicationTimeout, match="1 of 2 replicas"):
        strict.publish(ALICE, "a", {"SKILL.md": skill_md("a", "v2")})
    assert store.manifest(ALICE, "a").version == 2
    alone = skillfs.open_store(f"{redis_server.url}?prefix={prefix}&wait=1&wait_timeout=50")
    with pytest.raises(ReplicationTimeout, match="0 of 1"):
        alone.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    assert alone.manifest(ALICE, "a").version == 1


def test_wait_in_cluster_goes_to_the_slots_node(redis_cluster: RedisCluster) -> None:
    url = f"{redis_cluster.url}?prefix={ns()}&wait=1&wait_timeout=50"
    store = skillfs.open_store(url)
    for agent in ("a1", "b2", "c3", "d4"):  # spread over nodes: no MOVED, only missing replicas
        with pytest.raises(ReplicationTimeout, match="0 of 1"):
            store.publish(Scope.shared(agent), "s", {"SKILL.md": skill_md("s")})
        assert store.manifest(Scope.shared(agent), "s").version == 1
    with pytest.raises(InvalidArgument, match="wait"):
        RedisEngine(f"{redis_cluster.url}?wait=x")


def _refused_writes_are_unavailable(server: RedisServer, reply: str) -> None:
    """Every kind of write the engine sends — a plain pipeline (touch), a MULTI (blob upload),
    the commit script — refused with `reply` is StoreUnavailable, however redis-py wraps it."""
    engine = RedisEngine(server.url)
    sha = "ab" * 32
    for write in (
        lambda: engine.touch_blobs([sha], 1.0),
        lambda: engine.put_blob(sha, [b"x", b"y"], 1.0),
        lambda: engine.commit(DOMAIN, [put(ALICE, "a", 1)]),
        lambda: engine.add_usage("support-bot", {("alice", "a"): 1}),
    ):
        with pytest.raises(StoreUnavailable, match=reply):
            write()
    with server.client() as r:
        assert r.keys("*") == []
    assert engine.load_scope(ALICE) == {}  # reads still work
    store = skillfs.Store(engine, retry_for=0.2)  # and the store reports it as an outage
    with pytest.raises(StoreUnavailable, match=reply):
        store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    engine.close()


def test_no_replicas_to_write_is_unavailable_and_writes_nothing(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", extra_args=["--min-replicas-to-write", "1"]) as server:
        _refused_writes_are_unavailable(server, "NOREPLICAS")


def test_writes_stopped_after_a_failed_save_are_unavailable(tmp_path: Path) -> None:
    """MISCONF: Redis stops writes when its last RDB save failed (stop-writes-on-bgsave-error)."""
    data = tmp_path / "data"
    data.mkdir()
    with RedisServer(tmp_path / "r", extra_args=["--dir", str(data)]) as server:
        with server.client() as r:
            r.config_set("save", "3600 1")
            data.rmdir()  # the next save cannot write its file
            r.bgsave()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                info = r.info("persistence")
                if not info["rdb_bgsave_in_progress"] and info["rdb_last_bgsave_status"] == "err":
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"the save did not fail: {r.info('persistence')}")
        try:
            _refused_writes_are_unavailable(server, "MISCONF")
        finally:
            with server.client() as r:
                r.config_set("save", "")  # else SIGTERM's own save fails and Redis stays up


def test_writing_to_a_replica_is_unavailable(redis_sentinel: RedisSentinel) -> None:
    engine = RedisEngine(f"{redis_sentinel.replica.url}?prefix={ns()}")
    with pytest.raises(StoreUnavailable, match="ReadOnlyError"):
        engine.commit(DOMAIN, [put(ALICE, "a", 1)])
    engine.close()


def test_a_timeout_through_sentinel_leaves_no_reply_behind(redis_sentinel: RedisSentinel) -> None:
    """Outside (fault) testing: a command that timed out left its connection in the pool with
    the reply still to come (redis-py's sentinel connections do not disconnect on an error
    unless the retry covers it), and every later command read the one before's reply."""
    engine = RedisEngine(f"{redis_sentinel.url}?prefix={ns()}&socket_timeout=0.2&max_connections=1")
    engine.commit(DOMAIN, [put(ALICE, "a", 1)])
    pid = redis_sentinel.primary.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # under the sentinel's down-after (1 s): no failover
    try:
        with pytest.raises(StoreUnavailable, match="Timeout"):
            engine.load_skills(ALICE, ["a"])
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(0.3)  # the late reply, had the connection been kept, is on its socket now
    assert engine.load_skills(ALICE, ["a"])["a"].version == 1
    assert engine.revisions([DOMAIN])[DOMAIN] is not None
    engine.close()


def test_a_cluster_whose_nodes_all_went_away_is_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside (fault) testing: an existing client whose nodes were all gone raised redis-py's
    RedisClusterException, no SkillfsError: not retried, and a worker's
    `snapshot(allow_stale=True)` raised it instead of keeping its last snapshot. The change
    notices' listener logged a warning at every retry; now once."""
    caplog.set_level(logging.INFO, logger="skillfs.engines.redis.watch")
    with RedisCluster(tmp_path) as cluster:
        store = skillfs.open_store(f"{cluster.url}?prefix={ns()}", retry_for=0.5)
        store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
        skills = skillfs.Skills(store, "support-bot", "alice")
        before = skills.snapshot()
        cluster.stop()
        with pytest.raises(StoreUnavailable, match="is unavailable"):
            store.manifest(ALICE, "a")
        stale = skills.snapshot(allow_stale=True)
        assert stale.stale and stale.token == before.token
        time.sleep(2.0)  # the listener retries after 0.05, 0.1, 0.2, 0.4, 0.8 s ...
        said = [r for r in caplog.records if r.name == "skillfs.engines.redis.watch"]
        assert len(said) == 1 and "retrying in the background" in said[0].getMessage()
        skills.close()
        store.close()


def test_unreachable_stores_are_unavailable_without_the_password() -> None:
    port = free_port()
    urls = [
        f"redis://bob:s3cret@127.0.0.1:{port}/0",
        f"rediss://127.0.0.1:{port}/0",
        f"redis+cluster://:s3cret@127.0.0.1:{port},127.0.0.1:{free_port()}",
        f"redis+sentinel://:s3cret@127.0.0.1:{port}/m/0",
        # fault testing: a password in the query was printed as given
        f"redis+sentinel://127.0.0.1:{port}/m/0?sentinel_password=s3cret",
        f"rediss://127.0.0.1:{port}/0?ssl_password=s3cret&ssl_cert_reqs=none",
    ]
    for url in urls:
        engine = RedisEngine(url, socket_timeout=1.0)  # opening never needs the server
        with pytest.raises(StoreUnavailable) as err:
            engine.ping()
        assert "s3cret" not in str(err.value) and f"127.0.0.1:{port}" in str(err.value)
        with pytest.raises(StoreUnavailable):
            engine.revisions([DOMAIN])
        engine.close()


def test_tls_against_a_plain_server_is_unavailable(redis_server: RedisServer) -> None:
    engine = RedisEngine(f"rediss://127.0.0.1:{redis_server.port}/0", socket_timeout=1.0)
    with pytest.raises(StoreUnavailable):
        engine.ping()


def test_wrong_password_is_permission_denied(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r") as server:
        with server.client() as r:
            r.config_set("requirepass", "s3cret")
        with pytest.raises(PermissionDenied, match="credentials") as err:
            RedisEngine(f"redis://:wrong@127.0.0.1:{server.port}/0").ping()
        assert "wrong" not in str(err.value)
        good = RedisEngine(f"redis://:s3cret@127.0.0.1:{server.port}/0")
        good.commit(DOMAIN, [put(ALICE, "a", 1)])
        assert list(good.load_scope(ALICE)) == ["a"]


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://127.0.0.1:26379",
        "redis+sentinel://127.0.0.1:26379/m/zero",
        "redis+cluster:///",
        "redis://127.0.0.1/0?wait=-1",
        "redis://127.0.0.1/0?wait_timeout=0",
        "redis://127.0.0.1/0?wiat=1",
        "redis://127.0.0.1/0?ssl_ca_certs=/ca.pem",  # TLS options only with rediss://
        "redis+cluster://127.0.0.1:1?log_limit=many",
        # redis-py's own ValueErrors, and a database it would read as 0 (outside testing)
        "redis://127.0.0.1:notaport/0",
        "redis://127.0.0.1:99999/0",
        "redis://127.0.0.1:6379/0?max_connections=abc",
        "redis://",
        "redis://127.0.0.1:6379/abc",
        "redis+cluster://127.0.0.1:99999",
        "redis+cluster://127.0.0.1:7000?max_connections=x",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgument):
        RedisEngine(url)


def test_a_database_the_server_does_not_have_is_named(redis_server: RedisServer) -> None:
    with pytest.raises(InvalidPath, match="no such database"):
        RedisEngine(f"redis://127.0.0.1:{redis_server.port}/99").ping()


def test_url_options_reach_the_client(
    redis_server: RedisServer, redis_sentinel: RedisSentinel
) -> None:
    for url in (
        f"{redis_server.url}?client_name=skillfs-a&socket_timeout=2&log_limit=50",
        f"{redis_sentinel.url}?client_name=skillfs-a&sentinel_password=&max_connections=8",
    ):
        engine = RedisEngine(url)
        engine.commit(DOMAIN, [put(SHARED, "a", 1)])
        names = [c["name"] for c in engine._client.client_list()]
        assert "skillfs-a" in names
        engine.close()
    assert RedisEngine(f"{redis_server.url}?log_limit=50").log_limit == 50


# ----------------------------------------------------------------- restarts and failovers


@pytest.mark.serial
@pytest.mark.slow
def test_kill9_of_an_aof_server_keeps_acknowledged_writes_and_the_client_recovers(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "aof", appendonly=True) as server:
        store = skillfs.open_store(server.url)
        acked: list[tuple[str, int]] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer() -> None:
            i = 0
            while not stop.is_set():
                try:
                    c = store.publish(SHARED, f"s{i % 40}", {"SKILL.md": skill_md(f"s{i}")})
                except StoreUnavailable as exc:  # only if the outage outlasts retry_for
                    errors.append(exc)
                    continue
                acked.append((f"s{i % 40}", c.version))
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(0.5)
        n_before = len(acked)
        server.kill()
        with pytest.raises(StoreUnavailable, match="unavailable"):
            store.engine.ping()
        time.sleep(0.5)
        server.start()
        time.sleep(0.5)
        stop.set()
        t.join(timeout=30)
        assert n_before > 10 and len(acked) > n_before and not errors
        latest: dict[str, int] = {}
        for skill, version in acked:
            latest[skill] = max(latest.get(skill, 0), version)
        fresh = skillfs.open_store(server.url)
        live = fresh.manifests(SHARED)
        for skill, version in latest.items():
            assert live[skill].version >= version
        assert live == store.manifests(SHARED)  # the old client works without being recreated


@pytest.mark.slow
def test_sentinel_failover_client_recovers_and_replicated_writes_survive(tmp_path: Path) -> None:
    with RedisSentinel(tmp_path / "s") as sentinel:
        plain = skillfs.open_store(sentinel.url)
        waiting = skillfs.open_store(f"{sentinel.url}?wait=1")
        revs = [waiting.publish(ALICE, f"s{i}", {"SKILL.md": skill_md(f"s{i}")}).revision
                for i in range(10)]  # fmt: skip
        assert plain.revision("support-bot") == revs[-1]
        sentinel.primary.kill()
        sentinel.wait_failover()
        # The same clients, not recreated: every WAITed write is on the promoted replica.
        assert plain.skills(ALICE) == [f"s{i}" for i in range(10)]
        assert plain.revision("support-bot") == revs[-1]
        after = plain.publish(ALICE, "s0", {"SKILL.md": skill_md("s0", "v2")}).revision
        # The promoted server has a new replication ID: the epoch changes, followers reload.
        assert after.epoch != revs[-1].epoch
        assert plain.engine.changes(DOMAIN, revs[-1], 0) == [
            skillfs.Change(revision=after, op="reset")
        ]
        # No replica is left to confirm a WAIT: the write is reported, and not rolled back.
        with pytest.raises(ReplicationTimeout):
            waiting.publish(ALICE, "late", {"SKILL.md": skill_md("late")})
        assert plain.manifest(ALICE, "late").version == 1


@pytest.mark.slow
def test_failover_to_a_replica_that_missed_writes_makes_followers_reload(tmp_path: Path) -> None:
    """How the lost write is made: the replica is stopped (SIGSTOP), the primary drops the
    replication link (CLIENT KILL TYPE replica), a commit lands on the primary only, the primary
    is killed (kill -9), the replica resumes (SIGCONT) and Sentinel promotes it."""
    with RedisSentinel(tmp_path / "s") as sentinel:
        store = skillfs.open_store(f"{sentinel.url}?wait=1")
        a = store.publish(ALICE, "a", {"SKILL.md": skill_md("a")}).revision  # on both
        follower = RedisEngine(sentinel.url)
        assert follower.revisions([DOMAIN])[DOMAIN] == a
        replica_pid = sentinel.replica.pid
        assert replica_pid is not None
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            with sentinel.primary.client() as p:
                assert p.client_kill_filter(_type="replica") == 1
            lost = RedisEngine(sentinel.url).commit(DOMAIN, [put(ALICE, "b", 1)])  # no WAIT
            assert follower.revisions([DOMAIN])[DOMAIN] == lost
            sentinel.primary.kill()
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        sentinel.wait_failover()
        # The follower's next check sees the counter go back in the same epoch: reload.
        now = follower.revisions([DOMAIN])[DOMAIN]
        assert now == a and now.counter < lost.counter
        assert store.skills(ALICE) == ["a"]
        with pytest.raises(NotFound):
            store.manifest(ALICE, "b")
        # The next commits overtake the lost counter under a new epoch, never as the same
        # revisions with different contents.
        plain = RedisEngine(sentinel.url)
        again = plain.commit(DOMAIN, [put(ALICE, "c", 1)])
        assert again.counter == lost.counter and again.epoch != lost.epoch
        reset = [skillfs.Change(revision=again, op="reset")]
        assert follower.changes(DOMAIN, lost, 0) == reset
        assert follower.changes(DOMAIN, a, 0) == reset


@pytest.mark.parametrize("topology", ["standalone", "cluster"])
def test_batched_reads_are_one_round_trip_per_node(
    request: pytest.FixtureRequest, topology: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """revisions() and get_chunks() send one batch per server node, however many keys."""
    server = request.getfixturevalue(f"redis_{'server' if topology == 'standalone' else topology}")
    engine = RedisEngine(f"{server.url}?prefix={ns()}")
    domains = [f"agents/agent-{i}" for i in range(30)]
    for d in domains:
        engine.commit(d, [put(Scope.shared(d.split("/")[1]), "s", 1)])
    shas = [f"{i:064x}" for i in range(30)]
    for sha in shas:
        engine.put_blob(sha, [b"a", b"b"], now=1.0)
    engine.revisions(domains)  # warm up: connections to every node exist
    sends: list[object] = []
    original = AbstractConnection.send_packed_command

    def counting(self: AbstractConnection, command: object, check_health: bool = True) -> None:
        sends.append(command)
        original(self, command, check_health)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    nodes = 1 if topology == "standalone" else 3
    revs = engine.revisions(domains)
    assert len(sends) == nodes and all(r is not None for r in revs.values())
    sends.clear()
    chunks = engine.get_chunks([(sha, i) for sha in shas for i in (0, 1)])
    assert len(sends) == nodes and chunks == [b"a", b"b"] * 30
    engine.close()


def test_wait_in_cluster_follows_a_moved_slot(redis_cluster: RedisCluster) -> None:
    """A commit with WAIT runs on the node the client's slot map names: after the agent's slot
    moved, that node answers MOVED, the engine learns the new map, and a retry lands right."""
    prefix = ns()
    engine = RedisEngine(f"{redis_cluster.url}?prefix={prefix}&wait=1&wait_timeout=50")
    engine.ping()  # the client now holds the slot map
    clients = [n.client() for n in redis_cluster.nodes]
    ids = [cast(bytes, c.cluster("MYID")).decode() for c in clients]
    while True:  # a slot no other test's keys live in: a slot holding keys cannot be moved
        agent = f"moved-{uuid.uuid4().hex[:8]}"
        slot = key_slot(agent.encode())
        owner = next(i for i, c in enumerate(clients) if slot in _slots_of(c, ids[i]))
        if clients[owner].cluster("COUNTKEYSINSLOT", slot) == 0:
            break
    target = (owner + 1) % len(clients)
    try:
        for c in clients:
            c.cluster("SETSLOT", slot, "NODE", ids[target])
        scope = Scope.shared(agent)
        with pytest.raises(StoreUnavailable, match="MovedError"):
            engine.commit(scope.domain, [put(scope, "s", 1)])
        # The store retries a transient error; here, by hand, a few times: on a loaded machine
        # the nodes' gossip may still disagree when the engine reloads the slot map once.
        for _ in range(5):
            try:
                engine.commit(scope.domain, [put(scope, "s", 1)])
            except StoreUnavailable as exc:
                assert "MovedError" in str(exc)
                time.sleep(0.2)
                continue
            except ReplicationTimeout as exc:
                assert "0 of 1" in str(exc)
                break
            pytest.fail("WAIT with no replica must time out")
        else:
            pytest.fail("the commit never reached the slot's new node")
        assert engine.load_skills(scope, ["s"])["s"].version == 1
        assert clients[target].cluster("COUNTKEYSINSLOT", slot) > 0
    finally:
        for key in clients[target].scan_iter(match=f"{prefix}*"):
            clients[target].delete(key)
        for c in clients:
            c.cluster("SETSLOT", slot, "NODE", ids[owner])
            c.close()
        engine.close()
    redis_cluster.wait_ok()


def _slots_of(client: redis.Redis, node_id: str) -> set[int]:
    """The slots a node owns, from CLUSTER SLOTS."""
    owned: set[int] = set()
    for start, end, primary, *_ in client.cluster("SLOTS"):
        if primary[2].decode() == node_id:
            owned.update(range(start, end + 1))
    return owned
