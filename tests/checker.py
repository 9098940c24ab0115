"""A multi-process history recorder and checker for the consistency contract (docs/design.md §3).

Writer processes do read-modify-write cycles on a few shared skills with `expected_version`;
reader processes take snapshots (the agent's revision, then every scope's manifests, then
every file of every skill). Every process records each store call with its invoke and
complete times on CLOCK_MONOTONIC (`time.monotonic_ns`, one clock for every process on a
Linux host) and writes its record to a JSON-lines file. `check` then reads the whole history
(plus each skill's `store.history` taken afterwards) and reports every violation of

- C1  no torn skill: every file of a read skill version carries the tag (writer + sequence)
      of the one write that made that version, and all of that write's files are there;
- C2  acknowledged writes have distinct revisions whose order agrees with real time and,
      per skill, with versions;
- C3  a read that started after a write was acknowledged sees that write or a newer one
      (manifests and revisions), and a snapshot whose revision covers a write sees it;
- C4  (for `Skills.snapshot()` readers only) a snapshot holds whole commits, also those
      spanning two scopes, and nothing committed after the snapshot's revision;
- C5  per process, revisions and each skill's versions never go back;
- C6  every acknowledged write is in the skill's history exactly once, at the version it was
      told; versions form a gap-free chain in which each write was based on the version just
      before it (no lost update); every failed attempt got `Conflict` carrying a newer current
      version, or is a promote refused because a live save landed after its candidate was
      staged (docs/governance.md, "Promote"; history shows that save), and no write that got
      either is in history; reads only ever see written versions;
- R   (staged runs, `stage_ratio`) a staged rollout's view: some writes stage, widen, promote
      or abort a candidate (docs/governance.md) instead of publishing, and runtime readers of
      several users read each version's files as `skillfs.governance.rollout_rule` gives them:
      never a candidate its rule excludes for that user, always the candidate where it includes
      them. With C3 (a step sees every version acknowledged before it) this is "seen at the next
      step after it is staged for it". C1 then checks files against the content a version
      holds for the reader (the live or the candidate write's tag), not its commit id.
      With `pinned_readers`, writes also set the label `stable` on the head or remove it, and
      those readers are pinned to it (docs/governance.md, "Labels and pins"): each of their
      reads holds exactly the version the label names in the newest version its snapshot's
      revision covers (never another, nor a candidate), and the head where that version
      carries no label — C3 "as the worker's pins select it".

Usage (from a test, a fault scenario or by hand)::

    history = record(url, tmp_path, writers=8, readers=4, duration=4.0)
    report = check(history)
    print(report.summary())
    assert report.ok, report.violations[:20]

Fault scenarios pass `allow_errors=True` to `check`: a write that failed with another error
(a timeout, StoreUnavailable) has an unknown outcome, so it may or may not be in history, and
a revision's epoch may change (after which revisions are compared within an epoch only).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import re
import time
import traceback
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import skillfs
from skillfs.errors import Conflict, FailedPrecondition, NotFound
from skillfs.governance.rollout_rule import gets_candidate
from skillfs.model import FileEntry, Manifest, Put, Rollout, Scope

#: The label pinned runtime readers are held on, and writers move (`pinned_readers`).
PIN = "stable"
#: Paths every write puts; a manifest with a different file set is a partial publish.
PATHS = ("SKILL.md", "references/notes.md", "scripts/run.sh", "assets/data.txt")
_TAG = re.compile(rb"tag=([A-Za-z0-9_-]+)")
#: Never drop history during a run: the checker needs every version.
KEEP_ALL = skillfs.HistoryPolicy(keep_versions=1_000_000_000, keep_days=1e6)


# --------------------------------------------------------------------------- records


@dataclass(kw_only=True)
class Op:
    """One store call by one process; times are CLOCK_MONOTONIC nanoseconds."""

    proc: str
    invoke: int
    complete: int


@dataclass(kw_only=True)
class WriteOp(Op):
    """A publish with `expected_version`; `tag` is also its commit id and is in every file."""

    scope: str
    skill: str
    tag: str
    parent: str | None  # commit id of the version read before writing (None: none existed)
    expected: int
    outcome: Literal["ok", "conflict", "refused", "error"]
    version: int | None = None
    epoch: str | None = None
    counter: int | None = None
    current: int | None = None  # Conflict.current_version
    error: str | None = None
    action: str = "publish"  # or stage, widen, promote, abort (staged runs)


@dataclass(kw_only=True)
class RevisionRead(Op):
    """The revision a snapshot is as of; `isolated` when the snapshot promises C4 (a
    worker's `Skills.snapshot()`), not for the store-level reader's separate reads."""

    snap: int
    epoch: str | None
    counter: int | None
    isolated: bool = False


@dataclass(kw_only=True)
class ManifestsRead(Op):
    """Manifests of the checked skills of one scope: skill -> (version, commit id).

    `snap` is the reader's snapshot number, -1 for a writer's read before its write."""

    snap: int
    scope: str
    skills: dict[str, tuple[int, str]]
    wanted: list[str]  # skills asked for; a wanted skill not in `skills` was absent


@dataclass(kw_only=True)
class FilesRead(Op):
    """Every file of one skill version, read in one batched call."""

    snap: int
    scope: str
    skill: str
    version: int
    commit_id: str
    paths: list[str]
    tags: list[str]  # the tag found in each file, "" when none
    bad_sha: list[str]  # paths whose bytes do not hash to the manifest's sha256
    user: str = ""  # a runtime reader's user ("" for store-level reads)
    candidate: bool = False  # the view held the version's staged candidate
    pin: str = ""  # the label the runtime reader is pinned to ("" for none)
    pinned: str = ""  # the label its view held this skill at ("" for the head or candidate)


OP_TYPES: dict[str, type[Op]] = {
    t.__name__: t for t in (WriteOp, RevisionRead, ManifestsRead, FilesRead)
}


def _dump(op: Op) -> str:
    return json.dumps({"type": type(op).__name__, **dataclasses.asdict(op)})


def _load(line: str) -> Op:
    raw = json.loads(line)
    cls = OP_TYPES[raw.pop("type")]
    if cls is ManifestsRead:
        raw["skills"] = {k: (v[0], v[1]) for k, v in raw["skills"].items()}
    return cls(**raw)


@dataclass(frozen=True)
class Target:
    """A checked skill: `scope` as the CLI writes it (`shared:A`, `user:A/U`)."""

    scope: str
    skill: str


@dataclass(frozen=True)
class Content:
    """What one version holds (staged runs): the tag of its live files ("" when none) and of
    its candidate's, with the candidate's rule."""

    live: str
    candidate: str | None = None
    rollout: Rollout | None = None
    #: The labels the version carries: (label, the version it names).
    labels: tuple[tuple[str, int], ...] = ()


@dataclass
class History:
    """Everything recorded, plus each skill's history (oldest first) read after the run."""

    agent: str
    targets: list[Target]
    ops: list[Op]
    versions: dict[Target, list[tuple[int, str]]]  # (version, commit id), oldest first
    wall_seconds: float = 0.0
    #: Staged runs: each version's content, read from history after the run.
    contents: dict[Target, dict[int, Content]] = field(default_factory=dict)


# --------------------------------------------------------------------------- workers


def tag_of(data: bytes) -> str:
    m = _TAG.search(data)
    return m.group(1).decode() if m else ""


def files_for(skill: str, tag: str) -> dict[str, bytes]:
    """One write's files, each naming the write's tag; a few KiB in all."""
    filler = (f"{tag} " * 200).encode()
    return {
        "SKILL.md": (
            f"---\nname: {skill}\ndescription: Checker skill, tag={tag}. Use in tests.\n---\n\n"
            f"# {skill}\n\nWritten by tag={tag}.\n"
        ).encode(),
        "references/notes.md": f"tag={tag}\n".encode() + filler,
        "scripts/run.sh": f"#!/bin/sh\n# tag={tag}\necho {tag}\n".encode(),
        "assets/data.txt": f"tag={tag}\n".encode() + filler * 2,
    }


@dataclass(frozen=True)
class _Job:
    url: str
    agent: str
    targets: list[Target]
    out: str
    duration: float
    seed: int
    max_ops: int | None = None
    min_acked: int = 0
    max_duration: float = 0.0
    pair_ratio: float = 0.0
    user: str = "alice"
    stage_ratio: float = 0.0
    users: tuple[str, ...] = ()
    #: Runtime readers pinned to `PIN` (the first ones); writers then move it too.
    pinned_readers: int = 0
    #: The recording process's environment when it started the run ($SKILLFS_TOKEN, …): a
    #: worker's own is the forkserver's, taken when that started (`_processes`).
    env: dict[str, str] = field(default_factory=dict)


def hash_seed(role: str, index: int) -> int:
    """A fixed seed per process (str hashes differ between processes)."""
    return index * 3 + "wrs".index(role)


def _now() -> int:
    return time.monotonic_ns()


def _save(path: str, ops: Iterable[Op], crash: str | None = None) -> None:
    with open(path, "w") as f:
        for op in ops:
            f.write(_dump(op) + "\n")
        if crash:
            f.write(json.dumps({"type": "crash", "traceback": crash}) + "\n")


def _worker(role: Literal["w", "r", "s"], index: int, job: _Job, barrier: Any, acked: Any) -> None:
    """One process's loop; `barrier` and `acked` (a shared count of acknowledged writes) are
    multiprocessing objects."""
    proc = f"{role}{index}"
    ops: list[Op] = []
    crash = None
    os.environ.clear()
    os.environ.update(job.env)
    try:
        store = skillfs.open_store(job.url, history_policy=KEEP_ALL, blob_cache_bytes=0)
        store.revision(job.agent)  # connect before the start line
        runtime = None
        if role == "s":
            user = job.users[index % len(job.users)] if job.users else job.user
            pins = PIN if index < job.pinned_readers else None
            runtime = skillfs.Skills(store, job.agent, user, pins=pins)
            runtime.snapshot()  # start its follower before the start line
        barrier.wait()
        started = time.monotonic()
        rng = random.Random(job.seed)
        n = 0

        def more() -> bool:
            if job.max_ops is not None and len(ops) >= job.max_ops:
                return False
            elapsed = time.monotonic() - started
            if elapsed < job.duration:
                return True
            return elapsed < job.max_duration and acked.value < job.min_acked

        while more():
            n += 1
            if runtime is not None:
                _runtime_snapshot(runtime, job, proc, n, rng, ops)
            elif role == "r":
                _snapshot(store, job, proc, n, rng, ops)
            elif _write_once(store, job, proc, n, rng, ops):
                with acked.get_lock():
                    acked.value += 1
        if runtime is not None:
            runtime.close()
        store.close()
    except BaseException:
        crash = traceback.format_exc()
    _save(os.path.join(job.out, f"{proc}.jsonl"), ops, crash)
    if crash:
        raise SystemExit(1)


def _write_once(
    store: skillfs.Store, job: _Job, proc: str, n: int, rng: random.Random, ops: list[Op]
) -> bool:
    """Read the manifests of one skill (or, `pair_ratio` of the time, of two skills in two
    scopes), then commit a new file set for each, expecting the versions read; True when
    the commit was acknowledged."""
    chosen = [rng.choice(job.targets)]
    if rng.random() < job.pair_ratio:
        others = [t for t in job.targets if t.scope != chosen[0].scope]
        if others:
            chosen.append(rng.choice(others))
    tag = f"{proc}-{n}"
    staged = len(chosen) == 1 and rng.random() < job.stage_ratio
    current: list[Manifest | None] = []
    for t in chosen:
        t0 = _now()
        try:
            m: Manifest | None = store.manifest(Scope.parse(t.scope), t.skill)
        except NotFound:
            m = None
        seen = {t.skill: (m.version, m.commit_id)} if m else {}
        ops.append(
            ManifestsRead(
                proc=proc,
                invoke=t0,
                complete=_now(),
                snap=-1,
                scope=t.scope,
                skills=seen,
                wanted=[t.skill],
            )
        )
        current.append(m)
    records = [
        WriteOp(
            proc=proc,
            invoke=0,
            complete=0,
            scope=t.scope,
            skill=t.skill,
            tag=tag,
            parent=m.commit_id if m else None,
            expected=m.version if m else 0,
            outcome="error",
        )
        for t, m in zip(chosen, current, strict=True)
    ]
    puts = [
        Put(Scope.parse(w.scope), w.skill, dict(files_for(w.skill, tag)), w.expected)
        for w in records
    ]
    step = _rollout_step(store, job, rng, puts[0], current[0]) if staged else None
    t0 = _now()
    try:
        if step is not None:
            records[0].action, call = step
            res = call(tag)
        else:
            res = store.commit(puts, options=skillfs.WriteOptions(commit_id=tag))
    except Conflict as exc:
        for w in records:
            w.outcome = "conflict"
            w.current = exc.current_version if exc.skill == w.skill else None
    except FailedPrecondition as exc:  # a promote's guard of a later live save; else an error
        for w in records:
            w.outcome = "refused" if records[0].action == "promote" else "error"
            w.error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # recorded: an unknown outcome, a violation unless allowed
        for w in records:
            w.error = f"{type(exc).__name__}: {exc}"
    else:
        for w in records:
            w.outcome, w.version = "ok", res.versions[w.skill]
            w.epoch, w.counter = res.revision.epoch, res.revision.counter
    t1 = _now()
    for w in records:
        w.invoke, w.complete = t0, t1
    ops.extend(records)
    return records[0].outcome == "ok"


def _rollout_step(
    store: skillfs.Store, job: _Job, rng: random.Random, put: Put, m: Manifest | None
) -> tuple[str, Callable[[str], skillfs.CommitResult]] | None:
    """A staged run's write in place of a publish (None: publish): stage a candidate for one
    reader's user or a share of users; or, when one is staged, widen, promote or abort it.
    Each expects the version read, with the write's tag as its commit id."""
    if m is None:
        return None
    scope, skill, expected = put.scope, put.skill, m.version
    if job.pinned_readers and m.files and rng.random() < 0.3:
        options = skillfs.WriteOptions(expected_version=expected, commit_id="")
        if PIN in m.labels and rng.random() < 0.3:
            return "unlabel", lambda tag: store.labels.remove(
                scope, skill, PIN, options=options.model_copy(update={"commit_id": tag})
            )
        return "label", lambda tag: store.labels.set(  # the head, as the writer read it
            scope, skill, PIN, options=options.model_copy(update={"commit_id": tag})
        )
    users = list(job.users or (job.user,))
    c = m.candidate
    if c is None:
        rule = (
            Rollout(users=[rng.choice(users)])
            if rng.random() < 0.5
            else Rollout(fraction=rng.choice((0.3, 0.6)))
        )
        return "stage", lambda tag: store.rollouts.stage(
            scope,
            skill,
            put.files,
            rule,
            options=skillfs.WriteOptions(expected_version=expected, commit_id=tag),
        )
    wider = Rollout(
        users=sorted({*c.rollout.users, rng.choice(users)}),
        fraction=min(1.0, c.rollout.fraction + 0.3),
    )
    roll = rng.random()
    if roll < 0.4 and wider != c.rollout:
        return "widen", lambda tag: store.rollouts.widen(
            scope,
            skill,
            wider,
            options=skillfs.WriteOptions(expected_version=expected, commit_id=tag),
        )
    if roll < 0.7:
        return "promote", lambda tag: store.rollouts.promote(
            scope, skill, options=skillfs.WriteOptions(expected_version=expected, commit_id=tag)
        )
    return "abort", lambda tag: store.rollouts.abort(
        scope, skill, options=skillfs.WriteOptions(expected_version=expected, commit_id=tag)
    )


def _snapshot(
    store: skillfs.Store, job: _Job, proc: str, n: int, rng: random.Random, ops: list[Op]
) -> None:
    """The agent's revision, then each scope's manifests, then every file of every skill."""
    t0 = _now()
    rev = store.revision(job.agent)
    ops.append(
        RevisionRead(
            proc=proc,
            invoke=t0,
            complete=_now(),
            snap=n,
            epoch=rev.epoch if rev else None,
            counter=rev.counter if rev else None,
        )
    )
    by_scope: dict[str, list[str]] = defaultdict(list)
    for t in job.targets:
        by_scope[t.scope].append(t.skill)
    read: list[tuple[str, Manifest]] = []
    for scope_text, skills in by_scope.items():
        t0 = _now()
        manifests = store.manifests(Scope.parse(scope_text))
        t1 = _now()
        mine = {k: manifests[k] for k in skills if k in manifests}
        ops.append(
            ManifestsRead(
                proc=proc,
                invoke=t0,
                complete=t1,
                snap=n,
                scope=scope_text,
                skills={k: (m.version, m.commit_id) for k, m in mine.items()},
                wanted=skills,
            )
        )
        read += [(scope_text, m) for m in mine.values()]
    for scope_text, m in read:
        t0 = _now()
        blobs = store.read_entries(m.files.values())
        t1 = _now()
        paths = sorted(m.files)
        data = [blobs.get(m.files[p].sha256, b"") for p in paths]
        ops.append(
            _files_read(
                m.files,
                paths,
                data,
                proc=proc,
                invoke=t0,
                complete=t1,
                snap=n,
                scope=scope_text,
                skill=m.skill,
                version=m.version,
                commit_id=m.commit_id,
            )
        )


def _files_read(
    files: Mapping[str, FileEntry], paths: list[str], data: list[bytes], **fields: Any
) -> FilesRead:
    """A `FilesRead` of `data`, the bytes read for `paths`: the tag found in each, and the
    paths whose bytes do not hash to the sha256 that `files` (the manifest's entries) names."""
    return FilesRead(
        paths=paths,
        tags=[tag_of(d) for d in data],
        bad_sha=[
            p
            for p, d in zip(paths, data, strict=True)
            if hashlib.sha256(d).hexdigest() != files[p].sha256
        ],
        **fields,
    )


def _runtime_snapshot(
    skills: skillfs.Skills, job: _Job, proc: str, n: int, rng: random.Random, ops: list[Op]
) -> None:
    """A worker's step: `Skills.snapshot()`, then every file of every checked skill through
    the snapshot. Recorded like `_snapshot`, with the snapshot call's times for the revision
    and manifests it holds, and marked `isolated` (it promises C4)."""
    t0 = _now()
    snap = skills.snapshot()
    t1 = _now()
    rev = snap.revisions.get(f"agents/{job.agent}")
    ops.append(
        RevisionRead(
            proc=proc,
            invoke=t0,
            complete=t1,
            snap=n,
            epoch=rev.epoch if rev else None,
            counter=rev.counter if rev else None,
            isolated=True,
        )
    )
    view = {(str(i.scope), i.id): i for i in snap.skills if i.scope is not None}
    by_scope: dict[str, list[str]] = defaultdict(list)
    for t in job.targets:  # a skill held at a label is checked by R, not as the head
        if not ((held := view.get((t.scope, t.skill))) and held.pinned):
            by_scope[t.scope].append(t.skill)
    for scope_text, names in by_scope.items():
        seen = {k: (i.version or 0, i.digest) for k in names if (i := view.get((scope_text, k)))}
        ops.append(
            ManifestsRead(
                proc=proc,
                invoke=t0,
                complete=t1,
                snap=n,
                scope=scope_text,
                skills=seen,
                wanted=names,
            )
        )
    for t in job.targets:
        info = view.get((t.scope, t.skill))
        if info is None:
            continue
        paths = sorted(info.files)
        t2 = _now()
        data = [snap.read_bytes(info.id, p) for p in paths]
        ops.append(
            _files_read(
                info.files,
                paths,
                data,
                proc=proc,
                invoke=t2,
                complete=_now(),
                snap=n,
                scope=t.scope,
                skill=t.skill,
                version=info.version or 0,
                commit_id=info.digest,
                user=skills.user_id,
                candidate=info.candidate,
                pin=PIN if skills.pins else "",
                pinned=info.pinned or "",
            )
        )


# --------------------------------------------------------------------------- recording


def default_targets(
    agent: str, skills: int = 4, run: str | None = None, user: str = "alice"
) -> list[Target]:
    """`skills` fresh skills: all but the last in the agent-shared scope, the last in a
    per-user scope of the same agent (so one revision covers two scopes). Skill names are
    distinct across scopes (a commit's result and a Conflict name skills without scope)."""
    run = run or uuid.uuid4().hex[:6]
    out = []
    for i in range(skills):
        scope = f"user:{agent}/{user}" if i == skills - 1 and skills > 1 else f"shared:{agent}"
        out.append(Target(scope, f"chk-{run}-{i}"))
    return out


def _processes() -> multiprocessing.context.BaseContext:
    """Where the workers come from: forked from a forkserver that imported this module (and
    skillfs) once for the pytest process, not spawned, which imported them again in every
    worker (12 a run: ~0.5 s of CPU each). A worker is as fresh as a spawned one (the server
    holds no thread, connection or store of the parent's) and pickles its arguments the same."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # read when the server starts: the first call
    return ctx


def record(
    url: str,
    out_dir: Path,
    *,
    agent: str = "checker",
    targets: Sequence[Target] | None = None,
    writers: int = 8,
    readers: int = 4,
    runtime_readers: int = 0,
    pair_ratio: float = 0.0,
    user: str = "alice",
    users: Sequence[str] = (),
    stage_ratio: float = 0.0,
    pinned_readers: int = 0,
    duration: float = 4.0,
    min_acked: int = 0,
    max_duration: float | None = None,
    max_ops: int | None = None,
    during: Callable[[], None] | None = None,
    start_timeout: float = 120.0,
) -> History:
    """Run writer and reader processes against `url`; return their history.

    `readers` read through the store (revision, manifests, files: separate calls);
    `runtime_readers` take `Skills(store, agent, user).snapshot()`s as a worker does (the
    i-th as `users[i % len(users)]` when given). A `pair_ratio` share of the writes commits
    two skills of two scopes at once; a `stage_ratio` share of the others is a staged
    rollout's step (`_rollout_step`), or, with `pinned_readers` (the first runtime readers,
    pinned to `PIN`), sets or removes that label. All run for
    `duration` seconds, then on until `min_acked` writes were acknowledged or `max_duration`
    seconds passed (a slow machine still gets a meaningful run); each stops after `max_ops`
    operations if given. `during` runs in this process while they work (a fault scenario
    kills a server there). Raises RuntimeError if a worker crashed."""
    max_duration = max(duration, max_duration or duration)
    targets = list(targets or default_targets(agent, user=user))
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = _processes()
    barrier = ctx.Barrier(writers + readers + runtime_readers + 1, timeout=start_timeout)
    acked = ctx.Value("q", 0)
    job = _Job(
        url=url,
        agent=agent,
        targets=targets,
        out=str(out_dir),
        duration=duration,
        seed=0,
        max_ops=max_ops,
        min_acked=min_acked,
        max_duration=max_duration,
        pair_ratio=pair_ratio,
        user=user,
        stage_ratio=stage_ratio,
        users=tuple(users),
        pinned_readers=pinned_readers,
        env=dict(os.environ),
    )
    procs = [
        ctx.Process(
            target=_worker,
            args=(role, i, dataclasses.replace(job, seed=hash_seed(role, i)), barrier, acked),
            name=f"checker-{role}{i}",
        )
        for role, count in (("w", writers), ("r", readers), ("s", runtime_readers))
        for i in range(count)
    ]
    for p in procs:
        p.start()
    started = wall = 0.0
    try:
        if _all_ready(procs, barrier, start_timeout):
            barrier.wait()
            started = time.monotonic()
            if during is not None:
                during()
            for p in procs:
                p.join(timeout=max(1.0, started + max_duration + 60 - time.monotonic()))
            wall = time.monotonic() - started
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    ops: list[Op] = []
    crashes: list[str] = []
    for path in sorted(out_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.startswith('{"type": "crash"'):
                crashes.append(f"{path.stem}: {json.loads(line)['traceback']}")
            else:
                ops.append(_load(line))
    crashes.sort(key=lambda c: "BrokenBarrierError" in c)  # the cause first, then the others
    failed = [p.name for p in procs if p.exitcode != 0]
    if crashes or failed:
        raise RuntimeError(f"checker workers failed: {failed}\n" + "\n".join(crashes[:3]))
    with skillfs.open_store(url) as store:
        kept = {t: _history_or_empty(store, Scope.parse(t.scope), t.skill) for t in targets}
        versions = {t: sorted((m.version, m.commit_id) for m in ms) for t, ms in kept.items()}
        contents = (
            {t: {m.version: _content(store, m) for m in ms} for t, ms in kept.items()}
            if stage_ratio
            else {}
        )
    return History(
        agent=agent,
        targets=targets,
        ops=ops,
        versions=versions,
        wall_seconds=wall,
        contents=contents,
    )


def _content(store: skillfs.Store, m: Manifest) -> Content:
    """A version's live and candidate tags, read from their SKILL.md files."""

    def tag(files: Mapping[str, FileEntry]) -> str:
        entry = files.get("SKILL.md")
        return tag_of(store.read_entry(entry)) if entry is not None else ""

    c = m.candidate
    labels = tuple(sorted((name, held.version) for name, held in m.labels.items()))
    if c is None:
        return Content(tag(m.files), labels=labels)
    return Content(tag(m.files), tag(c.files), c.rollout, labels)


def _all_ready(procs: list[Any], barrier: Any, timeout: float) -> bool:
    """Wait until every worker waits at the start line; False (barrier aborted) as soon as
    one of them died on the way, so its crash report is read instead of waiting it out."""
    deadline = time.monotonic() + timeout
    while barrier.n_waiting < len(procs):
        if any(p.exitcode is not None for p in procs) or time.monotonic() > deadline:
            barrier.abort()
            for p in procs:
                p.join(timeout=10)
            return False
        time.sleep(0.02)
    return True


def _history_or_empty(store: skillfs.Store, scope: Scope, skill: str) -> list[Manifest]:
    try:
        return store.history(scope, skill)
    except NotFound:
        return []


# --------------------------------------------------------------------------- checking


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def operations(self) -> int:
        """Store calls checked (writes, revision reads, manifest reads, file reads)."""
        c = self.counts
        return c["writes"] + c["revision reads"] + c["manifest reads"] + c["file reads"]

    def fail(self, clause: str, message: str) -> None:
        self.counts[f"violations {clause}"] += 1
        self.violations.append(f"{clause}: {message}")

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return f"{self.operations} operations checked ({parts}); {len(self.violations)} violations"


class _Bound:
    """'Writes acknowledged before time t (or at revision <= r): the highest version'."""

    def __init__(self, points: Iterable[tuple[int, int]]) -> None:
        pts = sorted(points)
        self.keys = [k for k, _ in pts]
        self.best: list[int] = []
        top = 0
        for _, v in pts:
            top = max(top, v)
            self.best.append(top)

    def before(self, key: int) -> int:
        """Highest value among points with key < `key` (0 if none)."""
        i = bisect.bisect_left(self.keys, key)
        return self.best[i - 1] if i else 0

    def at_most(self, key: int) -> int:
        """Highest value among points with key <= `key` (0 if none)."""
        i = bisect.bisect_right(self.keys, key)
        return self.best[i - 1] if i else 0


def check(history: History, *, allow_errors: bool = False) -> Report:
    """Every violation of C1, C2, C3, C5 and C6 in a recorded history."""
    r = Report()
    writes = [op for op in history.ops if isinstance(op, WriteOp)]
    revs = [op for op in history.ops if isinstance(op, RevisionRead)]
    mreads = [op for op in history.ops if isinstance(op, ManifestsRead)]
    freads = [op for op in history.ops if isinstance(op, FilesRead)]
    by_key = {(w.tag, w.scope, w.skill): w for w in writes}
    acked = [w for w in writes if w.outcome == "ok"]
    r.counts.update(
        {
            "writes": len(writes),
            "multi-scope commits": sum(n > 1 for n in Counter(w.tag for w in writes).values()),
            "writes acknowledged": len(acked),
            "writes conflicted": sum(w.outcome == "conflict" for w in writes),
            "revision reads": len(revs),
            "manifest reads": len(mreads),
            "file reads": len(freads),
            "files checked": sum(len(f.paths) for f in freads),
            "snapshots": len({(op.proc, op.snap) for op in revs}),
        }
    )
    if not acked:
        r.fail("setup", "no write was acknowledged: nothing was tested")
    if not freads:
        r.fail("setup", "no reader read a file: nothing was tested")
    _check_c1(by_key, freads, mreads, r, lambda f: _expected_tag(history, f))
    _check_c2(acked, r)
    _check_c3(history, acked, revs, mreads, r)
    _check_c4(history, writes, revs, mreads, r)
    _check_c5(revs, mreads, r, allow_errors)
    _check_c6(history, writes, by_key, r, allow_errors)
    if history.contents:
        r.counts["staged writes"] = sum(w.action != "publish" for w in acked)
        _check_rollout(history, freads, r)
        if any(f.pin for f in freads):
            _check_pins(history, acked, revs, freads, r)
    return r


def _expected_tag(history: History, f: FilesRead) -> str:
    """The tag the files of a read must carry: the write that made the version (its commit
    id); in a staged run, the write whose content the view holds, live or candidate."""
    content = history.contents.get(Target(f.scope, f.skill), {}).get(f.version)
    if content is None:
        return f.commit_id
    return (content.candidate or "") if f.candidate else content.live


def _check_rollout(history: History, freads: list[FilesRead], r: Report) -> None:
    """Every runtime read holds the candidate exactly where its version's rule gives it to
    the reader's user (`skillfs.governance.rollout_rule.gets_candidate`)."""
    for f in freads:
        content = history.contents.get(Target(f.scope, f.skill), {}).get(f.version)
        if not f.user or content is None or f.pinned:  # a labelled version: `_check_pins`
            continue
        r.counts["R rollout checks"] += 1
        rule = content.rollout
        due = rule is not None and gets_candidate(rule, Scope.parse(f.scope), f.skill, f.user, None)
        r.counts["R candidate views"] += f.candidate
        where = f"{f.proc} snapshot {f.snap} ({f.user}) read {f.scope}/{f.skill} v{f.version}"
        if f.candidate and not due:
            r.fail("R", f"{where}: holds the candidate, which its rule {rule} excludes")
        elif due and not f.candidate:
            r.fail("R", f"{where}: holds the live files, yet its rule {rule} gives the candidate")


def _check_pins(
    history: History,
    acked: list[WriteOp],
    revs: list[RevisionRead],
    freads: list[FilesRead],
    r: Report,
) -> None:
    """Every read of a pinned runtime reader holds the version its label names in the newest
    version its snapshot's revision covers (the head, by the acknowledged writes), and the
    head where that version carries no label (docs/governance.md, "Labels and pins")."""
    at_rev = {(op.proc, op.snap): op for op in revs if op.isolated}
    points: dict[tuple[Target, str], list[tuple[int, int]]] = defaultdict(list)
    for w in acked:
        if w.epoch is not None and w.counter is not None and w.version is not None:
            points[(Target(w.scope, w.skill), w.epoch)].append((w.counter, w.version))
    heads = {key: _Bound(some) for key, some in points.items()}
    for f in freads:
        rev = at_rev.get((f.proc, f.snap))
        target = Target(f.scope, f.skill)
        if not f.pin or rev is None or rev.epoch is None or rev.counter is None:
            continue
        best = heads.get((target, rev.epoch))
        head = best.at_most(rev.counter) if best is not None else 0
        content = history.contents.get(target, {}).get(head)
        if content is None:
            continue
        r.counts["R pin checks"] += 1
        named = dict(content.labels).get(f.pin)
        where = f"{f.proc} snapshot {f.snap} (pinned to {f.pin}) read {f.scope}/{f.skill}"
        if named is None:
            if f.pinned:
                r.fail("R", f"{where} at {f.pinned} v{f.version}: v{head} carries no {f.pin}")
            continue
        r.counts["R pinned views"] += 1
        if f.pinned != f.pin or f.version != named or f.candidate:
            held = f"{f.pinned or 'the head'} v{f.version}" + (" (candidate)" * f.candidate)
            r.fail("R", f"{where}: holds {held}, yet {f.pin} names v{named} in v{head}")


def _check_c1(
    by_key: dict[tuple[str, str, str], WriteOp],
    freads: list[FilesRead],
    mreads: list[ManifestsRead],
    r: Report,
    expected_tag: Callable[[FilesRead], str],
) -> None:
    """No torn skill; every read version is one a write made (with that version)."""
    for f in freads:
        where = f"{f.proc} snapshot {f.snap} read {f.scope}/{f.skill} v{f.version}"
        if sorted(f.paths) != sorted(PATHS):
            r.fail("C1", f"{where}: files {f.paths}, the write put {list(PATHS)}")
        if f.bad_sha:
            r.fail("C1", f"{where}: bytes of {f.bad_sha} do not match the manifest's sha256")
        if set(f.tags) != {expected_tag(f)}:
            mixed = dict(zip(f.paths, f.tags, strict=True))
            r.fail("C1", f"{where} (commit {f.commit_id}): torn, files carry tags {mixed}")
    for m in mreads:
        for skill, (version, commit_id) in m.skills.items():
            r.counts["manifests checked"] += 1
            w = by_key.get((commit_id, m.scope, skill))
            where = f"{m.proc} read {m.scope}/{skill} v{version} (commit {commit_id})"
            if w is None:
                r.fail("C1", f"{where}: no write of this skill made it")
            elif w.outcome == "conflict":
                r.fail("C6", f"{where}: made by a write that was told Conflict")
            elif w.outcome == "ok" and w.version != version:
                r.fail("C1", f"{where}: that write was acknowledged as v{w.version}")


def _check_c2(acked: list[WriteOp], r: Report) -> None:
    """Distinct revisions per commit, ordered as real time and (per skill) as versions."""
    by_epoch: dict[str | None, list[WriteOp]] = defaultdict(list)
    for w in acked:
        by_epoch[w.epoch].append(w)
    for ws in by_epoch.values():
        commits = list({w.tag: w for w in ws}.values())  # a commit's skills share a revision
        counters = Counter(w.counter for w in commits)
        for c, n in counters.items():
            if n > 1:
                r.fail("C2", f"{n} acknowledged commits returned the same revision counter {c}")
        # A commit acknowledged before another started must have the lower revision.
        first_done: tuple[int, WriteOp] | None = None  # among the higher revisions
        for w in sorted(commits, key=lambda w: w.counter or 0, reverse=True):
            r.counts["revision order checks"] += 1
            if first_done is not None and first_done[0] < w.invoke:
                other = first_done[1]
                r.fail(
                    "C2",
                    f"{other.tag} (revision {other.counter}) was acknowledged before {w.tag} "
                    f"started, yet {w.tag} got the lower revision {w.counter}",
                )
            if first_done is None or w.complete < first_done[0]:
                first_done = (w.complete, w)
        last: dict[tuple[str, str], WriteOp] = {}
        for w in sorted(ws, key=lambda w: w.counter or 0):
            prev = last.get((w.scope, w.skill))
            if prev is not None and (prev.version or 0) >= (w.version or 0):
                r.fail(
                    "C2",
                    f"{w.scope}/{w.skill}: revision {prev.counter} gave v{prev.version} "
                    f"but the later revision {w.counter} gave v{w.version}",
                )
            last[(w.scope, w.skill)] = w


def _check_c3(
    history: History,
    acked: list[WriteOp],
    revs: list[RevisionRead],
    mreads: list[ManifestsRead],
    r: Report,
) -> None:
    """Reads see every write acknowledged before they started; a snapshot whose revision
    covers a write sees the write in the manifests it reads afterwards."""
    by_time: dict[tuple[str, str], _Bound] = {}
    by_rev: dict[tuple[str | None, str, str], _Bound] = {}
    epochs = {w.epoch for w in acked}
    for t in history.targets:
        mine = [w for w in acked if (w.scope, w.skill) == (t.scope, t.skill)]
        by_time[(t.scope, t.skill)] = _Bound((w.complete, w.version or 0) for w in mine)
        for e in epochs:
            by_rev[(e, t.scope, t.skill)] = _Bound(
                (w.counter or 0, w.version or 0) for w in mine if w.epoch == e
            )
    rev_bound = {
        e: _Bound((w.complete, w.counter or 0) for w in acked if w.epoch == e) for e in epochs
    }
    for rv in revs:
        if rv.epoch not in rev_bound:
            continue  # no write acknowledged in this epoch: nothing to compare with
        r.counts["C3 revision checks"] += 1
        need = rev_bound[rv.epoch].before(rv.invoke)
        if (rv.counter or 0) < need:
            r.fail(
                "C3",
                f"{rv.proc} snapshot {rv.snap} read revision {rv.counter} after revision "
                f"{need} was acknowledged",
            )
    snap_rev = {(op.proc, op.snap): op for op in revs}
    for m in mreads:
        snap = snap_rev.get((m.proc, m.snap))
        for skill in m.wanted:
            got = m.skills.get(skill, (0, ""))[0]
            need = by_time[(m.scope, skill)].before(m.invoke)
            r.counts["C3 manifest checks"] += 1
            if got < need:
                r.fail(
                    "C3",
                    f"{m.proc} read {m.scope}/{skill} v{got} after v{need} was acknowledged",
                )
            if snap is None or snap.counter is None or snap.epoch not in epochs:
                continue
            covered = by_rev[(snap.epoch, m.scope, skill)].at_most(snap.counter)
            r.counts["C3 snapshot coverage checks"] += 1
            if got < covered:
                r.fail(
                    "C3",
                    f"{m.proc} snapshot {m.snap} at revision {snap.counter} read "
                    f"{m.scope}/{skill} v{got}, but v{covered} was committed at or "
                    "before that revision",
                )


def _check_c5(
    revs: list[RevisionRead], mreads: list[ManifestsRead], r: Report, allow_errors: bool
) -> None:
    """Per process: revisions never go back (within an epoch), nor any skill's version."""
    last_rev: dict[str, RevisionRead] = {}
    for rv in sorted(revs, key=lambda op: (op.proc, op.invoke)):
        prev = last_rev.get(rv.proc)
        r.counts["C5 revision checks"] += 1
        if prev is not None and prev.counter is not None:
            if rv.epoch != prev.epoch:
                if not allow_errors:
                    r.fail("C5", f"{rv.proc}: the epoch changed from {prev.epoch} to {rv.epoch}")
            elif (rv.counter or 0) < prev.counter:
                r.fail(
                    "C5",
                    f"{rv.proc}: revision went back from {prev.counter} (snapshot {prev.snap}) "
                    f"to {rv.counter} (snapshot {rv.snap})",
                )
        last_rev[rv.proc] = rv
    last_version: dict[tuple[str, str, str], int] = {}
    for m in sorted(mreads, key=lambda op: (op.proc, op.invoke)):
        for skill in m.wanted:
            got = m.skills.get(skill, (0, ""))[0]
            key = (m.proc, m.scope, skill)
            r.counts["C5 version checks"] += 1
            if got < last_version.get(key, 0):
                r.fail(
                    "C5",
                    f"{m.proc}: {m.scope}/{skill} went back from v{last_version[key]} to v{got}",
                )
            last_version[key] = max(got, last_version.get(key, 0))


def _live_save_after_stage(
    history: History, by_key: dict[tuple[str, str, str], WriteOp], w: WriteOp
) -> bool:
    """Whether, in the version the refused promote read, a publish came after the newest
    stage: the live edit its guard names."""
    chain = dict(history.versions[Target(w.scope, w.skill)])
    staged_at = max(
        (v for v in range(1, w.expected + 1) if _action(by_key, chain.get(v), w) == "stage"),
        default=0,
    )
    return staged_at > 0 and any(
        _action(by_key, chain.get(v), w) == "publish" for v in range(staged_at + 1, w.expected + 1)
    )


def _action(by_key: dict[tuple[str, str, str], WriteOp], tag: str | None, w: WriteOp) -> str:
    made = by_key.get((tag, w.scope, w.skill)) if tag is not None else None
    return made.action if made is not None else ""


def _check_c6(
    history: History,
    writes: list[WriteOp],
    by_key: dict[tuple[str, str, str], WriteOp],
    r: Report,
    allow_errors: bool,
) -> None:
    """Acknowledged writes in history exactly once, a gap-free chain without lost updates,
    failures are justified Conflicts (for a multi-scope commit: by one of its skills)."""
    at = {t: dict(history.versions[t]) for t in history.targets}  # version -> commit id
    conflicts: dict[str, list[WriteOp]] = defaultdict(list)
    for w in writes:
        if w.outcome == "error" and not allow_errors:
            r.fail("C6", f"{w.tag} on {w.scope}/{w.skill} failed without Conflict: {w.error}")
        if w.outcome == "conflict":
            conflicts[w.tag].append(w)
        if w.outcome == "refused":
            r.counts["C6 refusal checks"] += 1
            if not _live_save_after_stage(history, by_key, w):
                r.fail("C6", f"{w.tag}: promote refused, yet no live save since staging: {w.error}")
    for tag, ws in conflicts.items():
        r.counts["C6 conflict checks"] += 1
        what = ", ".join(f"{w.scope}/{w.skill} at v{w.expected}" for w in ws)
        if not any(w.current is not None and w.current > w.expected for w in ws):
            r.fail("C6", f"{tag} expected {what} and got Conflict without a newer current version")
        if not any(at[Target(w.scope, w.skill)].get(w.expected + 1) not in (None, tag) for w in ws):
            r.fail("C6", f"{tag} got Conflict expecting {what}, yet no other write moved them")
    for t in history.targets:
        chain = history.versions[t]
        r.counts["history entries"] += len(chain)
        where = f"{t.scope}/{t.skill}"
        versions = [v for v, _ in chain]
        if versions != list(range(1, len(chain) + 1)):
            r.fail("C6", f"{where}: history versions are not the chain 1..{len(chain)}: {versions}")
        tags = Counter(c for _, c in chain)
        for tag, n in tags.items():
            if n > 1:
                r.fail("C6", f"{where}: commit {tag} is in history {n} times")
        for version, tag in chain:
            r.counts["C6 chain checks"] += 1
            made = by_key.get((tag, t.scope, t.skill))
            if made is None:
                r.fail("C6", f"{where} v{version}: commit {tag} is no recorded write of it")
                continue
            w = made
            if w.outcome in ("conflict", "refused"):
                r.fail("C6", f"{where} v{version}: {tag} was told {w.outcome} but is in history")
            elif w.outcome == "ok" and w.version != version:
                r.fail(
                    "C6", f"{where}: {tag} was acknowledged as v{w.version}, history has v{version}"
                )
            if w.expected != version - 1 or w.parent != at[t].get(version - 1):
                r.fail(
                    "C6",
                    f"{where} v{version}: lost update: {tag} edited v{w.expected} "
                    f"(commit {w.parent}) but v{version - 1} is {at[t].get(version - 1)}",
                )
        for w in writes:
            mine = (w.scope, w.skill) == (t.scope, t.skill)
            if mine and w.outcome == "ok" and tags.get(w.tag, 0) != 1:
                r.fail("C6", f"{where}: acknowledged {w.tag} (v{w.version}) is not in history")


def _check_c4(
    history: History,
    writes: list[WriteOp],
    revs: list[RevisionRead],
    mreads: list[ManifestsRead],
    r: Report,
) -> None:
    """Snapshots that promise isolation (a worker's `Skills.snapshot()`) hold whole commits
    and nothing committed after their revision."""
    landed: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)  # tag -> skill -> version
    for t in history.targets:
        for version, tag in history.versions[t]:
            landed[tag][(t.scope, t.skill)] = version
    counter_of = {w.tag: w.counter for w in writes if w.outcome == "ok"}
    isolated = {(rv.proc, rv.snap): rv for rv in revs if rv.isolated}
    seen: dict[tuple[str, int], dict[tuple[str, str], tuple[int, str]]] = defaultdict(dict)
    for m in mreads:
        if (m.proc, m.snap) in isolated:
            for skill in m.wanted:
                seen[(m.proc, m.snap)][(m.scope, skill)] = m.skills.get(skill, (0, ""))
    for key, skills in seen.items():
        rv = isolated[key]
        where = f"{key[0]} snapshot {key[1]} at revision {rv.counter}"
        for (scope, skill), (version, tag) in skills.items():
            if not version:
                continue
            r.counts["C4 snapshot checks"] += 1
            made_at = counter_of.get(tag)
            if made_at is not None and (rv.counter is None or made_at > rv.counter):
                r.fail(
                    "C4",
                    f"{where} holds {scope}/{skill} v{version}, committed later at revision "
                    f"{made_at} (by {tag})",
                )
            for other, need in landed.get(tag, {}).items():
                got = skills.get(other, (0, ""))[0]
                if other != (scope, skill) and other in skills and got < need:
                    r.fail(
                        "C4",
                        f"{where} holds half of commit {tag}: {scope}/{skill} v{version} but "
                        f"{other[0]}/{other[1]} v{got}, not its v{need}",
                    )
