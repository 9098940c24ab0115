"""fsspec filesystem benchmarks: what `skillfs://` costs over the store it reads.

    python -m bench.fs                  # prints a table
    python -m bench.fs --write-docs     # also replaces this section of docs/benchmarks.md

In one run, against one Redis started here (support/servers.py) on loopback:

- `cat` of a 4 KiB file through `fs.cat_file` against one raw Redis GET of the same bytes,
  timed interleaved (target: p50 <= 2x). A cat reads the skill's manifest fresh (one HMGET)
  and the bytes from the blob cache (blobs are immutable, so caching them is always safe);
  also shown: a user-scoped filesystem reading a shared skill (user scope, then shared: two
  round trips) and a cold blob cache (manifest and bytes: two round trips);
- `ls skills/` of a 200-skill scope against one raw HGETALL of the scope's hash;
- `find` and `du` over every skill of ../shared/corpus/ against fsspec's LocalFileSystem
  doing the same over the corpus directory.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fsspec
import redis as redis_py

import skillfs
from bench import common
from bench.common import DOCS, ROOT, Timing, interleaved
from skillfs.fs import SkillFileSystem
from support.servers import RedisServer

AGENT = "bench"
CORPUS = ROOT.parent / "shared" / "corpus"
TARGET = 2.0
SKILL_MD = b"---\nname: s\ndescription: A benchmark skill. Use when measuring.\n---\n\n# S\n"


def _interleaved(a: Callable[[], object], b: Callable[[], object], n: int) -> tuple[Timing, Timing]:
    """`interleaved`, warmed up with as many calls as it times (200 at most)."""
    return interleaved(a, b, n, warmup=min(n, 200))


def us(x: float) -> str:
    return f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.0f} µs"


def row(what: str, ours: Timing, raw: Timing, target: float | None = None) -> str:
    ratio = ours.p50 / raw.p50
    verdict = "" if target is None else (" ok" if ratio <= target else " MISSED")
    return common.row(
        what,
        [
            f"{us(ours.p50)} / {us(ours.p99)}",
            f"{us(raw.p50)} / {us(raw.p99)}",
            f"**{ratio:.2f}x**{verdict}",
        ],
    )


def run(n: int, tmp: Path) -> list[str]:
    if not CORPUS.is_dir():
        raise SystemExit(f"the skill corpus is missing: expected it at {CORPUS}")
    rows = [
        "| measure | skillfs p50 / p99 | baseline p50 / p99 | ratio (p50) |",
        "|---|---|---|---|",
    ]
    with RedisServer(tmp / "redis") as server:
        raw = redis_py.Redis.from_url(server.url)
        data = os.urandom(4096)
        raw.set("bench:raw4k", data)

        def fs(**options: Any) -> SkillFileSystem:
            return SkillFileSystem(
                store=options.pop("store", server.url),
                agent_id=options.pop("agent_id", AGENT),
                base=str(tmp / "ws"),
                skip_instance_cache=True,
                **options,
            )

        shared = fs()
        shared.pipe({"skills/s/SKILL.md": SKILL_MD, "skills/s/data.bin": data})
        path = "skills/s/data.bin"
        assert shared.cat_file(path) == raw.get("bench:raw4k") == data

        def get() -> object:
            return raw.get("bench:raw4k")

        ours, base = _interleaved(lambda: shared.cat_file(path), get, n)
        rows.append(row("`cat` 4 KiB vs one GET (agent-shared filesystem)", ours, base, TARGET))
        user = fs(user_id="alice")
        ours, base = _interleaved(lambda: user.cat_file(path), get, n)
        rows.append(row("`cat` 4 KiB vs one GET (user filesystem, shared skill)", ours, base))
        cold = fs(store=skillfs.open_store(server.url, blob_cache_bytes=0))
        ours, base = _interleaved(lambda: cold.cat_file(path), get, n)
        rows.append(row("`cat` 4 KiB vs one GET (no blob cache)", ours, base))

        many = fs(agent_id="bench-ls")
        for start in range(0, 200, 50):
            with many.transaction:
                for i in range(start, start + 50):
                    many.pipe(f"skills/skill-{i:03d}/SKILL.md", SKILL_MD)
        assert len(many.ls("skills")) == 200
        key = "agents/{bench-ls}/shared/skills"  # docs/design.md §2: one hash per scope
        assert raw.hlen(key) == 200
        ours, base = _interleaved(lambda: many.ls("skills"), lambda: raw.hgetall(key), n // 10)
        rows.append(row("`ls skills/` of 200 skills vs one HGETALL", ours, base))

        corpus = fs(agent_id="bench-corpus")
        dirs = sorted(
            d
            for c in CORPUS.iterdir()
            if c.is_dir()
            for d in c.iterdir()
            if (d / "SKILL.md").is_file()
        )
        for d in dirs:
            corpus.put(str(d), "skills/", recursive=True)
        local = fsspec.filesystem("file")
        roots = [str(d) for d in dirs]
        files = len(corpus.find("skills"))
        assert files == sum(len(local.find(r)) for r in roots)

        def local_find() -> object:
            return [local.find(r) for r in roots]

        def local_du() -> object:
            return sum(local.du(r) for r in roots)

        ours, base = _interleaved(lambda: corpus.find("skills"), local_find, n // 30)
        rows.append(
            row(
                f"`find skills/` over the corpus ({files} files, {len(dirs)} skills) vs local find",
                ours,
                base,
            )
        )
        assert corpus.du("skills") == local_du()
        ours, base = _interleaved(lambda: corpus.du("skills"), local_du, n // 30)
        rows.append(row("`du skills/` over the corpus vs local du", ours, base))
        raw.close()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="samples per cat measure")
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(args.n, Path(tmp))
    command = "python -m bench.fs" + (f" --n {args.n}" if args.n != 3000 else "") + " --write-docs"
    section = "\n".join(
        [
            "## fsspec filesystem (`bench/fs.py`)",
            "",
            f"Command: `{command}` (from the repository root; Redis is started by the script "
            "with `support/servers.py`, on loopback).",
            "",
            f"Machine: {common.machine()}, fsspec {fsspec.__version__}, "
            f"redis-py {redis_py.__version__}; run {time.strftime('%Y-%m-%d')}.",
            "",
            *rows,
            "",
            f"Target: `cat` through skillfs within {TARGET:.0f}x of one raw GET (p50).",
        ]
    )
    print(common.marked("bench/fs.py", section))
    if args.write_docs:
        common.write_docs("bench/fs.py", section)


if __name__ == "__main__":
    main()
