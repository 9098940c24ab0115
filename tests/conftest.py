"""Shared pytest fixtures, the tiers' markers and `--no-servers`.

Real servers come from support/servers.py. A server fixture starts its server only when a test
asks for it, once per session (per pytest-xdist worker: each worker is a session of its own,
picking its ports from its own slice of the port range), and stops it at the end. A server
that cannot start fails the tests that need it (ServerError with the server's log tail);
nothing is skipped.

Tiers (README, "Tests"): tests/unit, tests/store, tests/governance, tests/engines, a folder
per surface and tests/scenarios, every test of which is marked `slow`. A test that needs a
server is marked `server`: by hand where it starts one itself, and here where it asks for a
server fixture or is parametrized with a store engine that has one (redis*, etcd*, postgres,
grpc).
`pytest --no-servers` (`make check`) deselects those and makes any other server fail its
test loudly.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.postgres import PostgresServer
from support.servers import (
    NO_SERVERS_ENV,
    EtcdCluster,
    EtcdServer,
    RedisCluster,
    RedisSentinel,
    RedisServer,
)

pytest.register_assert_rewrite("tests.stores")  # imported here before pytest_plugins loads it
from tests.stores import ENGINES, SERVERLESS  # noqa: E402

# `store_url` / `store`: a fresh namespace per test on the topologies of its tier.
pytest_plugins = ["tests.stores"]

TESTS = Path(__file__).resolve().parent
SERVER_FIXTURES = {
    "redis_server",
    "redis_cluster",
    "redis_sentinel",
    "etcd_server",
    "etcd_cluster",
    "redis_url",
    "etcd_url",
    "postgres_server",
}
SERVER_ENGINES = set(ENGINES) - SERVERLESS
NO_SERVERS = (
    "pytest --no-servers (make check) starts no server: mark the test `server` (make test "
    "runs it) or move it out of the tiers make check runs"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-servers",
        action="store_true",
        help="deselect tests marked `server` and fail any other test that starts a server "
        "(make check)",
    )


def _refuse_listen(self: socket.socket, *args: Any) -> None:
    raise RuntimeError(f"a socket tried to listen: {NO_SERVERS}")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--no-servers"):
        # support/ refuses its servers (also in processes tests start); a server made in this
        # process some other way fails when it listens
        os.environ[NO_SERVERS_ENV] = NO_SERVERS
        socket.socket.listen = _refuse_listen  # type: ignore[method-assign]


def _params(item: pytest.Item) -> set[str]:
    callspec = getattr(item, "callspec", None)
    values = callspec.params.values() if callspec is not None else ()
    return {v for v in values if isinstance(v, str)}


def _needs_server(item: pytest.Item) -> bool:
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return bool(_params(item) & SERVER_ENGINES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    scenarios = TESTS / "scenarios"
    for item in items:
        if _needs_server(item):
            item.add_marker(pytest.mark.server)
        if item.path.is_relative_to(scenarios):
            item.add_marker(pytest.mark.slow)
    if config.getoption("--no-servers"):
        keep = [item for item in items if item.get_closest_marker("server") is None]
        if len(keep) < len(items):
            config.hook.pytest_deselected(
                items=[item for item in items if item.get_closest_marker("server") is not None]
            )
            items[:] = keep


# universal-pathlib's vendored BaseTests (tests/_vendor/upath_tests): assertion introspection
# for their asserts, registered before tests/fs/test_fs_upath.py imports them
pytest.register_assert_rewrite("upath.tests.cases", "upath.tests.utils")

# ============================================================================ store servers
# Session-scoped: one of each per run, started lazily. Start-up times are listed at the end
# of the run. The function-scoped *_url fixtures hand each test an emptied shared server.

_startup_seconds: dict[str, float] = {}


def _started(
    name: str, server: RedisServer | RedisCluster | RedisSentinel | EtcdCluster | PostgresServer
) -> None:
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of its own (not the package's cluster), data in a mkdtemp
    directory the `postgres` user owns (support/postgres.py)."""
    with PostgresServer() as server:
        _started("postgres_server", server)
        yield server


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
