"""The consistency contract (docs/design.md §3, C1–C8) and the store API, on every engine and
topology."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Any

import pytest

import skillfs
from skillfs import File, HistoryPolicy, Limits, Put, Remove, Scope
from skillfs.engines.base import CommitOp, VersionMismatch
from skillfs.errors import (
    Conflict,
    InvalidArgument,
    InvalidPath,
    NotFound,
    StoreUnavailable,
    TooLarge,
)
from tests.helpers import skill_md

ALICE = Scope.user("support-bot", "alice")
BOB = Scope.user("support-bot", "bob")
SHARED = Scope.shared("support-bot")
MARKET = Scope.market("team")


def files_v(name: str, n: int, extra: int = 3) -> dict[str, bytes]:
    """A skill whose every file names version n: a torn read would mix two numbers."""
    out = {"SKILL.md": skill_md(name, body=f"version {n}")}
    out.update({f"references/r{i}.md": f"v{n} ref {i}\n".encode() for i in range(extra)})
    return out


# ----------------------------------------------------------------- publish and read


def test_publish_read_manifest(store: skillfs.Store) -> None:
    script = b"#!/bin/sh\necho hi\n"
    c = store.publish(
        ALICE,
        "code-reviewer",
        {
            "SKILL.md": skill_md("code-reviewer"),
            "scripts/run.sh": File(script),
            "assets/logo.bin": bytes(range(256)),
            "references/empty.md": b"",
            "references/ünï cödé/日本.md": "héllo".encode(),
        },
    )
    assert c.version == 1 and c.revision.counter > 0
    m = store.manifest(ALICE, "code-reviewer")
    assert m.version == 1 and m.commit_id == c.commit_id and not m.deleted
    assert m.frontmatter == {
        "name": "code-reviewer",
        "description": "Does things. Use when testing.",
    }
    assert m.usable and not m.errors
    assert m.files["scripts/run.sh"].mode == 0o755
    assert m.files["assets/logo.bin"].mode == 0o644
    assert m.files["scripts/run.sh"].sha256 == hashlib.sha256(script).hexdigest()
    assert store.read(ALICE, "code-reviewer", "scripts/run.sh") == script
    assert store.read(ALICE, "code-reviewer", "assets/logo.bin") == bytes(range(256))
    assert store.read(ALICE, "code-reviewer", "references/empty.md") == b""
    assert store.read(ALICE, "code-reviewer", "references/ünï cödé/日本.md") == "héllo".encode()
    assert store.skills(ALICE) == ["code-reviewer"]


def test_invalid_skill_is_stored_with_findings(store: skillfs.Store) -> None:
    store.publish(ALICE, "Bad_Name", {"SKILL.md": b"no frontmatter here\n"})
    m = store.manifest(ALICE, "Bad_Name")
    assert not m.usable and m.errors
    store.publish(ALICE, "drafty", {"references/a.md": b"no SKILL.md yet"})
    assert any("SKILL.md" in f.message for f in store.manifest(ALICE, "drafty").errors)


def test_explicit_mode_and_mtime_kept(store: skillfs.Store) -> None:
    store.publish(
        ALICE, "s", {"SKILL.md": skill_md("s"), "bin/tool": File(b"x", mode=0o700, mtime=12.5)}
    )
    e = store.manifest(ALICE, "s").files["bin/tool"]
    assert (e.mode, e.mtime) == (0o700, 12.5)


def test_not_found_errors_list_what_exists(store: skillfs.Store) -> None:
    store.publish(ALICE, "one", files_v("one", 1))
    with pytest.raises(NotFound, match="one"):
        store.manifest(ALICE, "two")
    with pytest.raises(NotFound, match=r"references/r0\.md"):
        store.read(ALICE, "one", "nope.md")
    with pytest.raises(NotFound, match=r"version 7"):
        store.manifest(ALICE, "one", version=7)


# ----------------------------------------------------------------- C2 revisions, C6 conflicts


def test_c2_every_commit_advances_the_agents_revision(store: skillfs.Store) -> None:
    assert store.revision("support-bot") is None
    r1 = store.publish(ALICE, "a", files_v("a", 1)).revision
    r2 = store.publish(SHARED, "b", files_v("b", 1)).revision
    r3 = store.publish(BOB, "a", files_v("a", 1)).revision
    assert r1 < r2 < r3 and r1.epoch == r3.epoch
    assert store.revision("support-bot") == r3 == store.revision(ALICE)
    other_agent = store.publish(Scope.shared("other-bot"), "a", files_v("a", 1)).revision
    assert store.revision("support-bot") == r3
    assert store.revision("other-bot") == other_agent
    m = store.publish(MARKET, "m", files_v("m", 1)).revision
    assert store.revision(MARKET) == m and store.revision("support-bot") == r3
    both = store.revisions(["support-bot", MARKET])
    assert both == {"agents/support-bot": r3, "markets/team": m}


def test_c6_expected_version_conflicts(store: skillfs.Store) -> None:
    assert store.publish(ALICE, "a", files_v("a", 1), expected_version=0).version == 1
    assert store.publish(ALICE, "a", files_v("a", 2), expected_version=1).version == 2
    with pytest.raises(Conflict) as err:
        store.publish(ALICE, "a", files_v("a", 3), expected_version=1)
    assert err.value.current_version == 2 and "version 2" in str(err.value)
    with pytest.raises(Conflict):
        store.publish(ALICE, "a", files_v("a", 3), expected_version=0)
    rev = store.revision(ALICE)
    assert store.manifest(ALICE, "a").version == 2 and store.revision(ALICE) == rev
    # last writer wins without a version; the overwritten version stays in history
    assert store.publish(ALICE, "a", files_v("a", 3)).version == 3
    assert [m.version for m in store.history(ALICE, "a")] == [3, 2, 1]
    assert store.read(ALICE, "a", "references/r0.md", version=2) == b"v2 ref 0\n"


def test_c6_racing_writers_one_wins(store: skillfs.Store, other: skillfs.Store) -> None:
    store.publish(ALICE, "a", files_v("a", 1))
    results: list[object] = []
    barrier = threading.Barrier(2)

    def write(s: skillfs.Store, n: int) -> None:
        barrier.wait()
        try:
            results.append(s.publish(ALICE, "a", files_v("a", n), expected_version=1).version)
        except Conflict as exc:
            results.append(exc)

    ts = [threading.Thread(target=write, args=(s, n)) for s, n in ((store, 10), (other, 20))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(map(type, results), key=str) == sorted([int, Conflict], key=str)
    conflict = next(r for r in results if isinstance(r, Conflict))
    assert conflict.current_version == 2
    assert len(store.history(ALICE, "a")) == 2


# ----------------------------------------------------------------- multi-skill commits, delete


def test_commit_is_all_or_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "b", files_v("b", 1))
    rev = store.revision("support-bot")
    with pytest.raises(Conflict):
        store.commit(
            [
                Put(ALICE, "a", files_v("a", 1), expected_version=0),
                Put(SHARED, "b", files_v("b", 2), expected_version=5),
            ]
        )
    assert store.skills(ALICE) == [] and store.manifest(SHARED, "b").version == 1
    assert store.revision("support-bot") == rev
    c = store.commit([Put(ALICE, "a", files_v("a", 1)), Remove(SHARED, "b", expected_version=1)])
    assert c.versions == {"a": 1, "b": 2} and c.revision > rev
    assert store.skills(SHARED) == [] and store.skills(ALICE) == ["a"]
    with pytest.raises(InvalidArgument, match="one agent or one market"):
        store.commit([Put(ALICE, "a", files_v("a", 2)), Put(MARKET, "x", files_v("x", 1))])


def test_delete_tombstone_and_recreate(store: skillfs.Store) -> None:
    store.publish(ALICE, "a", files_v("a", 1))
    with pytest.raises(Conflict):
        store.delete(ALICE, "a", expected_version=7)
    d = store.delete(ALICE, "a", expected_version=1)
    assert d.version == 2
    with pytest.raises(NotFound):
        store.manifest(ALICE, "a")
    with pytest.raises(NotFound):
        store.delete(ALICE, "a")
    assert store.skills(ALICE) == []
    assert store.publish(ALICE, "a", files_v("a", 3), expected_version=0).version == 3
    assert [(m.version, m.deleted) for m in store.history(ALICE, "a")] == [
        (3, False),
        (2, True),
        (1, False),
    ]


def test_rollback_and_retention(store: skillfs.Store, store_url: str) -> None:
    for n in range(1, 4):
        store.publish(ALICE, "a", files_v("a", n))
    c = store.rollback(ALICE, "a", version=1)
    assert c.version == 4
    assert store.read(ALICE, "a", "references/r1.md") == b"v1 ref 1\n"
    with pytest.raises(Conflict):
        store.rollback(ALICE, "a", version=2, options=skillfs.WriteOptions(expected_version=3))
    tight = skillfs.open_store(
        store_url, history_policy=HistoryPolicy(keep_versions=2, keep_days=0)
    )
    for n in range(5, 12):
        tight.publish(ALICE, "a", files_v("a", n))
        assert len(tight.history(ALICE, "a")) <= 1 + 2 * 2  # the live one + twice the policy
    tight.gc()
    assert [m.version for m in tight.history(ALICE, "a")] == [11, 10, 9]


def test_retried_commit_is_idempotent(store: skillfs.Store) -> None:
    first = store.publish(ALICE, "a", files_v("a", 1), expected_version=0, commit_id="c-123")
    again = store.publish(ALICE, "a", files_v("a", 1), expected_version=0, commit_id="c-123")
    assert again.version == first.version == 1
    assert again.revision == first.revision
    assert len(store.history(ALICE, "a")) == 1


# ----------------------------------------------------------------- bad input writes nothing


@pytest.mark.parametrize("path", ["../x", "/abs", "a//b", "a\\b", "a\x00b", "dir/", "", "a/../b"])
def test_invalid_paths_write_nothing(store: skillfs.Store, path: str) -> None:
    with pytest.raises(InvalidPath):
        store.publish(ALICE, "a", {"SKILL.md": skill_md("a"), path: b"x"})
    assert store.revision("support-bot") is None


# 128 "é" are 256 bytes: no file system could hold the directory (outside testing)
@pytest.mark.parametrize("skill", ["a/b", "..", ".", "", "x\\y", "é" * 128])
def test_invalid_skill_dirs(store: skillfs.Store, skill: str) -> None:
    with pytest.raises(InvalidPath):
        store.publish(ALICE, skill, {"SKILL.md": skill_md("a")})


@pytest.mark.parametrize("files", [{"SKILL.md": None}, ["SKILL.md"], {"SKILL.md": 3}])
def test_files_of_the_wrong_type_are_named(store: skillfs.Store, files: Any) -> None:
    """Not pydantic's ValidationError (outside testing): what is wrong, and what to give."""
    with pytest.raises(InvalidArgument, match=r"give .*bytes, text, a File or a FileEntry"):
        store.publish(ALICE, "a", files)
    assert store.revision("support-bot") is None


def test_a_commit_id_over_128_characters_writes_nothing(store: skillfs.Store) -> None:
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    with pytest.raises(InvalidArgument, match="a commit id is 1-128 characters"):
        store.delete(ALICE, "a", commit_id="x" * 129)
    assert store.manifest(ALICE, "a").version == 1


def test_invalid_ids() -> None:
    for bad in ["", "_x", "..", "a/b", "a b", "x" * 129]:
        with pytest.raises(InvalidPath):
            Scope.user("support-bot", bad)


def test_limits_write_nothing(store_url: str) -> None:
    s = skillfs.open_store(store_url, limits=Limits(max_file_size=1000, max_skill_size=1500))
    with pytest.raises(TooLarge, match="max_file_size"):
        s.publish(ALICE, "a", {"SKILL.md": skill_md("a"), "big": b"x" * 1001})
    with pytest.raises(TooLarge, match="max_skill_size"):
        s.publish(ALICE, "a", {"SKILL.md": skill_md("a"), "b1": b"x" * 800, "b2": b"y" * 800})
    with pytest.raises(InvalidPath, match="is a file"):
        s.publish(ALICE, "a", {"SKILL.md": skill_md("a"), "x": b"1", "x/y": b"2"})
    assert s.revision("support-bot") is None


def test_a_commit_checks_every_skill_before_it_uploads(store_url: str) -> None:
    s = skillfs.open_store(store_url, limits=Limits(max_file_size=1000))
    fine = Put(ALICE, "a", {"SKILL.md": skill_md("a")})
    too_big = Put(ALICE, "b", {"SKILL.md": skill_md("b"), "big": b"x" * 1001})
    with pytest.raises(TooLarge, match="max_file_size"):
        s.commit([fine, too_big])
    assert list(s.engine.blob_shas()) == [] and s.revision("support-bot") is None


def test_a_commit_asks_for_its_blobs_once(monkeypatch: pytest.MonkeyPatch) -> None:
    s = skillfs.open_store("memory://")
    asked: list[int] = []
    touch = s.engine.touch_blobs
    monkeypatch.setattr(
        s.engine, "touch_blobs", lambda shas, now: asked.append(len(shas)) or touch(shas, now)
    )
    s.commit([Put(ALICE, n, {"SKILL.md": skill_md(n), "r.md": n.encode()}) for n in "abc"])
    assert asked == [6]
    s.commit([Remove(ALICE, "a")])
    assert asked == [6]  # nothing to upload: no round trip


# ----------------------------------------------------------------- big files and ranges


def test_large_file_and_ranges(store: skillfs.Store, other: skillfs.Store) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    store.publish(ALICE, "big", {"SKILL.md": skill_md("big"), "data.bin": data})
    e = store.manifest(ALICE, "big").files["data.bin"]
    assert e.size == len(data)
    assert store.read(ALICE, "big", "data.bin") == data
    for start, end in [
        (0, 10),
        (1024 * 1024 - 5, 1024 * 1024 + 5),
        (len(data) - 3, len(data) + 50),
    ]:
        assert other.read_entry(e, start, end) == data[start:end]


@pytest.mark.slow
def test_64_mib_file(store: skillfs.Store, other: skillfs.Store) -> None:
    data = os.urandom(64 * 1024 * 1024)
    store.publish(ALICE, "huge", {"SKILL.md": skill_md("huge"), "blob.bin": data})
    assert other.read(ALICE, "huge", "blob.bin") == data


# ----------------------------------------------------------------- C1, C3, C4, C5


def test_c1_c3_c5_reader_never_sees_torn_or_stale(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    """A writer publishes versions; after each acknowledgement another client's fresh read
    has it (C3), every file of what it reads is of one version (C1), revisions never go
    back (C5)."""
    stop = threading.Event()
    seen: list[int] = []
    errors: list[str] = []

    def reader() -> None:
        last = None
        while not stop.is_set():
            rev = other.revision("support-bot")
            if rev is not None and last is not None and rev < last:
                errors.append(f"revision went back {last} -> {rev}")
            last = rev
            try:
                m = other.manifest(ALICE, "a")
            except NotFound:
                continue
            marks = {
                other.read_entry(e).split(b" ")[0].strip(b"v")
                for p, e in m.files.items()
                if p != "SKILL.md"
            }
            body = other.read_entry(m.files["SKILL.md"]).decode()
            marks.add(body.rsplit("version ", 1)[1].strip().encode())
            if len(marks) != 1:
                errors.append(f"torn read of version {m.version}: {marks}")
            seen.append(m.version)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for n in range(1, 31):
            c = store.publish(ALICE, "a", files_v("a", n))
            fresh = other.manifest(ALICE, "a")
            assert fresh.version >= c.version
            assert other.revision("support-bot") >= c.revision  # type: ignore[operator]
        deadline = time.monotonic() + 30  # on a busy machine the reader may start late
        while not seen and not errors and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:5]
    assert seen, "the reader never read"


def test_c4_reading_by_version_is_stable(store: skillfs.Store) -> None:
    store.publish(ALICE, "a", files_v("a", 1))
    m = store.manifest(ALICE, "a")
    store.publish(ALICE, "a", files_v("a", 2))
    assert store.read(ALICE, "a", "references/r0.md", version=m.version) == b"v1 ref 0\n"
    assert store.read_entry(m.files["references/r2.md"]) == b"v1 ref 2\n"


# ----------------------------------------------------------------- C8 watch


def test_c8_follow_in_order_and_reset(store: skillfs.Store, other: skillfs.Store) -> None:
    store.publish(SHARED, "z", files_v("z", 0))
    start = store.revision("support-bot")
    expected = []
    for n in range(5):
        c = store.publish(ALICE if n % 2 else SHARED, f"s{n}", files_v(f"s{n}", n))
        expected.append(("put", f"s{n}", c.revision))
    c = store.commit([Remove(SHARED, "s0"), Put(BOB, "b", files_v("b", 1))])
    expected += [("remove", "s0", c.revision), ("put", "b", c.revision)]
    got = []
    for change in other.changes.follow("support-bot", since=start, timeout=10):
        got.append((change.op, change.skill, change.revision))
        if len(got) == len(expected):
            break
    assert sorted(got[-2:]) == sorted(expected[-2:]) and got[:-2] == expected[:-2]
    assert (
        next(iter(other.changes.follow("support-bot", since=c.revision, timeout=0.3)), None) is None
    )
    # a revision of another history (another epoch) is a reset, not a silent skip
    stranger = skillfs.Revision(epoch="not-this-store", counter=1)
    first = next(iter(other.changes.follow("support-bot", since=stranger, timeout=5)))
    assert first.op == "reset"


def test_c8_follow_sees_live_changes(store: skillfs.Store, other: skillfs.Store) -> None:
    since = store.publish(ALICE, "a", files_v("a", 1)).revision
    got: list[skillfs.Change] = []

    def follow() -> None:
        for ch in other.changes.follow("support-bot", since=since, timeout=10):
            got.append(ch)
            if len(got) == 3:
                return

    t = threading.Thread(target=follow)
    t.start()
    revs = [store.publish(ALICE, "a", files_v("a", n)).revision for n in (2, 3, 4)]
    t.join()
    assert [c.revision for c in got] == revs and [c.version for c in got] == [2, 3, 4]


# ----------------------------------------------------------------- listings, usage


def test_listings(store: skillfs.Store) -> None:
    store.publish(ALICE, "a", files_v("a", 1))
    store.publish(BOB, "b", files_v("b", 1))
    store.publish(SHARED, "c", files_v("c", 1))
    store.publish(MARKET, "m", files_v("m", 1))
    store.publish(Scope.shared("zeta"), "z", files_v("z", 1))
    assert store.agents() == ["support-bot", "zeta"]
    assert store.markets() == ["team"]
    assert store.users("support-bot") == ["alice", "bob"]
    assert set(map(str, store.scopes("support-bot"))) == {str(ALICE), str(BOB), str(SHARED)}
    assert len(store.manifests(SHARED)) == 1


def test_usage_counts(store: skillfs.Store) -> None:
    store.usage.record("support-bot", {("alice", "a"): 2, ("bob", "a"): 1})
    store.usage.record("support-bot", {("alice", "a"): 3})
    assert store.usage.counts("support-bot") == {("alice", "a"): 5, ("bob", "a"): 1}


# ----------------------------------------------------------------- GC


def test_gc_keeps_referenced_and_recently_touched_blobs(store_url: str) -> None:
    if store_url.startswith("grpc"):
        pytest.skip("over grpc:// the server collects, by its own clock and history policy")
    now = [1000.0]
    s = skillfs.open_store(
        store_url, clock=lambda: now[0], history_policy=HistoryPolicy(keep_versions=0, keep_days=0)
    )
    shared_bytes = b"shared reference text\n"
    s.publish(
        ALICE, "a", {"SKILL.md": skill_md("a"), "r.md": shared_bytes, "only-a.md": b"gone soon"}
    )
    s.publish(BOB, "b", {"SKILL.md": skill_md("b"), "r.md": shared_bytes})
    s.delete(ALICE, "a")
    now[0] = 5000.0
    # a publisher reuses the unreferenced blob: it touches it before its commit lands
    reused = b"gone soon"
    s.blobs.upload({hashlib.sha256(reused).hexdigest(): reused}, set(), now[0])
    report = s.gc(grace=100)
    assert report.blobs_deleted == 1  # a's SKILL.md: unreferenced and untouched since 1000
    assert hashlib.sha256(skill_md("a")).hexdigest() not in set(s.engine.blob_shas())
    # touched within the grace: kept, although nothing references it yet
    assert hashlib.sha256(reused).hexdigest() in set(s.engine.blob_shas())
    s.publish(ALICE, "a2", {"SKILL.md": skill_md("a2"), "x.md": reused})
    fresh = skillfs.open_store(store_url)
    assert fresh.read(ALICE, "a2", "x.md") == reused
    assert fresh.read(BOB, "b", "r.md") == shared_bytes
    # a blob nobody references or touched is swept once the grace has passed
    s.delete(ALICE, "a2")
    now[0] = 9000.0
    assert s.gc(grace=100).blobs_deleted == 2  # a2's SKILL.md and the reused blob
    digest = hashlib.sha256(reused).hexdigest()
    assert digest not in set(s.engine.blob_shas())


def test_a_step_sees_each_publish_when_no_history_is_kept(store_url: str) -> None:
    """With nothing kept, a commit's copy of the version it replaced is dropped right after
    it: a follower catching up still finds the new version and its removal (C3; etcd dated a
    version only by that copy and lost the put)."""
    keep_none = HistoryPolicy(keep_versions=0, keep_days=0)
    with (
        skillfs.open_store(store_url, history_policy=keep_none) as store,
        skillfs.Skills(store, ALICE.agent_id, ALICE.user_id or "") as skills,
    ):
        for n in range(1, 4):
            store.publish(ALICE, "k", files_v("k", n))
            assert skills.snapshot().read_bytes("k", "references/r1.md") == f"v{n} ref 1\n".encode()
        store.delete(ALICE, "k")
        assert "k" not in [s.id for s in skills.snapshot().skills]


def test_gc_racing_publishes_never_loses_a_blob(store_url: str) -> None:
    """History is kept for nothing, so between a delete and the next publish the blob is
    unreferenced: only the publisher's touch (the grace) keeps GC from sweeping it."""
    keep_none = HistoryPolicy(keep_versions=0, keep_days=0)
    store = skillfs.open_store(store_url, history_policy=keep_none)
    other = skillfs.open_store(store_url, history_policy=keep_none, blob_cache_bytes=0)
    payload = {"SKILL.md": skill_md("r"), "data.md": b"reused by every version\n"}
    stop = threading.Event()
    failures: list[str] = []

    def churn() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            store.publish(ALICE, "r", payload)
            store.delete(ALICE, "r")
        if n == 0:
            failures.append("no publish happened")

    t = threading.Thread(target=churn)
    t.start()
    deadline = time.monotonic() + 3
    sweeps = 0
    try:
        while time.monotonic() < deadline:
            other.gc(grace=1.5)  # (0.5 s: a loaded CI machine took longer from touch to commit)
            sweeps += 1
            try:
                other.read(ALICE, "r", "data.md")
            except NotFound as exc:
                if "blob" in str(exc):
                    failures.append(str(exc))
    finally:
        stop.set()
        t.join()
    store.publish(ALICE, "r", payload)
    assert other.read(ALICE, "r", "data.md") == payload["data.md"]
    assert not failures and sweeps > 1


def test_c8_wiped_domain_is_a_reset(store: skillfs.Store) -> None:
    """A follower whose revision names an epoch the store no longer has (wiped, restored,
    failed over to an empty replica) is told to reload, not left waiting."""
    gone = skillfs.Revision(epoch="an-epoch-this-store-never-had", counter=9)
    first = next(iter(store.changes.follow("never-written", since=gone, timeout=5)))
    assert first.op == "reset"
    # a foreign epoch whose counter is at or past this store's: nothing to replay, still a reset
    cur = store.publish(ALICE, "a", files_v("a", 1)).revision
    for counter in (cur.counter, cur.counter + 10**6):
        foreign = skillfs.Revision(epoch="not-this-store", counter=counter)
        change = next(iter(store.changes.follow("support-bot", since=foreign, timeout=5)), None)
        assert change is not None and change.op == "reset", counter
    assert next(iter(store.changes.follow("never-written", timeout=0.2)), None) is None


def test_put_keeps_stored_files_by_reference(store: skillfs.Store) -> None:
    store.publish(ALICE, "a", files_v("a", 1))
    old = store.manifest(ALICE, "a")
    files: dict[str, File | bytes | skillfs.FileEntry] = dict(old.files)
    files["references/new.md"] = b"added\n"
    assert store.publish(ALICE, "a", files, expected_version=1).version == 2
    assert store.read(ALICE, "a", "references/r1.md") == b"v1 ref 1\n"
    assert store.manifest(ALICE, "a").files["references/r1.md"] == old.files["references/r1.md"]
    ghost = skillfs.FileEntry(sha256="0" * 64, size=3, mode=0o644, mtime=0.0)
    rev = store.revision(ALICE)
    with pytest.raises(NotFound, match="no longer has blob"):
        store.publish(ALICE, "a", {"SKILL.md": skill_md("a"), "x": ghost})
    assert store.revision(ALICE) == rev


def test_retried_commit_after_another_writer_is_still_ours(store: skillfs.Store) -> None:
    """The reply of a two-skill commit is lost, then someone edits one of its skills: the
    retry must report the commit as landed, not Conflict and not a second write."""
    store.commit(
        [Put(ALICE, "a", files_v("a", 1)), Put(ALICE, "b", files_v("b", 1))],
        options=skillfs.WriteOptions(commit_id="lost-reply"),
    )
    store.publish(ALICE, "b", files_v("b", 2))
    again = store.commit(
        [
            Put(ALICE, "a", files_v("a", 1), expected_version=0),
            Put(ALICE, "b", files_v("b", 1), expected_version=0),
        ],
        options=skillfs.WriteOptions(commit_id="lost-reply"),
    )
    assert again.versions == {"a": 1, "b": 1}
    assert store.manifest(ALICE, "b").version == 2
    assert len(store.history(ALICE, "a")) == 1 and len(store.history(ALICE, "b")) == 2


def test_a_lost_answer_and_another_writer_on_top_is_still_ours(
    store: skillfs.Store, store_url: str
) -> None:
    """Outside (fault) testing: a commit that landed, whose answer was lost (a connection
    reset, a leader change) while another writer published on top, was retried into a false
    Conflict (C6): the retry looked for its commit id in the current version only. Likewise
    a caller's own retry of a one-skill commit."""
    store.publish(ALICE, "s", files_v("s", 1))
    other = skillfs.open_store(store_url)
    real = store.engine.commit
    lost: list[int] = []

    def commit_then_lose_the_answer(
        domain: str, ops: Any, checks: Any = (), charges: Any = ()
    ) -> Any:
        revision = real(domain, ops, checks, charges)
        if not lost:
            lost.append(1)
            other.publish(ALICE, "s", files_v("s", 3), expected_version=2)
            raise StoreUnavailable("the connection was reset")
        return revision

    store.engine.commit = commit_then_lose_the_answer  # type: ignore[method-assign]
    try:
        result = store.publish(ALICE, "s", files_v("s", 2), expected_version=1, commit_id="lost")
    finally:
        del store.engine.commit
    assert result.versions == {"s": 2} and store.manifest(ALICE, "s").version == 3
    assert [m.commit_id for m in store.history(ALICE, "s")].count("lost") == 1
    again = store.publish(ALICE, "s", files_v("s", 2), expected_version=1, commit_id="lost")
    assert again.versions == {"s": 2} and store.manifest(ALICE, "s").version == 3


def test_range_reads_at_and_past_the_end(store: skillfs.Store, store_url: str) -> None:
    data = os.urandom(2 * 1024 * 1024)  # a whole number of etcd's 1 MiB chunks
    store.publish(ALICE, "big", {"SKILL.md": skill_md("big"), "d.bin": data})
    e = store.manifest(ALICE, "big").files["d.bin"]
    reader = skillfs.open_store(store_url, blob_cache_bytes=0)  # read the store, not a cache
    assert reader.read_entry(e, len(data)) == b""
    assert reader.read_entry(e, len(data) + 10, len(data) + 20) == b""
    assert reader.read_entry(e, len(data) - 1) == data[-1:]


def test_engine_commit_checks_versions_itself(store: skillfs.Store) -> None:
    """The engine's atomic step re-checks every op's expected version: a stale op raises
    VersionMismatch naming the real version and writes nothing (the Store's own check
    before it cannot see a writer that lands in between)."""
    c = store.publish(ALICE, "a", files_v("a", 1))
    store.publish(ALICE, "a", files_v("a", 2))
    live = store.manifest(ALICE, "a")
    stale = live.model_copy(update={"version": 2, "commit_id": "stale"})
    before = store.revision(ALICE)
    with pytest.raises(VersionMismatch) as err:
        store.engine.commit(ALICE.domain, [CommitOp(scope=ALICE, manifest=stale, expect=1)])
    assert err.value.current == 2 and err.value.skill == "a"
    assert store.revision(ALICE) == before and before is not None and before > c.revision
    assert store.manifest(ALICE, "a") == live
    assert [m.version for m in store.history(ALICE, "a")] == [2, 1]
