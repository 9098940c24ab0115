"""What a cached manifest costs a worker's memory, before and after the lean records.

    python -m bench.manifest_memory                  # 2,000 skills of 3 files; prints a table
    python -m bench.manifest_memory --n 10000 --write-docs

Two measures, with tracemalloc (allocations still held, after a garbage collection):

- the parsed manifests: the stored JSON of N skills parsed the way a store parses it, by
  `Manifest.from_json` (lean records, a digest-keyed cache) and, in the same run, by the
  form before (pydantic `BaseModel`s, cached by `functools.lru_cache` on the stored bytes:
  the classes are copied below as they were);
- a worker: `Skills` over a SQLite store of the same N skills, a snapshot taken and the
  follower's warm done, as tests/scenarios/test_manifest_memory.py measures it. SQLite keeps the
  stored copy in its file; the file-content cache (`store/blobs.py`) is not counted. Split
  into the manifests' cache and the last snapshot's per-skill views.
"""

from __future__ import annotations

import argparse
import functools
import gc
import multiprocessing as mp
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import skillfs
from bench import common
from skillfs import Scope, Skills
from skillfs.model import Rollout
from skillfs.model.manifest import Manifest
from tests.scenarios.test_manifest_memory import three_files  # the skill the test caches

SHARED = Scope.shared("mem-bot")


class _FileEntry(BaseModel):
    model_config = ConfigDict(frozen=True)
    sha256: str
    size: int
    mode: int
    mtime: float


class _Finding(BaseModel):
    model_config = ConfigDict(frozen=True)
    severity: Literal["error", "warning"]
    field: str | None = None
    rule: str
    message: str


class _Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)
    files: dict[str, _FileEntry]
    frontmatter: dict[str, Any] | None = None
    findings: list[_Finding] = Field(default_factory=list)
    rollout: Rollout
    commit_id: str
    actor: str = ""
    staged_at: float = 0.0


class _Manifest(BaseModel):
    """skillfs.model.Manifest before the lean records (its fields, a `BaseModel`)."""

    model_config = ConfigDict(frozen=True)
    skill: str
    version: int
    commit_id: str
    committed_at: float
    deleted: bool = False
    frontmatter: dict[str, Any] | None = None
    findings: list[_Finding] = Field(default_factory=list)
    files: dict[str, _FileEntry]
    actor: str = ""
    message: str = ""
    disabled: bool = False
    disabled_reason: str = ""
    candidate: _Candidate | None = Field(default=None, exclude_if=lambda v: v is None)
    base_version: int | None = Field(default=None, exclude_if=lambda v: v is None)
    operation: str = Field(default="", exclude_if=lambda v: not v)


@functools.lru_cache(maxsize=8192)
def _parse_before(raw: bytes) -> _Manifest:
    return _Manifest.model_validate_json(raw)


def held_bytes(build: Callable[[], object], exclude: str | None = None) -> tuple[int, object]:
    """The bytes `build()` allocates and still holds (with its result), and the result."""
    gc.collect()
    tracemalloc.start(30)
    try:
        result = build()
        gc.collect()
        snap = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    if exclude:
        snap = snap.filter_traces([tracemalloc.Filter(False, exclude, all_frames=True)])
    return sum(t.size for t in snap.traces), result


def populate(url: str, n: int) -> list[bytes]:
    """One publish per skill (no two manifests share a commit id or a file time); the
    stored JSON of every manifest."""
    with skillfs.open_store(url) as store:
        for i in range(n):
            store.publish(SHARED, f"skill-{i:05d}", three_files(i))
        return [m.model_dump_json().encode() for m in store.manifests(SHARED).values()]


def parsed_before(stored: list[bytes]) -> int:
    """(Each read of a store returns new bytes: a copy, so what a parse cache keeps counts.)"""
    return held_bytes(lambda: [_parse_before(bytes(memoryview(raw))) for raw in stored])[0]


def parsed_now(stored: list[bytes]) -> int:
    return held_bytes(lambda: [Manifest.from_json(bytes(memoryview(raw))) for raw in stored])[0]


def a_worker(url: str) -> int:
    skillfs.open_store(url).close()  # the engine's modules imported: code, not cache

    def worker() -> Skills:
        skills = Skills(url, "mem-bot", "alice")
        snap = skills.snapshot()
        rev = snap.revisions["agents/mem-bot"]
        assert rev is not None and skills.followers[0].wait_for(rev, 30)
        return skills

    total, skills = held_bytes(worker, "*/skillfs/store/blobs.py")
    assert isinstance(skills, Skills)
    skills.store.close()
    return total


def run(n: int) -> list[tuple[str, str, str]]:
    """Each measure in a fresh interpreter: pydantic-core's string cache holds no string of
    these manifests before it, so every one kept is counted."""
    spawn = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'skills.db'}"
        with spawn.Pool(1) as pool:
            stored = pool.apply(populate, (url, n))
        measured = []
        for fn, arg in ((parsed_before, stored), (parsed_now, stored), (a_worker, url)):
            with spawn.Pool(1) as pool:
                measured.append(pool.apply(fn, (arg,)))
    old, new, total = measured
    per = f"{n:,} manifests of 3 files"
    return [
        ("parsed manifests, BaseModel + bytes-keyed cache (before)", f"{old / n:,.0f} B", per),
        ("parsed manifests, lean records + digest-keyed cache", f"{new / n:,.0f} B", per),
        ("a worker (Skills over SQLite, snapshot taken)", f"{total / n:,.0f} B", per),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    rows = run(args.n)
    lines = [
        "## Manifests in memory (`bench/manifest_memory.py`)",
        "",
        f"`python -m bench.manifest_memory --n {args.n}` on {common.machine()}. Bytes held per",
        "manifest (tracemalloc). Target (issue 12): <= 1,536 B per cached manifest of 3 files.",
        "",
        "| measure | bytes per manifest | of |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
    ]
    section = "\n".join(lines)
    print(section)
    if args.write_docs:
        common.write_docs("bench/manifest_memory.py", section)


if __name__ == "__main__":
    main()
