"""A large store through `grpc://` against the store itself: no message grows with the store
(docs/server.md, "Bounded messages"), so what remains is what a worker pays.

    python -m bench.large                  # prints a table
    python -m bench.large --write-docs     # also replaces this section of docs/benchmarks.md

One Redis and one `skillfs serve` over it, started here. The shared scope holds 10,000
skills of 10 files (~20 MB of manifests, past gRPC's 16 MiB); one user's scope holds a
4,000-file skill with 200 kept versions, each changing one file as edits do (its tables
stored in chunks, docs/design.md §2, "File tables"; ~130 MB of history as whole tables).
Each figure is measured in a
fresh process (the median of three), so "cold" means cold and the peak memory is that
process's own: a worker's first `snapshot()`, `store.versions()` (the history listing) and
`store.history()` (every version whole), directly on Redis and through the server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from bench import common
from skillfs.api import open_store
from skillfs.engines.base import CommitOp
from skillfs.model import FileEntry, Manifest, Scope

AGENT = "support-bot"  # what the test tokens grant (support/grpc_servers.py)
SHARED = Scope.shared(AGENT)
USER = Scope.user(AGENT, "alice")
SKILLS, FILES = 10_000, 10
VERSIONS, WIDE = 200, 4_000
RUNS = 3

CHILD = """
import json, resource, sys, time
import skillfs
from skillfs.model import Scope
url, token, what = sys.argv[1:4]
store = skillfs.open_store(url, **({"token": token} if token else {}))
t0 = time.perf_counter()
if what == "snapshot":
    with skillfs.Skills(store, "support-bot", "alice") as worker:
        n = len(worker.snapshot().skills)
elif what == "versions":
    n = len(store.versions(Scope.user("support-bot", "alice"), "wide"))
else:
    n = len(store.history(Scope.user("support-bot", "alice"), "wide"))
seconds = time.perf_counter() - t0
print(json.dumps({"n": n, "seconds": seconds,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _table(n: int, tag: str, edit: int = 0) -> dict[str, FileEntry]:
    """`n` files of one byte; with `edit`, the first holds that edit's bytes instead."""
    sha = hashlib.sha256(b"x").hexdigest()
    first = hashlib.sha256(f"edit {edit}".encode()).hexdigest() if edit else sha
    return {
        f"references/{tag}{i:05d}.md": FileEntry(
            sha256=first if i == 0 else sha, size=1, mode=0o644, mtime=1.0
        )
        for i in range(n)
    }


def _manifest(skill: str, version: int, files: dict[str, FileEntry]) -> Manifest:
    return Manifest(
        skill=skill,
        version=version,
        commit_id=uuid.uuid4().hex,
        committed_at=time.time(),
        frontmatter={"name": skill, "description": f"Does {skill}. Use when benchmarking."},
        files=files,
    )


def seed(url: str) -> None:
    """The large scope and the long history, written straight to the store's engine."""
    store = open_store(url)
    store.blobs.put(hashlib.sha256(b"x").hexdigest(), b"x", time.time())
    engine = store.engine
    skills = [_manifest(f"s{i:05d}", 1, _table(FILES, f"{i}-")) for i in range(SKILLS)]
    for i in range(0, SKILLS, 60):  # within Redis's 64 skills per commit
        ops = [CommitOp(scope=SHARED, manifest=m, expect=0) for m in skills[i : i + 60]]
        engine.commit(SHARED.domain, ops)
    for v in range(1, VERSIONS + 1):
        m = _manifest("wide", v, _table(WIDE, "w", edit=v))
        engine.commit(USER.domain, [CommitOp(scope=USER, manifest=m, expect=v - 1)])
    store.close()


def measure(url: str, token: str, what: str) -> dict[str, float]:
    """The median of RUNS fresh processes' time and peak memory for `what`."""
    runs = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, url, token, what],
            capture_output=True,
            text=True,
            check=True,
            cwd=common.ROOT,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "peak_mib": statistics.median(r["peak_mib"] for r in runs),
        "n": runs[0]["n"],
    }


def run() -> str:
    from support.grpc_servers import ADMIN, ServerProcess

    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        redis_server, _ = common.redis_server(Path(tmp) / "redis", stack)
        url = f"{redis_server.url}?prefix=large/"
        seed(url)
        server = ServerProcess(url, Path(tmp) / "server").start()
        stack.callback(server.stop)
        remote = f"grpc://{server.address}"
        rows = []
        for what, label in (
            ("snapshot", f"cold `snapshot()`: {SKILLS:,} skills of {FILES} files"),
            (
                "versions",
                f"`store.versions()`: {VERSIONS} one-file edits of a {WIDE:,}-file skill",
            ),
            ("history", f"`store.history()`: the same {VERSIONS} versions whole"),
        ):
            direct = measure(url, "", what)
            through = measure(remote, ADMIN, what)
            rows.append(
                common.row(
                    label,
                    [
                        f"{direct['seconds']:.2f} s / {direct['peak_mib']:.0f} MiB",
                        f"{through['seconds']:.2f} s / {through['peak_mib']:.0f} MiB",
                        f"{through['seconds'] / direct['seconds']:.2f}x",
                    ],
                )
            )
    head = [
        f"Machine: {common.machine()}. Command: `python -m bench.large --write-docs`.",
        "",
        "| measure (median of 3 fresh processes) | redis:// time / peak memory | "
        "grpc:// time / peak memory | time ratio |",
        "|---|---|---|---|",
    ]
    return "\n".join([*head, *rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    section = run()
    print(section)
    if args.write_docs:
        common.write_docs("bench/large.py", section)


if __name__ == "__main__":
    main()
