"""Engine benchmarks: what a worker pays per step, per scope load, per publish and per file.

    python -m bench.engines                      # sqlite, redis, etcd, postgres; a table
    python -m bench.engines --engines redis --n 5000
    python -m bench.engines --write-docs         # also replaces this section of docs/benchmarks.md

Per engine, against one server started here (support/servers.py) or one SQLite file:

- freshness check when nothing changed: `store.revisions([agent])` (the per-step check of C3)
  against one raw client read of the same store, timed interleaved so both see the same
  machine: Redis GET of a small key, a linearizable etcd get, a SQLite SELECT of one row, a
  PostgreSQL SELECT of one row on one connection of its own.
  Target: p50 ratio <= 1.3 (the check is one round trip and little else);
- loading a scope of 200 skills: engine calls (round trips) and time;
- publish latency of a small skill (3 files, one changed) with `expected_version`;
- reading a 4 KiB and a 1 MiB file through the store with a cold (disabled) blob cache;
- memory of 10,000 manifests held in memory (tracemalloc), as a snapshot holds them.
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import shlex
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import skillfs
from bench import common
from bench.common import DOCS, Timing, interleaved, row, timed
from skillfs import File, Put, Scope
from skillfs.engines.base import Engine
from skillfs.model.manifest import PARSED

AGENT = "bench"
SHARED = Scope.shared(AGENT)
ENGINES = ("sqlite", "redis", "etcd", "postgres")
TARGET_RATIO = 1.3
#: A "hot" skill is timed from this version on (past HistoryPolicy.keep_versions = 50).
HOT_FROM = 300
#: Engine methods counted as round trips.
ENGINE_CALLS = (
    "touch_blobs",
    "put_blob",
    "get_chunks",
    "load_scope",
    "load_skills",
    "commit",
    "history",
    "revisions",
    "changes",
    "domains",
    "scopes",
)


# --------------------------------------------------------------------------- measuring


def _fmt(t: Timing) -> str:
    return f"{_us(t.p50)} / {_us(t.p99)}"


def _us(us: float) -> str:
    if us >= 10_000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs"


class CallCounter:
    """Counts calls of an engine's primitives (each is one round trip, or one per Redis slot)."""

    def __init__(self, engine: Engine) -> None:
        self.calls: Counter[str] = Counter()
        for name in ENGINE_CALLS:
            original = getattr(engine, name)
            setattr(engine, name, self._wrap(name, original))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    @contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        """The calls made inside the block."""
        before = self.calls.copy()
        delta: Counter[str] = Counter()
        yield delta
        delta.update(self.calls - before)


# --------------------------------------------------------------------------- engines


@dataclass
class Target:
    """A store URL and a raw read of one small value on the same server."""

    name: str
    url: str
    raw_label: str
    raw_get: Callable[[], object]
    version: str


def _sqlite(tmp: Path, stack: ExitStack) -> Target:
    path = tmp / "skills.db"
    url = f"sqlite:///{path}"
    with skillfs.open_store(url) as s:  # creates the file and schema
        s.publish(SHARED, "probe", {"SKILL.md": _skill_md("probe", 0)})
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    stack.callback(conn.close)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (k TEXT PRIMARY KEY, v BLOB)")
    conn.execute("INSERT OR REPLACE INTO bench_raw VALUES ('small', ?)", (b"x" * 32,))
    query = "SELECT v FROM bench_raw WHERE k = ?"
    return Target(
        "sqlite",
        url,
        "SELECT of one row",
        lambda: conn.execute(query, ("small",)).fetchone(),
        f"SQLite {sqlite3.sqlite_version}",
    )


def _redis(tmp: Path, stack: ExitStack) -> Target:
    server, client = common.redis_server(tmp / "redis", stack)
    client.set("bench:small", b"x" * 32)
    version = client.info("server")["redis_version"]
    return Target(
        "redis",
        server.url,
        "GET of a small key",
        lambda: client.get("bench:small"),
        f"Redis {version}",
    )


def _etcd(tmp: Path, stack: ExitStack) -> Target:
    server, client = common.etcd_server(tmp / "etcd", stack)
    client.put("bench/small", b"x" * 32)
    version = client.status().version
    return Target(
        "etcd",
        server.url,
        "linearizable get",
        lambda: client.get("bench/small"),  # serializable=False: a linearizable read
        f"etcd {version}",
    )


def _postgres(tmp: Path, stack: ExitStack) -> Target:
    server, conn = common.postgres_server(stack)
    conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (k text PRIMARY KEY, v bytea)")
    conn.execute("INSERT INTO bench_raw VALUES ('small', %s) ON CONFLICT DO NOTHING", (b"x" * 32,))
    version = conn.execute("SHOW server_version").fetchone()
    return Target(
        "postgres",
        server.url,
        "SELECT of one row",
        lambda: conn.execute("SELECT v FROM bench_raw WHERE k = %s", ("small",)).fetchone(),
        f"PostgreSQL {version[0] if version else '?'}",
    )


SETUP: dict[str, Callable[[Path, ExitStack], Target]] = {
    "sqlite": _sqlite,
    "redis": _redis,
    "etcd": _etcd,
    "postgres": _postgres,
}


# --------------------------------------------------------------------------- content


def _skill_md(name: str, n: int) -> bytes:
    return (
        f"---\nname: {name}\ndescription: Benchmark skill {name}, revision {n}. Use it to "
        "measure how fast a store serves skills to agent workers.\nlicense: Apache-2.0\n"
        f"metadata:\n  owner: bench\n  version: '{n}'\n---\n\n# {name}\n\n"
        + "Step by step instructions for the model. " * 25
        + "\n"
    ).encode()


def _skill_files(name: str, n: int) -> dict[str, File | bytes]:
    """A typical small skill: SKILL.md (~1.2 KiB), a reference (~3 KiB) and a script."""
    return {
        "SKILL.md": _skill_md(name, n),
        "references/guide.md": f"# Guide for {name}\n".encode() + b"Reference material. " * 150,
        "scripts/run.sh": File(f"#!/bin/sh\necho {name}\n".encode(), mode=0o755),
    }


# --------------------------------------------------------------------------- benchmarks


@dataclass
class Result:
    engine: str
    version: str
    raw_label: str
    raw: Timing
    fresh: Timing
    fresh_calls: float
    scope_load: Timing
    scope_calls: float
    publish: Timing
    publish_calls: float
    publish_hot: Timing
    read_4k: Timing
    read_1m: Timing
    manifest_bytes: float  # per 10,000 manifests

    @property
    def ratio(self) -> float:
        return self.fresh.p50 / self.raw.p50

    @property
    def ratio_p99(self) -> float:
        return self.fresh.p99 / self.raw.p99


def bench_engine(target: Target, n: int) -> Result:
    store = skillfs.open_store(target.url, blob_cache_bytes=0)
    counter = CallCounter(store.engine)
    try:
        return _bench(store, counter, target, n)
    finally:
        store.close()


def _bench(store: skillfs.Store, counter: CallCounter, target: Target, n: int) -> Result:
    log = functools.partial(print, f"[{target.name}]", file=sys.stderr, flush=True)
    store.publish(SHARED, "probe", {"SKILL.md": _skill_md("probe", 1)})

    log("freshness check vs raw read")
    gc.collect()
    with counter.counting() as calls:
        store.revisions([AGENT])
    fresh_calls = calls.total()
    fresh, raw = interleaved(lambda: store.revisions([AGENT]), target.raw_get, n)

    log("scope of 200 skills")
    scope = Scope.user(AGENT, "scope200")
    names = [f"skill-{i:03d}" for i in range(200)]
    for i in range(0, len(names), 50):
        store.commit([Put(scope, k, dict(_skill_files(k, 0))) for k in names[i : i + 50]])
    with counter.counting() as calls:
        loaded = store.manifests(scope)
    assert len(loaded) == 200, len(loaded)
    scope_calls = calls.total()
    scope_load = timed(lambda: store.manifests(scope), max(20, n // 50), warmup=3)

    log("publish")
    pub, publish_calls = _publishes(store, counter, Scope.shared("pub"), skills=10, versions=40)
    log(f"publish, a skill past version {HOT_FROM}")
    hot, _ = _publishes(
        store, counter, Scope.shared("hot"), skills=1, versions=HOT_FROM + 100, skip=HOT_FROM
    )

    log("file reads, cold cache")
    rng = random.Random(7)
    small, big = rng.randbytes(4096), rng.randbytes(1024 * 1024)
    store.publish(
        SHARED, "files", {"SKILL.md": _skill_md("files", 0), "a.bin": small, "b.bin": big}
    )
    m = store.manifest(SHARED, "files")
    read_4k = timed(lambda: store.read_entry(m.files["a.bin"]), max(50, n // 10), warmup=20)
    read_1m = timed(lambda: store.read_entry(m.files["b.bin"]), max(20, n // 100), warmup=3)
    assert store.read_entry(m.files["b.bin"]) == big

    log("memory of 10,000 manifests")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = []
    for _ in range(50):  # 50 loads x 200 = 10,000 manifests, each its own model
        PARSED.clear()  # equal bytes would otherwise share one parsed model
        held.append(store.manifests(scope))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert sum(len(h) for h in held) == 10_000
    del held

    return Result(
        engine=target.name,
        version=target.version,
        raw_label=target.raw_label,
        raw=raw,
        fresh=fresh,
        fresh_calls=fresh_calls,
        scope_load=scope_load,
        scope_calls=scope_calls,
        publish=pub,
        publish_calls=publish_calls,
        publish_hot=hot,
        read_4k=read_4k,
        read_1m=read_1m,
        manifest_bytes=after - before,
    )


def _publishes(
    store: skillfs.Store,
    counter: CallCounter,
    scope: Scope,
    *,
    skills: int,
    versions: int,
    skip: int = 1,
) -> tuple[Timing, float]:
    """Publish `skills` skills round-robin up to `versions` each, every write expecting the
    version before it; time those past version `skip`. Returns timings and engine calls per
    timed publish."""
    current = dict.fromkeys((f"pub-{i}" for i in range(skills)), 0)
    t = Timing()
    calls: Counter[str] = Counter()
    for k in range(versions):
        for name, v in current.items():
            files = _skill_files(name, k)
            with counter.counting() as c:
                t0 = time.perf_counter_ns()
                current[name] = store.publish(scope, name, files, expected_version=v).version
                elapsed = time.perf_counter_ns() - t0
            if k >= skip:
                t.samples.append(elapsed / 1000)
                calls.update(c)
    return t, calls.total() / len(t.samples)


# --------------------------------------------------------------------------- report


def table(results: Sequence[Result]) -> str:
    rows = [
        row("measure (p50 / p99)", (r.engine for r in results)),
        "|---|" + "---|" * len(results),
        row("server", [r.version for r in results]),
        row("raw read: what", [r.raw_label for r in results]),
        row("raw read", [_fmt(r.raw) for r in results]),
        row("freshness check `store.revisions([agent])`", [_fmt(r.fresh) for r in results]),
        row(
            f"**ratio** check / raw, p50 (target <= {TARGET_RATIO}) ; p99",
            [
                f"**{r.ratio:.2f}x** {'ok' if r.ratio <= TARGET_RATIO else 'MISSED'} ; "
                f"{r.ratio_p99:.2f}x"
                for r in results
            ],
        ),
        row("engine calls per freshness check", [f"{r.fresh_calls:.0f}" for r in results]),
        row("load a scope of 200 skills", [_fmt(r.scope_load) for r in results]),
        row("engine calls per scope load", [f"{r.scope_calls:.0f}" for r in results]),
        row("publish (3 files, 1 changed; versions 2-40)", [_fmt(r.publish) for r in results]),
        row("engine calls per publish", [f"{r.publish_calls:.1f}" for r in results]),
        row(
            f"publish, skill at versions {HOT_FROM}-{HOT_FROM + 100}",
            [_fmt(r.publish_hot) for r in results],
        ),
        row("read a 4 KiB file, cold cache", [_fmt(r.read_4k) for r in results]),
        row("read a 1 MiB file, cold cache", [_fmt(r.read_1m) for r in results]),
        row(
            "memory per 10,000 manifests",
            [f"{r.manifest_bytes / 2**20:.1f} MiB" for r in results],
        ),
    ]
    return "\n".join(rows)


def environment() -> str:
    return (
        f"{common.machine()}, redis-py {common.dist_version('redis')}, "
        f"python3-etcd3 {common.dist_version('python3-etcd3')}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engines", description=__doc__)
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    parser.add_argument("--n", type=int, default=3000, help="freshness-check samples")
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    args = parser.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - set(SETUP)
    if unknown:
        parser.error(f"unknown engine(s) {sorted(unknown)}; known: {', '.join(SETUP)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="skillfs-bench-") as tmp:
        for name in engines:
            with ExitStack() as stack:
                target = SETUP[name](Path(tmp) / name, stack)
                results.append(bench_engine(target, args.n))
    out = table(results)
    print(out)
    if args.write_docs:
        command = "python -m bench.engines " + shlex.join(sys.argv[1:] if argv is None else argv)
        common.write_docs("bench/engines.py", _section(out, command.strip(), results))
        print(f"\nwrote {DOCS}", file=sys.stderr)
    return 0


def _section(out: str, command: str, results: Sequence[Result]) -> str:
    missed = [r.engine for r in results if r.ratio > TARGET_RATIO]
    verdict = (
        f"Every engine meets the freshness target (p50 <= {TARGET_RATIO}x one raw read)."
        if not missed
        else f"Freshness target missed on: {', '.join(missed)} (see the analysis below)."
    )
    return (
        "## Engines (`bench/engines.py`)\n\n"
        f"Command: `{command}` (from the repository root; servers are started by the script "
        "with `support/servers.py`, one per engine, on loopback).\n\n"
        f"Machine: {environment()}; run {time.strftime('%Y-%m-%d')}.\n\n"
        f"{out}\n\n{verdict}\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
