"""The store-server fixtures give working servers; kills and restarts behave as fault tests need."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from support.servers import (
    HOST,
    EtcdCluster,
    EtcdServer,
    RedisCluster,
    RedisSentinel,
    RedisServer,
    ServerError,
)

T = TypeVar("T")


def eventually(fn: Callable[[], T], timeout: float = 10.0) -> T:
    """fn() once it stops raising (an election or failover in progress), bounded."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too: look at its state
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


# ---------------------------------------------------------------------------- fixtures


def test_redis_server(redis_url: str, redis_server: RedisServer) -> None:
    assert redis_url == f"redis://{HOST}:{redis_server.port}/0"
    with redis_server.client() as r:
        assert r.dbsize() == 0  # redis_url flushed it
        r.set("k", b"v")
        assert r.get("k") == b"v"


def test_redis_url_gives_an_empty_server(redis_url: str, redis_server: RedisServer) -> None:
    with redis_server.client() as r:
        assert r.dbsize() == 0


def test_redis_cluster_key_on_each_master(redis_cluster: RedisCluster) -> None:
    assert redis_cluster.url == "redis+cluster://" + ",".join(
        f"{HOST}:{p}" for p in redis_cluster.ports
    )
    redis_cluster.flush()
    with redis_cluster.client() as rc:
        owners: dict[int, str] = {}  # node port -> a key stored there
        i = 0
        while len(owners) < len(redis_cluster.nodes):
            key = f"key-{i}"
            owners.setdefault(int(rc.get_node_from_key(key).port), key)
            i += 1
        for key in owners.values():
            rc.set(key, key.encode())
            assert rc.get(key) == key.encode()
    for node in redis_cluster.nodes:  # each master holds its key itself
        with node.client() as r:
            assert r.get(owners[node.port]) == owners[node.port].encode()
            assert r.dbsize() == 1


def test_redis_sentinel_writes_reach_primary_and_replica(redis_sentinel: RedisSentinel) -> None:
    s = redis_sentinel
    assert s.url == f"redis+sentinel://{HOST}:{s.sentinel_port}/m/0"
    assert s.master_address() == s.primary.address
    with s.client() as r:
        r.set("through-sentinel", b"1")
        assert r.wait(1, 5000) == 1  # the replica acknowledged it
    with s.primary.client() as r:
        assert r.get("through-sentinel") == b"1"
    with s.replica.client() as r:
        assert r.get("through-sentinel") == b"1"


def test_etcd_server(etcd_url: str, etcd_server: EtcdServer) -> None:
    assert etcd_url == f"etcd://{HOST}:{etcd_server.port}"
    c = etcd_server.client()
    try:
        assert list(c.get_all()) == []  # etcd_url deleted everything
        c.put("skills/a", b"x")
        c.put("\x7f", b"y")
        value, _ = c.get("skills/a")
        assert value == b"x"
    finally:
        c.close()


def test_etcd_url_gives_an_empty_server(etcd_url: str, etcd_server: EtcdServer) -> None:
    c = etcd_server.client()
    try:
        assert list(c.get_all()) == []
    finally:
        c.close()


def test_etcd_cluster_through_each_member(etcd_cluster: EtcdCluster) -> None:
    assert etcd_cluster.url == "etcd://" + ",".join(etcd_cluster.endpoints)
    assert len(etcd_cluster.endpoints) == 3
    clients = [etcd_cluster.client(i) for i in range(3)]
    try:
        for i, c in enumerate(clients):
            c.put(f"via/{i}", str(i).encode())
        for c in clients:  # linearizable reads: every member sees every write
            for i in range(3):
                assert c.get(f"via/{i}")[0] == str(i).encode()
        assert 0 <= etcd_cluster.leader_index() < 3
    finally:
        for c in clients:
            c.close()


# ---------------------------------------------------------------------------- failures


def test_a_server_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        server = RedisServer(tmp_path, port=taken.getsockname()[1])
        with pytest.raises(ServerError, match=r"(?i)address already in use"):
            server.start(timeout=10)
    assert not server.running


def test_servers_die_with_the_python_process(tmp_path: Path) -> None:
    # The process that started them is SIGKILLed, so no teardown or atexit hook runs.
    root = Path(__file__).resolve().parents[2]
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(root)!r})
        from support.servers import RedisServer
        r = RedisServer({str(tmp_path)!r}).start()
        print(r.pid, flush=True)
        os.kill(os.getpid(), 9)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    eventually(lambda: None if not pid_alive(pid) else 1 / 0, timeout=5)


# ---------------------------------------------------------------------------- faults


@pytest.mark.slow
def test_redis_aof_keeps_a_write_across_kill_9(tmp_path: Path) -> None:
    with RedisServer(tmp_path, appendonly=True) as server:
        with server.client() as r:
            r.set("durable", b"yes")
        pid = server.pid
        assert pid is not None
        server.kill()
        assert not server.running and not pid_alive(pid)
        port = server.port
        server.restart()
        assert server.port == port
        with server.client() as r:
            assert r.get("durable") == b"yes"
        pid = server.pid
    assert pid is not None and not pid_alive(pid)


@pytest.mark.slow
def test_etcd_writes_continue_after_the_leader_is_killed(tmp_path: Path) -> None:
    with EtcdCluster(tmp_path, members=3) as cluster:
        old = cluster.leader_index()
        c = cluster.client(old)
        c.put("before", b"1")
        c.close()
        t0 = time.monotonic()
        cluster.kill(old)
        new = cluster.leader_index(timeout=10)
        assert new != old
        survivors = [i for i in range(3) if i != old]
        for i in survivors:
            c = cluster.client(i)
            try:
                eventually(lambda c=c, i=i: c.put(f"after/{i}", b"1"))
                assert c.get("before")[0] == b"1"
            finally:
                c.close()
        print(f"writes through both survivors {time.monotonic() - t0:.2f}s after the kill")
        cluster.restart(old)  # rejoins with its data dir and catches up
        c = cluster.client(old)
        try:
            for i in survivors:
                assert c.get(f"after/{i}")[0] == b"1"
        finally:
            c.close()
        pids = [cluster.pid(i) for i in range(3)]
    assert not cluster.running()
    assert not any(pid_alive(p) for p in pids if p is not None)
    assert not (tmp_path / "n1" / "data").exists()  # leaving the block dropped the WAL
    assert (tmp_path / "n1" / "etcd.log").exists()


@pytest.mark.slow
def test_redis_sentinel_promotes_the_replica(tmp_path: Path) -> None:
    with RedisSentinel(tmp_path) as s:
        with s.client() as r:
            r.set("k", b"v")
            assert r.wait(1, 5000) == 1
        old = s.primary
        old.kill()
        t0 = time.monotonic()
        new = s.wait_failover(timeout=30)
        print(f"failover took {time.monotonic() - t0:.2f}s")
        assert new == s.primary.address != old.address
        assert s.replica is old
        with s.client() as r:
            assert r.get("k") == b"v"
            r.set("k2", b"v2")
