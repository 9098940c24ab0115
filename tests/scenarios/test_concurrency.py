"""The concurrency checker (tests/checker.py) against every engine class, with real servers.

8 writer processes do read-modify-write with `expected_version` on 4 shared skills while 4
reader processes take snapshots and read every file of every skill, for 5 seconds (longer,
up to 20, until 300 writes were acknowledged); the recorded history is then checked for C1,
C2, C3, C5 and C6 (see tests/checker.py). Each run prints the number of operations it checked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skillfs.model import FileEntry, Rollout
from tests.checker import (
    PATHS,
    Content,
    FilesRead,
    History,
    ManifestsRead,
    Op,
    RevisionRead,
    Target,
    WriteOp,
    _files_read,
    check,
    record,
)
from tests.stores import url_for

WRITERS = 8
READERS = 4
SECONDS = 5.0
#: On a slow or busy machine a run goes on (up to MAX_SECONDS) until this many writes landed.
MIN_ACKED = 300
MAX_SECONDS = 40.0
#: The share of commits that write two skills in two scopes (shared and per-user) at once.
PAIR_RATIO = 0.25
#: A run must check at least this many store calls to count as a test.
MIN_OPERATIONS = 1000


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ["sqlite", "redis", "redis-cluster", "etcd", "postgres"])
def test_concurrent_writers_and_readers_keep_the_contract(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    url = url_for(request, engine, tmp_path)
    history = record(
        url,
        tmp_path / "ops",
        writers=WRITERS,
        readers=READERS,
        pair_ratio=PAIR_RATIO,
        duration=SECONDS,
        min_acked=MIN_ACKED,
        max_duration=MAX_SECONDS,
    )
    report = check(history)
    print(f"\n{engine}: {report.summary()} in {history.wall_seconds:.1f}s")
    assert report.ok, "\n".join(report.violations[:30])
    assert report.operations >= MIN_OPERATIONS, report.summary()
    assert report.counts["writes acknowledged"] >= MIN_ACKED // 3, report.summary()
    assert report.counts["writes conflicted"] > 0, "no write raced another: nothing was tested"
    assert report.counts["multi-scope commits"] > 0, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ["sqlite", "redis", "etcd"])
def test_worker_snapshots_are_isolated(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    """The same writers (half of their commits span the shared and the per-user scope)
    against 4 worker processes taking `Skills.snapshot()`s and reading every file through
    them: C1, C3, C5 and C6 as above, plus C4 — a snapshot holds whole commits and nothing
    committed after its revision."""
    url = url_for(request, engine, tmp_path)
    history = record(
        url,
        tmp_path / "ops",
        writers=WRITERS,
        readers=0,
        runtime_readers=READERS,
        pair_ratio=0.5,
        duration=4.0,
        min_acked=MIN_ACKED // 2,
        max_duration=MAX_SECONDS / 2,
    )
    report = check(history)
    print(f"\n{engine}: {report.summary()} in {history.wall_seconds:.1f}s")
    assert not report.violations, "\n".join(report.violations[:30])
    assert report.operations >= MIN_OPERATIONS, report.summary()
    assert report.counts["C4 snapshot checks"] > 0, report.summary()


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("engine", ["sqlite", "redis", "etcd", "grpc"])
def test_staged_views_across_processes(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    """Writers that, 60 % of the time, stage a candidate for one user or a share of users,
    widen, promote or abort it, or set the label `stable` on the head or remove it, instead
    of publishing, against 4 worker processes of 4 users (2 of them pinned to `stable`)
    reading every file through their snapshots: C1-C6 as above, plus R — no worker ever
    holds a candidate its rule excludes, and each holds it wherever its rule includes it (so,
    with C3, at the next step after it is staged for it); a pinned worker holds exactly the
    version its label names as of its snapshot's revision, the head where there is none."""
    url = url_for(request, engine, tmp_path)
    run = uuid.uuid4().hex[:6]
    history = record(
        url,
        tmp_path / "ops",
        targets=[Target("shared:checker", f"chk-{run}-{i}") for i in range(3)],
        writers=4,
        readers=1,
        runtime_readers=4,
        users=["u0", "u1", "u2", "u3"],
        stage_ratio=0.6,
        pinned_readers=2,
        duration=4.0,
        min_acked=MIN_ACKED // 3,
        max_duration=MAX_SECONDS / 2,
    )
    report = check(history)
    print(f"\n{engine}: {report.summary()} in {history.wall_seconds:.1f}s")
    assert not report.violations, "\n".join(report.violations[:30])
    assert report.counts["staged writes"] >= 20, report.summary()
    assert report.counts["R candidate views"] > 0, report.summary()
    assert report.counts["R rollout checks"] > report.counts["R candidate views"], report.summary()
    assert report.counts["R pinned views"] > 0, report.summary()
    assert report.counts["R pin checks"] > report.counts["R pinned views"], report.summary()


# --------------------------------------------------------------------------- the checker itself
# A checker that never fails proves nothing: each synthetic history below breaks one clause.

T = Target("shared:a", "s")
E = "epoch"


def _write(tag: str, parent: str | None, expected: int, t0: int, t1: int, **kw: Any) -> WriteOp:
    target = kw.pop("target", T)
    outcome = kw.pop("outcome", "ok")
    if outcome == "ok":
        kw.setdefault("version", expected + 1)
        kw.setdefault("epoch", E)
    return WriteOp(
        proc=tag.split("-")[0],
        invoke=t0,
        complete=t1,
        scope=target.scope,
        skill=target.skill,
        tag=tag,
        parent=parent,
        expected=expected,
        outcome=outcome,
        **kw,
    )


def _read(
    proc: str, t0: int, version: int, tag: str, snap: int = 1, target: Target = T
) -> ManifestsRead:
    return ManifestsRead(
        proc=proc,
        invoke=t0,
        complete=t0 + 1,
        snap=snap,
        scope=target.scope,
        skills={target.skill: (version, tag)} if version else {},
        wanted=[target.skill],
    )


def _files(proc: str, t0: int, version: int, tag: str, tags: list[str] | None = None) -> FilesRead:
    return FilesRead(
        proc=proc,
        invoke=t0,
        complete=t0 + 1,
        snap=1,
        scope=T.scope,
        skill=T.skill,
        version=version,
        commit_id=tag,
        paths=sorted(PATHS),
        tags=tags or [tag] * len(PATHS),
        bad_sha=[],
    )


def _rev(proc: str, t0: int, counter: int, snap: int = 1, isolated: bool = False) -> RevisionRead:
    return RevisionRead(
        proc=proc,
        invoke=t0,
        complete=t0 + 1,
        snap=snap,
        epoch=E,
        counter=counter,
        isolated=isolated,
    )


def _good() -> tuple[list[Op], list[tuple[int, str]]]:
    ops: list[Op] = [
        _write("w0-1", None, 0, 0, 10, counter=1),
        _write("w1-1", None, 0, 5, 12, outcome="conflict", current=1),
        _write("w1-2", "w0-1", 1, 20, 30, counter=2),
        _rev("r0", 31, 2),
        _read("r0", 32, 2, "w1-2"),
        _files("r0", 33, 2, "w1-2"),
    ]
    return ops, [(1, "w0-1"), (2, "w1-2")]


def _violations(ops: list[Op], chain: list[tuple[int, str]], **kw: bool) -> list[str]:
    report = check(History(agent="a", targets=[T], ops=ops, versions={T: chain}), **kw)
    return report.violations


def test_checker_passes_a_good_history() -> None:
    assert _violations(*_good()) == []


@pytest.mark.parametrize(
    ("clause", "breaking"),
    [
        ("C1", lambda ops, chain: ops.append(_files("r1", 40, 2, "w1-2", ["w1-2", "w0-1"] * 2))),
        ("C1", lambda ops, chain: ops.append(_read("r1", 40, 2, "w9-9"))),
        (
            "C1",
            lambda ops, chain: ops.append(
                dataclasses.replace(_files("r1", 40, 2, "w1-2"), bad_sha=["SKILL.md"])
            ),
        ),
        ("C3", lambda ops, chain: ops.append(_read("r1", 31, 1, "w0-1"))),
        ("C3", lambda ops, chain: ops.append(_rev("r1", 31, 1))),
        (
            "C3",
            lambda ops, chain: ops.extend([_rev("r1", 15, 2, 7), _read("r1", 16, 1, "w0-1", 7)]),
        ),
        ("C5", lambda ops, chain: ops.append(_rev("r0", 40, 1, 2))),
        ("C5", lambda ops, chain: ops.append(_read("r0", 40, 1, "w0-1", 2))),
        ("C6", lambda ops, chain: chain.pop()),
        ("C6", lambda ops, chain: chain.append((3, "w1-1"))),
        ("C6", lambda ops, chain: ops.append(_write("w2-1", None, 0, 40, 41, outcome="error"))),
        ("C6", lambda ops, chain: ops.append(_write("w2-1", None, 0, 40, 41, outcome="conflict"))),
        (
            "C6",  # a lost update: w2-1 edited v1 and was acknowledged as v3
            lambda ops, chain: (
                ops.append(_write("w2-1", "w0-1", 1, 40, 41, version=3, counter=3)),
                chain.append((3, "w2-1")),
            ),
        ),
        (
            "C2",
            lambda ops, chain: (
                ops.append(_write("w2-1", "w1-2", 2, 40, 41, counter=2)),
                chain.append((3, "w2-1")),
            ),
        ),
    ],
)
def test_checker_catches(clause: str, breaking: Callable[[list[Op], list[Any]], object]) -> None:
    ops, chain = _good()
    breaking(ops, chain)
    found = _violations(ops, chain)
    assert any(v.startswith(clause) for v in found), found


def test_files_read_records_tags_and_bytes_that_do_not_match_the_manifest() -> None:
    good, other = b"tag=w0-1 a", b"tag=w1-2 b"
    entry = FileEntry(sha256=hashlib.sha256(good).hexdigest(), size=len(good), mode=0o644, mtime=0)
    op = _files_read(
        {"a": entry, "b": entry},
        ["a", "b"],
        [good, other],
        proc="r0",
        invoke=0,
        complete=1,
        snap=1,
        scope=T.scope,
        skill=T.skill,
        version=1,
        commit_id="w0-1",
    )
    assert (op.paths, op.tags, op.bad_sha) == (["a", "b"], ["w0-1", "w1-2"], ["b"])


def test_checker_allows_unknown_outcomes_in_fault_runs() -> None:
    ops, chain = _good()
    ops.append(_write("w2-1", "w1-2", 2, 40, 41, outcome="error", error="StoreUnavailable"))
    chain.append((3, "w2-1"))
    assert _violations(ops, chain, allow_errors=True) == []
    assert _violations(ops, chain)


# Commits spanning two scopes, and isolated (worker) snapshots.
U = Target("user:a/u", "p")


def _pair(
    tag: str, parents: tuple[str | None, str | None], v: int, t0: int, t1: int, **kw: Any
) -> list[WriteOp]:
    return [
        _write(tag, parents[0], v, t0, t1, target=T, **kw),
        _write(tag, parents[1], v, t0, t1, target=U, **kw),
    ]


def _pair_history() -> tuple[list[Op], dict[Target, list[tuple[int, str]]]]:
    ops: list[Op] = [
        *_pair("w0-1", (None, None), 0, 0, 10, counter=1),
        *_pair("w1-1", ("w0-1", "w0-1"), 1, 20, 30, counter=2),
        _rev("s0", 31, 2, isolated=True),
        _read("s0", 31, 2, "w1-1", target=T),
        _read("s0", 31, 2, "w1-1", target=U),
        _files("s0", 32, 2, "w1-1"),
    ]
    return ops, {T: [(1, "w0-1"), (2, "w1-1")], U: [(1, "w0-1"), (2, "w1-1")]}


def _pair_violations(ops: list[Op], chains: dict[Target, list[tuple[int, str]]]) -> list[str]:
    return check(History(agent="a", targets=[T, U], ops=ops, versions=chains)).violations


def test_checker_passes_multi_scope_commits() -> None:
    assert _pair_violations(*_pair_history()) == []


def test_checker_catches_a_snapshot_holding_half_a_commit() -> None:
    ops, chains = _pair_history()
    # Taken while w1-1 commits: labelled revision 1, yet it holds w1-1's T and w0-1's U.
    ops += [
        _rev("s1", 25, 1, isolated=True),
        _read("s1", 25, 2, "w1-1", target=T),
        _read("s1", 25, 1, "w0-1", target=U),
    ]
    found = _pair_violations(ops, chains)
    assert any("half of commit w1-1" in v for v in found), found
    assert any("committed later at revision 2" in v for v in found), found
    assert all(v.startswith("C4") for v in found), found


def test_checker_ignores_isolation_of_store_level_reads() -> None:
    ops, chains = _pair_history()
    ops += [
        _rev("r1", 25, 1),
        _read("r1", 25, 2, "w1-1", target=T),
        _read("r1", 25, 1, "w0-1", target=U),
    ]
    assert _pair_violations(ops, chains) == []


def test_checker_multi_scope_conflicts() -> None:
    ops, chains = _pair_history()
    justified = _pair("w2-1", ("w0-1", "w1-1"), 1, 40, 41, outcome="conflict")
    justified[0].current = 2  # T moved on; U did not: one moved skill justifies it
    assert _pair_violations([*ops, *justified], chains) == []
    unjustified = _pair("w3-1", ("w1-1", "w1-1"), 2, 40, 41, outcome="conflict")
    found = _pair_violations([*ops, *unjustified], chains)
    assert any("without a newer current version" in v for v in found), found
    assert any("yet no other write moved them" in v for v in found), found


# Staged runs: the content each version holds, and who gets its candidate.
def _staged_history(candidate: bool, user: str) -> list[str]:
    """w0-1 publishes; w1-2 stages a candidate for bob; a worker of `user` then reads v2,
    holding the candidate or not."""
    ops: list[Op] = [
        _write("w0-1", None, 0, 0, 10, counter=1),
        _write("w1-2", "w0-1", 1, 20, 30, counter=2, action="stage"),
        _rev("s0", 31, 2, isolated=True),
        _read("s0", 32, 2, "w1-2"),
        dataclasses.replace(
            _files("s0", 33, 2, "w1-2", ["w1-2" if candidate else "w0-1"] * len(PATHS)),
            user=user,
            candidate=candidate,
        ),
    ]
    contents = {T: {1: Content("w0-1"), 2: Content("w0-1", "w1-2", Rollout(users=["bob"]))}}
    chain = [(1, "w0-1"), (2, "w1-2")]
    history = History(agent="a", targets=[T], ops=ops, versions={T: chain}, contents=contents)
    return check(history).violations


def test_checker_passes_staged_views() -> None:
    assert _staged_history(candidate=True, user="bob") == []
    assert _staged_history(candidate=False, user="carol") == []


def _pinned_history(version: int, pinned: str) -> list[str]:
    """w0-1 publishes, w1-2 publishes, w2-3 sets `stable` on v1; a worker pinned to it then
    reads at revision 3, holding `version` at the label `pinned` ("": the head)."""
    ops: list[Op] = [
        _write("w0-1", None, 0, 0, 10, counter=1),
        _write("w1-2", "w0-1", 1, 20, 30, counter=2),
        _write("w2-3", "w1-2", 2, 40, 50, counter=3, action="label"),
        _rev("s0", 51, 3, isolated=True),
        dataclasses.replace(
            _files("s0", 53, version, f"w{version - 1}-{version}"),
            user="bob",
            pin="stable",
            pinned=pinned,
        ),
    ]
    contents = {
        T: {1: Content("w0-1"), 2: Content("w1-2"), 3: Content("w1-2", labels=(("stable", 1),))}
    }
    chain = [(1, "w0-1"), (2, "w1-2"), (3, "w2-3")]
    history = History(agent="a", targets=[T], ops=ops, versions={T: chain}, contents=contents)
    return check(history).violations


def test_checker_passes_and_catches_pinned_views() -> None:
    assert _pinned_history(1, "stable") == []
    found = _pinned_history(2, "stable")  # the label names v1
    assert any(v.startswith("R") and "stable names v1 in v3" in v for v in found), found
    found = _pinned_history(2, "")  # the head, though v3 carries the label
    assert any(v.startswith("R") and "holds the head v2" in v for v in found), found


def test_checker_catches_a_candidate_shown_to_the_wrong_worker() -> None:
    found = _staged_history(candidate=True, user="carol")
    assert any(v.startswith("R") and "excludes" in v for v in found), found
    found = _staged_history(candidate=False, user="bob")
    assert any(v.startswith("R") and "gives the candidate" in v for v in found), found


def test_checker_takes_a_refused_promote_only_after_a_live_save() -> None:
    """A promote refused by its guard (FailedPrecondition) is no violation where history
    shows a publish after the newest stage in the version it read; without one it is."""
    staged = [
        _write("w0-1", None, 0, 0, 10, counter=1),
        _write("w0-2", "w0-1", 1, 11, 12, counter=2, action="stage"),
        _write("w1-1", "w0-2", 2, 13, 14, counter=3),  # a live save after staging
    ]
    chain = [(1, "w0-1"), (2, "w0-2"), (3, "w1-1")]
    read = [_rev("r0", 15, 3), _read("r0", 16, 3, "w1-1"), _files("r0", 17, 3, "w1-1")]
    refused = _write("w0-3", "w1-1", 3, 20, 21, outcome="refused", action="promote")
    assert _violations([*staged, *read, refused], chain) == []
    early = _write("w0-3", "w0-2", 2, 12, 13, outcome="refused", action="promote")
    found = _violations([*staged[:2], early], chain[:2])
    assert any(v.startswith("C6") and "no live save since staging" in v for v in found), found
