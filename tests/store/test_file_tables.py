"""Big file tables are stored in content-addressed chunks (docs/design.md §2, "File tables"):
every read gives them back whole, a one-file change stores a chunk or two, GC keeps the
chunks of kept versions and sweeps the others, and manifests stored whole before keep
reading. The bytes a commit adds are measured in tests/engines/test_history_growth.py."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

import skillfs
from skillfs import FileEntry, Rollout, Scope
from skillfs.engines.base import CommitOp, Engine
from skillfs.errors import InvalidArgument
from skillfs.model import Manifest
from skillfs.model.table import TableRef
from skillfs.store.blobs import sha256
from skillfs.store.retention import HistoryPolicy
from skillfs.store.tables import FANOUT, INLINE_MAX, Tables
from tests.helpers import skill_md
from tests.stores import url_for

SHARED = Scope.shared("support-bot")
#: Files of the big skill: over INLINE_MAX, and in more leaf chunks than FANOUT (so its
#: table has a level of chunks above its leaves).
BIG = 1500


def big_files(tag: str = "", count: int = BIG) -> dict[str, bytes]:
    """SKILL.md and `count - 1` notes of 50 different texts (few blobs: a fast upload)."""
    rows = {f"references/part-{i // 100:02d}/n-{i:04d}.md": f"{tag}{i % 50}\n".encode()
            for i in range(count - 1)}  # fmt: skip
    return {"SKILL.md": skill_md("big"), **rows}


def tables_of(store: skillfs.Store) -> Tables | None:
    """The store's file tables (None over grpc://: the server's store keeps them; any other
    store without them fails, rather than skipping the checks that need them)."""
    found = store.engine if isinstance(store.engine, Tables) else None
    assert (found is None) == store.url.startswith("grpc://"), store.url
    return found


def stored(store: skillfs.Store, skill: str, version: int | None = None) -> Manifest:
    """A version as the engine holds it, its table in chunks where big."""
    tables = tables_of(store)
    assert tables is not None
    raw = tables.inner
    if version is None:
        return raw.load_skills(SHARED, [skill])[skill]
    found = raw.history_version(SHARED, skill, version)
    assert found is not None
    return found


def chunks_of(tables: Tables, *manifests: Manifest) -> set[str]:
    """Every chunk below the stored manifests' tables."""
    roots = [d for m in manifests if m.table is not None for d in m.table.chunks]
    found = tables._trees(roots)
    assert None not in found.values()
    return set(found)


def edited(m: Manifest, path: str, data: bytes) -> dict[str, FileEntry | bytes]:
    return {**m.files, path: data}


def test_a_big_table_is_stored_in_chunks_and_read_whole(store: skillfs.Store) -> None:
    files = big_files()
    store.publish(SHARED, "big", files)
    small = {f"r{i:03d}.md": b"%d" % i for i in range(INLINE_MAX - 1)}
    store.publish(SHARED, "small", {"SKILL.md": skill_md("small"), **small})
    m = store.manifest(SHARED, "big")
    assert sorted(m.files) == sorted(files) and m.table is None
    assert store.read(SHARED, "big", "references/part-07/n-0777.md") == b"27\n"
    assert store.versions(SHARED, "big")[0].file_count == BIG
    assert {k: len(v.files) for k, v in store.manifests(SHARED).items()} == {
        "big": BIG,
        "small": INLINE_MAX,
    }
    if tables_of(store) is None:
        return
    big = stored(store, "big")
    assert not big.files and big.table is not None
    assert big.table.count == BIG and big.table.size == sum(len(v) for v in files.values())
    assert len(big.table.chunks) <= FANOUT
    tables = tables_of(store)
    assert tables is not None
    assert len(chunks_of(tables, big)) > len(big.table.chunks)  # a level above the leaves
    assert len(stored(store, "small").files) == INLINE_MAX  # a small table stays inline


def test_a_one_file_change_stores_a_few_chunks(store: skillfs.Store) -> None:
    store.publish(SHARED, "big", big_files())
    before = set(store.engine.blob_shas())
    m = store.manifest(SHARED, "big")
    store.publish(SHARED, "big", edited(m, "references/part-09/n-0900.md", b"new\n"),
                  expected_version=1)  # fmt: skip
    added = set(store.engine.blob_shas()) - before
    assert sha256(b"new\n") in added
    # the file, its leaf chunk (or two) and the chunk above (or two: the level above cuts its
    # runs by the chunks' digests, which the files' times make differ from run to run)
    assert 2 <= len(added) <= 5
    if tables_of(store) is not None:
        old, new = stored(store, "big", 1), stored(store, "big")
        assert old.table is not None and new.table is not None
        assert 1 <= len(set(new.table.chunks) - set(old.table.chunks)) <= 2


def test_old_versions_read_back_whole(store: skillfs.Store) -> None:
    v1 = big_files()
    store.publish(SHARED, "big", v1)
    m1 = store.manifest(SHARED, "big")
    store.publish(SHARED, "big", edited(m1, "references/new.md", b"added\n"), expected_version=1)
    m2 = store.manifest(SHARED, "big")
    gone = dict(m2.files)
    del gone["references/part-00/n-0001.md"]
    store.publish(SHARED, "big", gone, expected_version=2, message="drop one")
    assert [len(m.files) for m in store.history(SHARED, "big")] == [BIG, BIG + 1, BIG]
    summaries = store.versions(SHARED, "big")
    assert [(v.version, v.file_count) for v in summaries] == [(3, BIG), (2, BIG + 1), (1, BIG)]
    assert summaries[2].size == sum(len(v) for v in v1.values())
    assert store.manifest(SHARED, "big", version=1) == m1
    assert store.read(SHARED, "big", "references/part-00/n-0001.md", version=1) == b"1\n"
    store.rollback(SHARED, "big", version=1)
    assert store.manifest(SHARED, "big").files == m1.files
    audit = store.governance.audit(SHARED, skill="big")
    assert [(e.version, e.action) for e in audit] == [(v, "publish") for v in (4, 3, 2, 1)]


def test_a_staged_candidate_of_many_files_is_chunked(store: skillfs.Store) -> None:
    store.publish(SHARED, "big", {"SKILL.md": skill_md("big")})
    store.rollouts.stage(SHARED, "big", big_files("c"), Rollout(users=["alice"]))
    m = store.manifest(SHARED, "big")
    assert m.candidate is not None and len(m.candidate.files) == BIG
    assert store.versions(SHARED, "big")[0].candidate.file_count == BIG  # type: ignore[union-attr]
    if tables_of(store) is not None:
        held = stored(store, "big").candidate
        assert held is not None and held.table is not None and not held.files
    store.rollouts.promote(SHARED, "big")
    assert len(store.manifest(SHARED, "big").files) == BIG
    assert store.read(SHARED, "big", "references/part-00/n-0009.md") == b"c9\n"


def test_a_manifest_stored_whole_before_chunks_keeps_reading(store: skillfs.Store) -> None:
    tables = tables_of(store)
    if tables is None:
        pytest.skip("a manifest is written to the engine itself: not over grpc://")
    store.publish(SHARED, "donor", big_files())
    whole = (
        store.manifest(SHARED, "donor")
        .moved_to("old")
        .stamped(version=1, commit_id=uuid.uuid4().hex, committed_at=1.0, actor="0.1", message="")
    )
    tables.inner.commit(SHARED.domain, [CommitOp(scope=SHARED, manifest=whole, expect=0)])
    assert len(stored(store, "old").files) == BIG  # as an older skillfs stored it
    assert store.manifest(SHARED, "old").files == whole.files
    m = store.manifest(SHARED, "old")
    store.publish(SHARED, "old", edited(m, "references/x.md", b"x\n"), expected_version=1)
    assert stored(store, "old").table is not None  # its next version is chunked
    assert store.manifest(SHARED, "old", version=1).files == whole.files
    assert len(store.manifest(SHARED, "old").files) == BIG + 1


def test_a_commit_cannot_name_stored_chunks(store: skillfs.Store) -> None:
    """A table of chunks is the store's to make: one sent in a commit (by a grpc:// client
    to its server, say) could name another scope's chunks and read its files."""
    store.publish(SHARED, "big", big_files())
    m = store.manifest(SHARED, "big")
    one = {"SKILL.md": m.files["SKILL.md"]}
    forged = (
        Manifest.empty("thief")
        .with_files(one, None, (), None)
        .stamped(version=1, commit_id=uuid.uuid4().hex, committed_at=1.0, actor="x", message="")
    )
    forged = forged.model_copy(update={"table": TableRef(chunks=("0" * 64,), count=1, size=1)})
    with pytest.raises(InvalidArgument, match="not a stored table"):
        store.engine.commit(SHARED.domain, [CommitOp(scope=SHARED, manifest=forged, expect=0)])
    assert "thief" not in store.skills(SHARED) and store.manifest(SHARED, "big") == m


def test_a_missing_chunk_fails_its_skill_not_the_scope(store_url: str) -> None:
    store = skillfs.open_store(store_url)
    tables = tables_of(store)
    if tables is None:
        pytest.skip("a chunk is deleted from the engine itself: not over grpc://")
    store.publish(SHARED, "big", big_files())
    store.publish(SHARED, "small", {"SKILL.md": skill_md("small")})
    leaf = stored(store, "big").table.chunks[-1]  # type: ignore[union-attr]  # how many: by digests
    assert tables.inner.delete_blob_if_idle(leaf, float("inf"))
    fresh = skillfs.open_store(store_url)  # nothing cached
    loaded = fresh.manifests(SHARED)
    assert loaded["small"].usable
    big = loaded["big"]
    assert not big.usable and not big.files
    assert [f.rule for f in big.errors] == ["manifest-unreadable"] and leaf in big.errors[0].message


def test_a_reload_reads_no_chunk(store: skillfs.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    tables = tables_of(store)
    if tables is None:
        pytest.skip("chunk reads are counted at the engine itself: not over grpc://")
    store.publish(SHARED, "big", big_files())
    reads: list[Sequence[tuple[str, int]]] = []
    inner: Engine = tables.inner
    real = inner.get_chunks
    monkeypatch.setattr(inner, "get_chunks", lambda keys: reads.append(keys) or real(keys))
    first = store.manifests(SHARED)["big"]
    assert store.manifests(SHARED)["big"] == first and store.history(SHARED, "big")
    assert reads == []  # the commit left its chunks parsed in the cache


def test_gc_keeps_the_chunks_of_kept_versions_and_sweeps_the_rest(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = url_for(request, "sqlite", tmp_path)
    now = [1000.0]
    keep_one = HistoryPolicy(keep_versions=1, keep_days=1)
    store = skillfs.open_store(url, clock=lambda: now[0], history_policy=keep_one)
    tables = tables_of(store)
    assert tables is not None
    store.publish(SHARED, "big", big_files())
    for n in (1, 2):
        m = store.manifest(SHARED, "big")
        path = f"references/part-00/n-{n:04d}.md"
        store.publish(SHARED, "big", edited(m, path, b"v%d\n" % n), expected_version=n)
    first, second, v3 = stored(store, "big", 1), stored(store, "big", 2), stored(store, "big")
    now[0] += 3 * 86400  # versions 1 and 2 older than the day kept
    report = store.gc(grace=100)
    assert report.history_dropped == 1  # version 1: past the one version kept
    left = set(store.engine.blob_shas())
    assert chunks_of(tables, second, v3) <= left  # the kept version's and the live one's
    gone = chunks_of(tables, first) - chunks_of(tables, second, v3)
    assert gone and not gone & left  # version 1's own chunk, untouched since: swept
    fresh = skillfs.open_store(url)
    assert len(fresh.manifest(SHARED, "big", version=2).files) == BIG
    assert fresh.read(SHARED, "big", "references/part-00/n-0002.md") == b"v2\n"


def test_gc_through_a_server_keeps_the_chunks(store: skillfs.Store, store_url: str) -> None:
    """Over grpc:// the server runs GC: only its store sees the chunks (on every engine the
    skill reads back whole after a GC with no grace)."""
    store.publish(SHARED, "big", big_files())
    m = store.manifest(SHARED, "big")
    store.publish(SHARED, "big", edited(m, "references/x.md", b"x\n"), expected_version=1)
    assert store.gc(grace=0).blobs_deleted == 0  # every blob is some kept version's
    fresh = skillfs.open_store(store_url)
    assert len(fresh.manifest(SHARED, "big").files) == BIG + 1
    assert len(fresh.manifest(SHARED, "big", version=1).files) == BIG


def test_an_edit_touches_only_what_the_replaced_version_lacks(
    store: skillfs.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the replaced version holds is safe from GC without a touch (the mark reads the
    live version before the commit and after); on etcd each touch is a revision kept until
    compaction, so touching a large skill's every file made each edit cost kilobytes."""
    store.publish(SHARED, "big", big_files())
    touched: list[str] = []
    real = store.engine.touch_blobs

    def touch(shas: Sequence[str], now: float) -> set[str]:
        touched.extend(shas)
        return real(shas, now)

    monkeypatch.setattr(store.engine, "touch_blobs", touch)
    m1 = store.manifest(SHARED, "big")
    store.publish(SHARED, "big", edited(m1, "references/x.md", b"x\n"), expected_version=1)
    assert sha256(b"x\n") in touched and len(touched) <= 4  # the new file, maybe new chunks
    touched.clear()
    m2 = store.manifest(SHARED, "big")
    without = {p: e for p, e in m2.files.items() if p != "references/x.md"}
    store.publish(SHARED, "big", without, expected_version=2)
    assert touched == []  # nothing new
    store.rollback(SHARED, "big", version=2)  # brings back a file the live version lacks
    assert touched == [sha256(b"x\n")]


def test_gc_recounts_a_chunked_skill_as_its_commits_were_charged(store: skillfs.Store) -> None:
    """Quotas (docs/security.md): GC re-counts a skill from its stored manifests, their
    chunks and the files their tables list, as the commits were charged."""
    if tables_of(store) is None:
        pytest.skip("a skillfs server counts its own quotas")
    store.publish(SHARED, "big", big_files())
    m = store.manifest(SHARED, "big")
    store.publish(SHARED, "big", edited(m, "references/x.md", b"x\n"), expected_version=1)
    key = f"scope:{SHARED}"
    charged = (store.engine.quota_used(SHARED.domain) or {})[key]
    assert charged > sum(len(v) for v in big_files().values())
    store.engine.adjust_quota(SHARED.domain, {key: -charged})
    store.gc(grace=0)
    assert (store.engine.quota_used(SHARED.domain) or {})[key] == charged


def test_every_engine_method_is_the_inner_engines_or_converts() -> None:
    """An `Engine` method Tables neither converts nor hands to its inner engine would run the
    base class's default over Tables itself (`usage_agents` answering None over SQLite)."""
    methods = {n for n, v in vars(Engine).items() if callable(v) and not n.startswith("_")}
    helpers = {"unavailable", "unavailable_error"}  # the engine's own URL: the same either way
    assert methods - helpers <= set(vars(Tables)), methods - helpers - set(vars(Tables))
    tables = skillfs.open_store("memory://").engine
    assert isinstance(tables, Tables)
    assert tables.usage_agents == tables.inner.usage_agents  # bound to the inner engine
    assert tables.usage_agents() == []
