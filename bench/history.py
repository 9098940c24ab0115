"""History growth: what one one-file commit to a skill of 4,000 files adds to what each engine
holds (issue 28 §2: at most 20 KB; docs/design.md §2, "File tables"), and what the quotas
charge it (docs/security.md, "Quotas").

    python -m bench.history                     # 150 commits per engine; prints a table
    python -m bench.history --write-docs        # also replaces this section of docs/benchmarks.md

Memory, SQLite, Redis, a Redis Cluster of three masters, etcd and PostgreSQL, the servers
started here.
The measure is support/history_growth.py's: the sum of the engine's key and value sizes in
the store's namespace, on etcd every put since the first commit (superseded revisions
included, as etcd keeps them until a compaction), the new files' blobs left out. The charge
is what the scope's quota counter grew by.
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path

import skillfs
from bench import common
from support.history_growth import FILES, SHARED, Held, one_file_edits, publish_large
from support.postgres import PostgresServer
from support.servers import EtcdServer, RedisCluster, RedisServer


def measure(commits: int) -> list[tuple[str, float, float, float]]:
    """(engine, bytes held per commit, bytes charged per commit, seconds per commit) of each
    engine."""
    out = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        redis = stack.enter_context(RedisServer(root / "redis"))
        cluster = stack.enter_context(RedisCluster(root / "cluster"))
        etcd = stack.enter_context(EtcdServer(root / "etcd"))
        postgres = stack.enter_context(PostgresServer())
        urls = {
            "memory": "memory://history-growth",
            "SQLite": f"sqlite:///{root / 'skills.db'}",
            "Redis": redis.url,
            "Redis Cluster": cluster.url,
            "etcd": f"{etcd.url}?prefix=bench/",
            "PostgreSQL": postgres.url,
        }
        for name, url in urls.items():
            with skillfs.open_store(url) as store:
                publish_large(store)
                start = _charged(store)
                per_commit, seconds = one_file_edits(store, commits, Held(store))
                charged = (_charged(store) - start) / commits
            out.append((name, per_commit, charged, seconds))
            print(
                f"{name}: {per_commit:,.0f} B held, {charged:,.0f} B charged, "
                f"{seconds * 1000:.0f} ms per commit",
                flush=True,
            )
    return out


def _charged(store: skillfs.Store) -> int:
    """What the large skill's scope's quota counter holds."""
    used = store.engine.quota_used(SHARED.domain) or {}
    return used.get(f"scope:{SHARED}", 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=150)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = measure(args.commits)
    lines = [
        f"Machine: {common.machine()}. Command: `python -m bench.history"
        f"{' --write-docs' if args.write_docs else ''}`.",
        "",
        f"| engine ({args.commits} one-file commits to {FILES:,} files) | bytes added per "
        "commit | bytes charged per commit | time per commit |",
        "|---|---|---|---|",
        *(f"| {n} | {b:,.0f} | {c:,.0f} | {s * 1000:.0f} ms |" for n, b, c, s in rows),
    ]
    section = "\n".join(lines)
    print(section)
    if args.write_docs:
        common.write_docs("bench/history.py", section)


if __name__ == "__main__":
    main()
