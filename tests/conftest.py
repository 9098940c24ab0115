"""Shared pytest fixtures.

Real servers come from support/servers.py. A server fixture starts its server only when a test
asks for it, once per session, and stops it at the end. A server that cannot start fails the
tests that need it (ServerError with the server's log tail); nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.servers import (
    EtcdCluster,
    EtcdServer,
    RedisCluster,
    RedisSentinel,
    RedisServer,
)

# `store_url` / `store`: a fresh namespace per test on the topologies of its tier.
pytest_plugins = ["tests.stores"]

# universal-pathlib's vendored BaseTests (tests/_vendor/upath_tests): assertion introspection
# for their asserts, registered before tests/fs/test_fs_upath.py imports them
pytest.register_assert_rewrite("upath.tests.cases", "upath.tests.utils")

# ============================================================================ store servers
# Session-scoped: one of each per run, started lazily. Start-up times are listed at the end
# of the run. The function-scoped *_url fixtures hand each test an emptied shared server.

_startup_seconds: dict[str, float] = {}


def _started(name: str, server: RedisServer | RedisCluster | RedisSentinel | EtcdCluster) -> None:
    if server.startup_seconds is not None:
        _startup_seconds[name] = server.startup_seconds


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        _started("redis_server", server)
        yield server


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        _started("redis_cluster", cluster)
        yield cluster


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinel]:
    with RedisSentinel(tmp_path_factory.mktemp("redis-sentinel")) as sentinel:
        _started("redis_sentinel", sentinel)
        yield sentinel


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        _started("etcd_server", server)
        yield server


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd-cluster"), members=3) as cluster:
        _started("etcd_cluster", cluster)
        yield cluster


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the shared standalone Redis, FLUSHALLed for this test."""
    redis_server.flush()
    return redis_server.url


@pytest.fixture
def etcd_url(etcd_server: EtcdServer) -> str:
    """URL of the shared single-member etcd, every key deleted for this test."""
    etcd_server.flush()
    return etcd_server.url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _startup_seconds:
        times = ", ".join(f"{name} {s:.2f}s" for name, s in _startup_seconds.items())
        terminalreporter.write_line(f"store servers started: {times}")


# ============================================================================ end of store servers
