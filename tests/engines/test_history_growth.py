"""History grows by what a commit changed, not by the whole file table, and the quotas charge
what it grows by (issue 28 §2): one-file commits to a skill of 4,000 files add at most 20 KB
each to what the engine holds, on every engine — on etcd its superseded revisions included
(support/history_growth.py) — and each is charged about that (docs/security.md, "Quotas"):
its manifest as stored, the table chunks and the files new against the version before. So
are the versions holding a labelled version and a staged candidate of 4,000 files, and GC's
recount of the skill is the sum of its charges. A skill of fewer files than a table's chunking
starts at is charged its whole manifest, as before there were chunks. Twenty commits per
engine here (what a commit adds does not change with their number); bench/history.py makes
the 150 the issue names on every engine (docs/benchmarks.md, "History growth")."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Rollout
from skillfs.model import Manifest, Scope
from skillfs.model.ops import FileValue
from skillfs.model.table import TableChunk
from support.grpc_servers import ADMIN, running
from support.history_growth import LIMIT, SHARED, Held, one_file_edits, publish_large
from tests.helpers import skill_md
from tests.stores import url_for

#: Each engine once (a sentinel's and an etcd cluster's bytes are their single node's), and a
#: skillfs server over a memory store (its own store charges a grpc:// client's commits).
TOPOLOGIES = ["memory", "sqlite", "redis", "redis-cluster", "etcd", "postgres", "grpc"]
COMMITS = 20


@pytest.fixture(params=TOPOLOGIES)
def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[skillfs.Store, skillfs.Store]]:
    """The store commits are made through, and the store that holds them: the same one,
    or through a skillfs server the server's own store."""
    if request.param != "grpc":
        with skillfs.open_store(url_for(request, request.param, tmp_path)) as store:
            yield store, store
        return
    held = f"memory://{uuid.uuid4().hex[:12]}"
    with (
        running(held, tmp_path, http=None) as server,
        skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN) as writer,
        skillfs.open_store(held) as backing,
    ):
        yield writer, backing


def charged(store: skillfs.Store, scope: Scope = SHARED) -> int:
    used = store.engine.quota_used(scope.domain)
    assert used is not None
    return used.get(f"scope:{scope}", 0)


class Stored:
    """A skill's live version as its engine stores it, read from the engine itself (under the
    store's file tables): its manifest's bytes, every table chunk it references (digest ->
    bytes) and every file it holds, live, staged and labelled (SHA-256 -> bytes)."""

    def __init__(self, store: skillfs.Store, scope: Scope, skill: str) -> None:
        engine = store.engine.inner  # type: ignore[attr-defined]
        m: Manifest = engine.load_skills(scope, [skill])[skill]
        self.manifest = len(m.model_dump_json())
        self.chunks: dict[str, int] = {}
        tables = [m.table, m.candidate.table if m.candidate else None]
        tables += [held.table for held in m.labels.values()]
        level = list(dict.fromkeys(d for t in tables if t is not None for d in t.chunks))
        while level:  # a level of the chunk trees at a time, in one read
            below: list[str] = []
            for digest, data in zip(level, engine.get_chunks([(d, 0) for d in level]), strict=True):
                assert data is not None, f"chunk {digest} is not stored"
                self.chunks[digest] = len(data)
                below.extend(TableChunk.model_validate_json(data).chunks)
            level = [d for d in dict.fromkeys(below) if d not in self.chunks]
        whole = store.manifest(scope, skill)
        self.files = {e.sha256: e.size for _, e in whole.all_files()}

    def added_to(self, before: Stored) -> int:
        """What this version holds that `before` did not, its manifest included."""
        chunks = sum(n for d, n in self.chunks.items() if d not in before.chunks)
        files = sum(n for sha, n in self.files.items() if sha not in before.files)
        return self.manifest + chunks + files


def test_one_file_commits_to_4000_files_add_and_are_charged_under_20_kb_each(
    stores: tuple[skillfs.Store, skillfs.Store],
) -> None:
    writer, backing = stores
    # through a server every commit sends its whole table and is parsed there: fewer of them
    commits = COMMITS // 2 if writer.engine.url.startswith("grpc://") else COMMITS
    publish_large(writer, texts=40)  # 40 blobs: a fast setup
    start = charged(backing)
    grown, _ = one_file_edits(writer, commits, Held(backing))
    charge = (charged(backing) - start) / commits
    assert grown <= LIMIT, f"{grown:.0f} bytes per one-file commit"
    said = f"charged {charge:.0f} bytes per one-file commit; the engine grew by {grown:.0f}"
    assert charge <= LIMIT and grown / 2 <= charge <= 2 * grown, said

    # Versions that hold a labelled version and a staged candidate of 4,000 files: each
    # commit is charged what it stores that the version before did not, to the byte.
    def step(commit: Callable[[], object]) -> None:
        before, at = Stored(backing, SHARED, "large"), charged(backing)
        commit()
        now = Stored(backing, SHARED, "large")
        assert charged(backing) - at == now.added_to(before)

    def files(path: str, data: bytes) -> dict[str, FileValue]:
        return {**writer.manifest(SHARED, "large").files, path: data}

    step(lambda: writer.labels.set(SHARED, "large", "stable", 1))
    step(lambda: writer.publish(SHARED, "large", files("references/new/labelled.md", b"held")))
    for n in range(2):
        staged = files(f"references/new/staged-{n}.md", b"staged %d" % n)
        step(lambda s=staged: writer.rollouts.stage(SHARED, "large", s, Rollout(users=["bob"])))
    assert charged(backing) - start <= (commits + 4) * LIMIT

    # GC re-counts what the kept versions hold, each against the one before: their charges.
    counted = charged(backing)
    backing.gc(grace=0)
    assert charged(backing) == counted


def test_a_skill_of_few_files_is_charged_its_whole_manifest(
    stores: tuple[skillfs.Store, skillfs.Store],
) -> None:
    """Below the size a table is chunked at, a version's charge is what it was before file
    tables were chunked: its manifest's JSON and the files new against the version before."""
    writer, backing = stores
    scope = Scope.user("support-bot", "alice")  # SHARED's agent
    small = {"SKILL.md": skill_md("small"), **{f"r/{i}.md": b"r %d" % i for i in range(255)}}
    writer.publish(scope, "small", small)
    one = backing.manifest(scope, "small")
    sizes = {e.sha256: e.size for e in one.files.values()}
    first = charged(backing, scope)
    assert first == len(one.model_dump_json()) + sum(sizes.values())
    writer.publish(scope, "small", {**small, "r/0.md": b"changed"})
    two = backing.manifest(scope, "small")
    assert len(two.files) == 256 and two.table is None
    assert charged(backing, scope) - first == len(two.model_dump_json()) + len(b"changed")
