"""What the benchmarks share: timing and percentiles, table rows, the machine line, the servers
they start, and each script's generated section of docs/benchmarks.md."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    import etcd3
    import psycopg
    import redis

    from support.postgres import PostgresServer
    from support.servers import EtcdServer, RedisServer

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"


# --------------------------------------------------------------------------- measuring


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of the samples (nearest rank), in their unit."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Timing:
    """Samples in microseconds (`timed`, `interleaved`), or in the unit the caller appends."""

    samples: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return percentile(self.samples, 0.50)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 0.99)


def timed(fn: Callable[[], object], n: int, warmup: int) -> Timing:
    """`n` timed calls of `fn` after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    t = Timing()
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        t.samples.append((clock() - t0) / 1000)
    return t


def interleaved(
    a: Callable[[], object], b: Callable[[], object], n: int, warmup: int = 200
) -> tuple[Timing, Timing]:
    """Time `a` and `b` alternately (a b b a ...), so drift and noise hit both alike."""
    for _ in range(warmup):
        a()
        b()
    ta, tb = Timing(), Timing()
    clock = time.perf_counter_ns
    for i in range(n):
        first, second = (a, b) if i % 2 else (b, a)
        t0 = clock()
        first()
        t1 = clock()
        second()
        t2 = clock()
        (ta if first is a else tb).samples.append((t1 - t0) / 1000)
        (tb if first is a else ta).samples.append((t2 - t1) / 1000)
    return ta, tb


# --------------------------------------------------------------------------- servers


def redis_server(dir: Path, stack: ExitStack) -> tuple[RedisServer, redis.Redis]:
    """A Redis started in `dir` for this run and a client of it, both closed by `stack`."""
    from support.servers import RedisServer

    server = stack.enter_context(RedisServer(dir))
    client = server.client()
    stack.callback(client.close)
    return server, client


def postgres_server(stack: ExitStack) -> tuple[PostgresServer, psycopg.Connection[Any]]:
    """A PostgreSQL started for this run (its own mkdtemp directory) and a connection to
    its database, both closed by `stack`."""
    import psycopg

    from support.postgres import PostgresServer

    server = stack.enter_context(PostgresServer())
    conn = psycopg.connect(server.url, autocommit=True)
    stack.callback(conn.close)
    return server, conn


def etcd_server(dir: Path, stack: ExitStack) -> tuple[EtcdServer, etcd3.Etcd3Client]:
    """An etcd started in `dir` for this run and a client of it, both closed by `stack`."""
    from support.servers import EtcdServer

    server = stack.enter_context(EtcdServer(dir))
    client = server.client()
    stack.callback(client.close)
    return server, client


# --------------------------------------------------------------------------- report


def row(label: str, cells: Iterable[str]) -> str:
    """One row of a Markdown table."""
    return f"| {label} | " + " | ".join(cells) + " |"


def machine() -> str:
    """The operating system, CPUs and Python of this run."""
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )


def dist_version(dist: str, missing: str = "-") -> str:
    """The installed version of a distribution, `missing` when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return missing


def _markers(script: str) -> tuple[str, str]:
    return (
        f"<!-- {script}: begin (generated; edit the script, not this section) -->",
        f"<!-- {script}: end -->",
    )


def marked(script: str, section: str) -> str:
    """`section` between the markers of `script`'s generated part of docs/benchmarks.md."""
    begin, end = _markers(script)
    return f"{begin}\n{section.rstrip()}\n{end}"


def write_docs(script: str, section: str, path: Path = DOCS) -> None:
    """Replace (or append) `script`'s section of docs/benchmarks.md, leaving the others'."""
    begin, end = _markers(script)
    block = marked(script, section)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def wait_port(address: str) -> None:
    """Wait (up to 30 s) until a gRPC server answers at `address`."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with grpc.insecure_channel(address) as ch:
            try:
                grpc.channel_ready_future(ch).result(timeout=1)
                return
            except grpc.FutureTimeoutError:
                pass
    raise RuntimeError(f"{address} did not come up")
