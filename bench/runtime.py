"""Runtime benchmarks: what a reasoning step costs a worker, and how fast an edit reaches
every worker, on Redis, etcd and PostgreSQL.

    python -m bench.runtime                      # redis, etcd, postgres; prints a table
    python -m bench.runtime --engines redis --n 5000
    python -m bench.runtime --write-docs         # also replaces this section of docs/benchmarks.md

Per engine, against one server started here (support/servers.py), with an agent-shared scope
of 50 skills (SKILL.md, two references and a script each):

- step, nothing changed: `skills.snapshot()` + `snap.prompt()`, timed interleaved with one
  raw client read of the same server (Redis GET of a 2 KiB key; a linearizable etcd get; a
  PostgreSQL SELECT of a 2 KiB row on one connection of its own).
  Target: p50 <= 1.3x the raw read (p99 reported);
- `snap.load()` of a file already in the cache. Target: p50 <= 10 µs;
- propagation: one process publishes an edit to a shared skill; 16 follower processes (one
  `Skills` each, for 16 users) report when their watch holds it (manifest applied and the
  changed files in the blob cache). Time from the start of the publish call; p50/p99 over
  every (edit, follower) pair and of the slowest follower per edit. Target: p99 <= 100 ms;
- the peers' way: the same 50 skills stored one key per file, and at every step the worker
  lists the keys, reads every file and parses every SKILL.md to build the same prompt block.
  Reported as a ratio to our step.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import skillfs
from bench import common
from bench.common import Timing, interleaved, row, timed
from skillfs import File, Revision, Scope, Skills
from skillfs.runtime.prompt import xml_escape
from skillfs.spec.skill_md import parse_skill_md

AGENT = "bench-rt"
SHARED = Scope.shared(AGENT)
SKILLS = 50
ENGINES = ("redis", "etcd", "postgres")
STEP_TARGET = 1.3
LOAD_TARGET_US = 10.0
PROPAGATION_TARGET_MS = 100.0


# --------------------------------------------------------------------------- measuring


def fmt(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} µs" if us < 100 else f"{us:.0f} µs"


# --------------------------------------------------------------------------- content


def skill_files(name: str, n: int = 1) -> dict[str, File | bytes]:
    """A skill of realistic size: ~1.5 KiB SKILL.md, two references, one script."""
    description = (
        f"Handles {name} tasks end to end. It gathers inputs, checks them against the team's "
        "rules, produces the result in the house format and explains each decision. "
        f"Use when the user asks for {name} work or mentions it by name."
    )
    body = "\n".join(f"{i}. Step {i} of the {name} procedure, revision {n}." for i in range(40))
    return {
        "SKILL.md": f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n".encode(),
        "references/guide.md": (f"# {name} guide\n" + "Rules and examples.\n" * 150).encode(),
        "references/template.md": (f"# {name} template\n" + "Field: value\n" * 100).encode(),
        "scripts/run.sh": File(f"#!/bin/sh\necho {name} {n}\n".encode() * 20),
    }


def publish_scope(store: skillfs.Store) -> dict[str, dict[str, bytes]]:
    """The 50-skill agent-shared scope; returns the files, for the peers' layout."""
    out: dict[str, dict[str, bytes]] = {}
    for i in range(SKILLS):
        name = f"skill-{i:02d}"
        files = skill_files(name)
        store.publish(SHARED, name, files)
        out[name] = {p: f.data if isinstance(f, File) else f for p, f in files.items()}
    return out


def peer_prompt(skill_mds: dict[str, bytes]) -> str:
    """What a peer does with the files it read: parse every SKILL.md, build the block."""
    lines = ["<available_skills>"]
    for skill in sorted(skill_mds):
        fm = parse_skill_md(skill_mds[skill]).frontmatter or {}
        lines += [
            "  <skill>",
            f"    <name>{xml_escape(str(fm.get('name')))}</name>",
            f"    <description>{xml_escape(str(fm.get('description')))}</description>",
            f"    <skill-id>{xml_escape(skill)}</skill-id>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)


# --------------------------------------------------------------------------- engines


@dataclass
class Target:
    name: str
    url: str
    server: str
    raw_what: str
    raw_read: Callable[[], object]
    peer_what: str
    peer_setup: Callable[[dict[str, dict[str, bytes]]], None]
    peer_step: Callable[[], str]


def _redis(tmp: Path, stack: ExitStack) -> Target:
    server, client = common.redis_server(tmp / "redis", stack)
    client.set("bench:raw", b"x" * 2048)
    prefix = "peer/skills/"

    def setup(files: dict[str, dict[str, bytes]]) -> None:
        client.mset({f"{prefix}{s}/{p}": d for s, fs in files.items() for p, d in fs.items()})

    def step() -> str:
        keys = sorted(client.scan_iter(match=f"{prefix}*", count=1000))
        values = client.mget(keys)
        skill_mds = {
            k.decode()[len(prefix) :].split("/", 1)[0]: v
            for k, v in zip(keys, values, strict=True)
            if k.endswith(b"/SKILL.md") and isinstance(v, bytes)
        }
        return peer_prompt(skill_mds)

    return Target(
        "redis",
        f"{server.url}?prefix=rt{uuid.uuid4().hex[:8]}/",
        f"Redis {client.info('server')['redis_version']}",
        "GET of a 2 KiB key",
        lambda: client.get("bench:raw"),
        "SCAN the file keys + one MGET of all + parse",
        setup,
        step,
    )


def _etcd(tmp: Path, stack: ExitStack) -> Target:
    server, client = common.etcd_server(tmp / "etcd", stack)
    client.put("bench/raw", b"x" * 2048)
    prefix = "peer/skills/"

    def setup(files: dict[str, dict[str, bytes]]) -> None:
        for s, fs in files.items():
            for p, d in fs.items():
                client.put(f"{prefix}{s}/{p}", d)

    def step() -> str:
        skill_mds = {
            meta.key.decode()[len(prefix) :].split("/", 1)[0]: value
            for value, meta in client.get_prefix(prefix)
            if meta.key.endswith(b"/SKILL.md")
        }
        return peer_prompt(skill_mds)

    return Target(
        "etcd",
        f"{server.url}?prefix=rt{uuid.uuid4().hex[:8]}/",
        f"etcd {client.status().version}",
        "linearizable get of a 2 KiB key",
        lambda: client.get("bench/raw"),  # serializable=False: linearizable
        "one range read of every file (list + read) + parse",
        setup,
        step,
    )


def _postgres(tmp: Path, stack: ExitStack) -> Target:
    server, conn = common.postgres_server(stack)
    conn.execute("CREATE TABLE bench_raw (k text PRIMARY KEY, v bytea)")
    conn.execute("INSERT INTO bench_raw VALUES ('raw', %s)", (b"x" * 2048,))
    conn.execute('CREATE TABLE peer_files (path text COLLATE "C" PRIMARY KEY, data bytea)')

    def setup(files: dict[str, dict[str, bytes]]) -> None:
        rows = [(f"{s}/{p}", d) for s, fs in files.items() for p, d in fs.items()]
        conn.cursor().executemany("INSERT INTO peer_files VALUES (%s, %s)", rows)

    def step() -> str:
        rows = conn.execute("SELECT path, data FROM peer_files", binary=True).fetchall()
        skill_mds = {
            path.split("/", 1)[0]: data for path, data in rows if path.endswith("/SKILL.md")
        }
        return peer_prompt(skill_mds)

    version = conn.execute("SHOW server_version").fetchone()
    return Target(
        "postgres",
        f"{server.url}?prefix=rt{uuid.uuid4().hex[:8]}/",
        f"PostgreSQL {version[0] if version else '?'}",
        "SELECT of a 2 KiB row",
        lambda: conn.execute("SELECT v FROM bench_raw WHERE k = %s", ("raw",)).fetchone(),
        "one SELECT of every file (a SQL skill registry's table) + parse",
        setup,
        step,
    )


SETUP: dict[str, Callable[[Path, ExitStack], Target]] = {
    "redis": _redis,
    "etcd": _etcd,
    "postgres": _postgres,
}


# --------------------------------------------------------------------------- propagation


def follower_main(url: str, user: str, reports: Queue[Any], started: Event, stop: Event) -> None:
    """One worker process: a `Skills` whose watch keeps the agent's scopes warm; reports
    (revision counter, monotonic time) each time its watch holds a newer revision."""
    skills = Skills(url, AGENT, user)
    skills.snapshot()
    follower = skills.followers[0]
    ready = follower.ready or follower.revision
    assert ready is not None
    started.set()
    while not stop.is_set():
        if follower.wait_for(Revision(epoch=ready.epoch, counter=ready.counter + 1), 0.2):
            now = time.monotonic()
            got = follower.ready
            assert got is not None
            ready = got
            reports.put((user, ready.counter, now))
    skills.close()


@dataclass
class Propagation:
    each: Timing  # every (edit, follower) pair, ms
    slowest: Timing  # the last of the followers per edit, ms
    publish: Timing  # the publish call itself, ms


def propagation(store: skillfs.Store, url: str, followers: int, rounds: int) -> Propagation:
    ctx = mp.get_context("spawn")
    reports: Queue[Any] = ctx.Queue()
    stop = ctx.Event()
    procs = []
    started = []
    for i in range(followers):
        ev = ctx.Event()
        p = ctx.Process(target=follower_main, args=(url, f"user-{i}", reports, ev, stop))
        p.start()
        procs.append(p)
        started.append(ev)
    try:
        for ev in started:
            if not ev.wait(60):
                raise RuntimeError("a follower process did not start")
        time.sleep(1.0)  # let the prefetch of the initial scopes settle
        while not reports.empty():
            reports.get()
        each, slowest, publish = Timing(), Timing(), Timing()
        for r in range(rounds):
            name = f"skill-{r % SKILLS:02d}"
            t0 = time.monotonic()
            commit = store.publish(SHARED, name, skill_files(name, r + 2))
            publish.samples.append((time.monotonic() - t0) * 1000)
            arrived: dict[str, float] = {}
            deadline = time.monotonic() + 10
            while len(arrived) < followers:
                user, counter, when = reports.get(timeout=max(0.01, deadline - time.monotonic()))
                if counter >= commit.revision.counter and user not in arrived:
                    arrived[user] = (when - t0) * 1000
            each.samples += arrived.values()
            slowest.samples.append(max(arrived.values()))
            time.sleep(0.02)
        return Propagation(each, slowest, publish)
    finally:
        stop.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()


# --------------------------------------------------------------------------- one engine


@dataclass
class Result:
    target: Target
    raw: Timing
    step: Timing
    revisions_ratio: float  # the store round trip alone / the raw read, p50
    load: Timing
    load_md: Timing
    peer: Timing
    prop: Propagation

    @property
    def ratio(self) -> float:
        return self.step.p50 / self.raw.p50

    @property
    def ratio_p99(self) -> float:
        return self.step.p99 / self.raw.p99

    @property
    def peer_ratio(self) -> float:
        return self.peer.p50 / self.step.p50


def bench_engine(target: Target, n: int, followers: int, rounds: int) -> Result:
    store = skillfs.open_store(target.url)
    files = publish_scope(store)
    target.peer_setup(files)
    skills = Skills(store, AGENT, "alice")
    snap = skills.snapshot()
    assert len(snap.skills) == SKILLS
    time.sleep(1.5)  # the watch prefetches the scope's files in the background

    def step() -> None:
        skills.snapshot().prompt()

    step_t, raw_t = interleaved(step, target.raw_read, n)
    domains = [f.domain for f in skills.followers]
    rev_t, rev_raw_t = interleaved(lambda: store.domain_revisions(domains), target.raw_read, n)
    assert peer_prompt_equal(target.peer_step(), snap.prompt())
    cached = skills.snapshot()
    load_t = timed(lambda: cached.load("skill-07", "references/guide.md"), n * 5, warmup=200)
    load_md_t = timed(lambda: cached.load("skill-07", "SKILL.md"), n * 5, warmup=200)
    peer_t = timed(target.peer_step, max(50, n // 20), warmup=5)
    prop = propagation(store, target.url, followers, rounds)
    skills.close()
    store.close()
    return Result(target, raw_t, step_t, rev_t.p50 / rev_raw_t.p50, load_t, load_md_t, peer_t, prop)


def peer_prompt_equal(peer: str, ours: str) -> bool:
    """The baseline builds the very block we serve, so the comparison is like for like."""
    return peer == ours


# --------------------------------------------------------------------------- report


def table(results: Sequence[Result], followers: int) -> str:
    def ok(good: bool) -> str:
        return "ok" if good else "MISSED"

    lines = [
        row("measure (p50 / p99)", (r.target.name for r in results)),
        "|---|" + "---|" * len(results),
        row("server", (r.target.server for r in results)),
        row("raw read: what", (r.target.raw_what for r in results)),
        row("raw read", (f"{fmt(r.raw.p50)} / {fmt(r.raw.p99)}" for r in results)),
        row(
            "step: `snapshot()` + `prompt()`, nothing changed, 50 skills",
            (f"{fmt(r.step.p50)} / {fmt(r.step.p99)}" for r in results),
        ),
        row(
            f"**ratio** step / raw, p50 (target <= {STEP_TARGET}) ; p99",
            (
                f"**{r.ratio:.2f}x** {ok(r.ratio <= STEP_TARGET)} ; {r.ratio_p99:.2f}x"
                for r in results
            ),
        ),
        row(
            "of which the store round trip: `store.revisions` alone / raw, p50",
            (f"{r.revisions_ratio:.2f}x" for r in results),
        ),
        row(
            f"`load()` of a cached 2.9 KiB file (target p50 <= {LOAD_TARGET_US:.0f} µs)",
            (
                f"**{fmt(r.load.p50)}** {ok(r.load.p50 <= LOAD_TARGET_US)} / {fmt(r.load.p99)}"
                for r in results
            ),
        ),
        row(
            "`load()` of a cached SKILL.md (with its header)",
            (f"{fmt(r.load_md.p50)} / {fmt(r.load_md.p99)}" for r in results),
        ),
        row(
            f"propagation to {followers} follower processes, each (target p99 <= "
            f"{PROPAGATION_TARGET_MS:.0f} ms)",
            (
                f"{r.prop.each.p50:.1f} ms / **{r.prop.each.p99:.1f} ms** "
                f"{ok(r.prop.each.p99 <= PROPAGATION_TARGET_MS)}"
                for r in results
            ),
        ),
        row(
            f"propagation, until all {followers} hold it",
            (f"{r.prop.slowest.p50:.1f} ms / {r.prop.slowest.p99:.1f} ms" for r in results),
        ),
        row(
            "the publish call itself",
            (f"{r.prop.publish.p50:.1f} ms / {r.prop.publish.p99:.1f} ms" for r in results),
        ),
        row("peers' way: what", (r.target.peer_what for r in results)),
        row("peers' way: one step", (f"{fmt(r.peer.p50)} / {fmt(r.peer.p99)}" for r in results)),
        row("**peers' way / our step**, p50", (f"**{r.peer_ratio:.0f}x**" for r in results)),
    ]
    return "\n".join(lines)


def environment() -> str:
    import redis

    from skillfs.engines.etcd import engine  # noqa: F401 - the etcd3 distribution is its dependency

    return (
        f"Machine: {common.machine()}, redis-py {redis.__version__}, "
        f"python3-etcd3 {common.dist_version('python3-etcd3', missing='?')}; "
        f"run {time.strftime('%Y-%m-%d')}."
    )


def section(command: str, body: str, followers: int, rounds: int) -> str:
    return "\n".join(
        [
            "## Agent runtime (`bench/runtime.py`)",
            "",
            f"Command: `{command}` (from the repository root; a server per engine is started "
            "by the script with `support/servers.py`, on loopback).",
            "",
            environment(),
            "",
            f"Scope: {SKILLS} skills of 4 files each (about 10 KiB per skill) in the "
            f"agent-shared scope; propagation: {rounds} edits, each to one skill, watched by "
            f"{followers} worker processes (one user each).",
            "",
            body,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--n", type=int, default=3000, help="timed steps per measure")
    parser.add_argument("--followers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=200, help="edits for propagation")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    results = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        for name in names:
            target = SETUP[name](Path(tmp), stack)
            print(f"{name}: running ...", file=sys.stderr)
            results.append(bench_engine(target, args.n, args.followers, args.rounds))
    body = table(results, args.followers)
    print(body)
    if args.write_docs:
        command = "python -m bench.runtime " + shlex.join(argv or sys.argv[1:])
        text = section(command.strip(), body, args.followers, args.rounds)
        common.write_docs("bench/runtime.py", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
