"""The `store_url` fixture: one fresh, isolated namespace per test, on the topologies of its tier.

Each test gets its own `?prefix=` on the shared servers, so tests never see each other's
keys and need no flush.

Which topologies: tests/engines overrides `store_url` with every topology (`ENGINES`: only the
conformance suite and each engine's own tests run everywhere), tests/scenarios with one
topology of each engine (`ENGINE_KINDS`); everywhere else it is `LOGIC_ENGINES`: memory and
SQLite (no server: what `make check` runs) and grpc://, because a skillfs server checks every
commit again (grants, the actor, governed moves) and those checks are logic of their own.
Engine-specific behaviour belongs in tests/engines.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs

ENGINES = [
    "memory",
    "sqlite",
    "redis",
    "redis-cluster",
    "redis-sentinel",
    "etcd",
    "etcd-cluster",
    "postgres",
    "grpc",
]
#: The `store` fixture outside tests/engines and tests/scenarios.
LOGIC_ENGINES = ["memory", "sqlite", "grpc"]
#: The `store` fixture in tests/scenarios: one topology of each engine (a cluster's own
#: behaviour, failover and routing, is tests/engines' to show).
ENGINE_KINDS = ["memory", "sqlite", "redis", "etcd", "postgres", "grpc"]
#: Engines that need no server: every other one marks its tests `server` (tests/conftest.py).
SERVERLESS = {"memory", "sqlite"}
SERVER_FIXTURE = {
    "redis": "redis_server",
    "redis-cluster": "redis_cluster",
    "redis-sentinel": "redis_sentinel",
    "etcd": "etcd_server",
    "etcd-cluster": "etcd_cluster",
    "postgres": "postgres_server",
}


def url_for(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> str:
    """A URL with a fresh namespace on `engine`, starting its server when needed.

    grpc:// sets $SKILLFS_TOKEN to the admin token for the test (function scope only; a
    wider fixture passes `token=support.grpc_servers.ADMIN` itself)."""
    ns = uuid.uuid4().hex[:12]
    if engine == "memory":
        return f"memory://{ns}"
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 'skills.db'}"
    if engine == "grpc":  # a skillfs server over a fresh memory store, an admin token
        from support.grpc_servers import ADMIN, in_process

        # One per test, gRPC only: no HTTP port (console, MCP, metrics), which no grpc://
        # client uses and whose shutdown took ~0.19 s of every test; without it a start and
        # a stop take ~0.01 s (docs/benchmarks.md, "Test tiers").
        server = in_process(f"memory://{ns}", tmp_path, http=None)
        request.addfinalizer(lambda: server.stop(0))
        if request.scope == "function":
            request.getfixturevalue("monkeypatch").setenv("SKILLFS_TOKEN", ADMIN)
        return f"grpc://127.0.0.1:{server.grpc_port}?max_message={1024 * 1024}"  # as the server
    server = request.getfixturevalue(SERVER_FIXTURE[engine])
    sep = "&" if "?" in server.url else "?"
    return f"{server.url}{sep}prefix=t{ns}/"


@pytest.fixture(params=LOGIC_ENGINES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh namespace on memory, SQLite and grpc:// (tests/engines and tests/scenarios
    override this in their conftest.py)."""
    return url_for(request, request.param, tmp_path)


@pytest.fixture
def store(store_url: str) -> Iterator[skillfs.Store]:
    s = skillfs.open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def other(store: skillfs.Store, store_url: str) -> Iterator[skillfs.Store]:
    """A second client of the same store, as another replica has (memory: same process)."""
    s = skillfs.open_store(store_url)
    yield s
    s.close()
