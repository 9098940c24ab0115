"""Fleet benchmark (issue 12): one `skillfs serve` holding a fleet of agent workers, on Redis
and on etcd, beside a bare `grpc.aio` echo server measured in the same run.

    python -m bench.fleet                      # redis and etcd, full size; prints the tables
    python -m bench.fleet --quick              # a small run (50 streams, 20 workers, 10 s)
    python -m bench.fleet --write-docs         # also replaces this section of docs/benchmarks.md

Per engine, one store server (support/servers.py) and one `skillfs serve` process with its
documented defaults (`--max-workers 64`, the caps of docs/server.md "Limits":
max_watches_per_token 10,000), traffic on 127.0.0.1 only, load from at most 8 processes:

1. streams: Watch streams of one domain on one token, opened from the load processes (one
   grpc.aio channel each) up to 1k, 5k, 10k; each stream resumes one change back, so its
   first event proves the server admitted it. The server's threads (/proc/PID/status) and
   RSS at 0 and at each step; then one publish, timed from its acknowledgement to its event
   on every stream;
2. server CPU per unchanged-step call: the `Revisions` call a worker's `snapshot()` makes
   when nothing changed, from 2 processes x 16 calls in flight, the server's utime+stime
   (/proc/PID/stat) over N calls / N; the same against the echo server (a grpc.aio server
   answering `Revisions` with the same reply bytes), alternated A B B A;
3. workers: real `Skills` over `grpc://`, spread over the load processes (per process one
   engine, so one channel, and one `Store` per worker, so each worker has its own follower,
   Watch stream and cache, as separate worker processes would); each worker steps once a
   second (`snapshot()` + `prompt()`). Every step counted and timed; publishes to the
   agent-shared scope during the run, each timed from its acknowledgement until each worker's
   follower cache holds it (polled every 10 ms in each process), and each worker's first step
   started after the acknowledgement checked for the new version (C3);
4. views: `Snapshot` and `Prompt` RPCs for many different agents' views, then `Snapshot`
   again with the revisions known; errors, the server's threads, its store connections
   (sockets to the store's port, from /proc; Redis: `CLIENT LIST` too) and RSS before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import os
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc

import skillfs
from bench import common
from bench.common import ROOT, percentile
from skillfs.auth import tokens_document
from skillfs.model import Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.app import settle_gc

AGENT = "fleet"
DOMAIN = f"agents/{AGENT}"
SHARED = Scope.shared(AGENT)
HOT = "hot"  # the skill the publishes edit
SKILLS = 10  # skills in the agent-shared scope
ADMIN = "fleet-admin-token-0123456789abcdef"
WORKERS_TOKEN = "fleet-workers-token-0123456789abcdef"  # the whole fleet on one token
VIEWS_TOKEN = "fleet-views-token-0123456789abcdef"
TOKENS = [
    ("admin", ADMIN, ["*:admin"]),
    ("fleet-workers", WORKERS_TOKEN, [f"agent:{AGENT}:read"]),
    ("views", VIEWS_TOKEN, ["agent:*:read"]),
]
ENGINES = ("redis", "etcd")
MAX_PROCS = 8
REACH_TARGET_MS = 200.0
STEP_TARGET_MS = 10.0
CPU_TARGET = 1.5
#: Steps starting this many seconds after a publish's acknowledgement are not "quiet".
QUIET_AFTER = 2.0
#: Streams a load process opens at once, then pauses OPEN_PAUSE seconds (8 processes: 500
#: streams/s). gRPC's core cancels calls that arrive faster than the server's event loop takes
#: them (`grpc.server.max_pending_requests`, 1,000, hard limit 3,000: "CANCELLED"), which
#: `skillfs serve` does not raise; a burst of 2,500 on one channel loses ~300.
OPEN_BATCH = 25
OPEN_PAUSE = 0.4
#: How often a load process looks whether its workers' caches hold a publish: a reach is
#: counted up to this much late, and the look holds the process's GIL (1 ms made the load
#: processes' own publish handling the slowest part of a reach).
REACH_POLL = 0.01
#: Attempts again of a stream that gRPC's core cancelled before the server took it.
RETRIES = 5
#: Seconds between the step calls timed while a publish fans out to the open streams.
PROBE_EVERY = 0.005
#: Seconds over which the server's CPU is sampled with the streams open and nothing changing.
IDLE_SAMPLE = 3.0
#: Seconds between samples of the server's event-loop thread's scheduler counters, and the
#: window after each publish they are summed over.
SCHED_EVERY = 0.005
SCHED_WINDOW = 0.3

BEFORE = {  # issue 12's measurements of the thread-pool server, quoted as "before"
    "streams": "refused past 32 per token (the Watch cap: max_workers / 4)",
    "threads": "one handler thread per open Watch",
    "steps": "148 ms p50 / 303 ms p99 at 128 workers stepping every 100 ms "
    "(824 of 1,280 steps/s served)",
    "reach": "104 ms at 8 workers, 472 ms at 64, 1.9 s at 128 (worst 18 s); not all after "
    "20 s at 256",
    "views": "a follower thread and a blocking store connection per agent viewed; past ~100 "
    "agents the pool is full and every store call can fail",
    "cpu": "0.5-0.75 ms per call; 0.35-0.71x the echo server's throughput",
}

PREVIOUS_ROW = "previous full run (f7a692c)"
#: The last full run documented before this one (main at f7a692c, 2026-11-24: etcd's per-step
#: read over its JSON gateway), quoted beside each new figure. Earlier runs are quoted in
#: docs/benchmarks.md's readings.
PREVIOUS = {
    "redis": {
        "streams": "10,000 open / 0 refused; idle CPU 1 % of a core at 10,000 streams; a "
        "publish on every stream p50 351 ms / p99 656 ms; a step call during it p50 58.7 ms",
        "steps": "1,001 steps/s of 1,000; p50 3.9 ms / p99 192 ms; away from publishes p50 "
        "3.8 ms / p99 10.7 ms",
        "reach": "p50 103 ms / p99 232 ms; the last worker p50 223 ms / p99 254 ms",
        "calls": "per second: Revisions 1,000, Watch 1; server 43 % of a core, load 61 %; "
        "server's own Revisions time p50 1.96 ms / p99 8.66 ms",
        "views": "0 errors; threads 76 → 76 → 76; 39 store connections",
        "cpu": "0.239 / 0.198 ms per call: 1.21x",
    },
    "etcd": {
        "streams": "10,000 open / 0 refused; idle CPU 1 % of a core at 10,000 streams; a "
        "publish on every stream p50 263 ms / p99 517 ms; a step call during it p50 52.4 ms",
        "steps": "1,001 steps/s of 1,000; p50 4.9 ms / p99 307 ms; away from publishes p50 "
        "4.6 ms / p99 23.5 ms",
        "reach": "p50 135 ms / p99 273 ms; the last worker p50 289 ms / p99 374 ms",
        "calls": "per second: Revisions 1,000, Watch 2; server 46 % of a core, load 66 %; "
        "server's own Revisions time p50 2.58 ms / p99 24.69 ms",
        "views": "0 errors; threads 79 → 79 → 79; 3 store connections",
        "cpu": "0.224 / 0.177 ms per call: 1.26x",
    },
}


def previous(r: Any, key: str) -> str:
    return PREVIOUS.get(r.name, {}).get(key, "-")


@dataclass(frozen=True)
class Size:
    streams: tuple[int, ...]  # totals at which threads and RSS are sampled
    procs: int  # load processes
    workers: int
    seconds: float  # workers stepping, measured
    warmup: float
    publishes: int
    views: int
    calls: int  # per CPU measurement, per server and turn


FULL = Size((1000, 5000, 10_000), 8, 1000, 40.0, 10.0, 8, 500, 10_000)
QUICK = Size((10, 25, 50), 2, 20, 10.0, 3.0, 3, 50, 1000)


# --------------------------------------------------------------------------- the process


def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def proc_status(pid: int, key: str) -> int:
    """A number of /proc/PID/status (`Threads`, `VmRSS` in KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def threads(pid: int) -> int:
    return proc_status(pid, "Threads")


def rss_mib(pid: int) -> float:
    return proc_status(pid, "VmRSS") / 1024


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busiest_thread(pid: int) -> int | None:
    """The thread of `pid` with the most CPU time so far (the server's event loop), or None
    where the kernel keeps no scheduler counters (/proc/PID/task/TID/schedstat)."""
    best, most = None, -1
    for tid in os.listdir(f"/proc/{pid}/task"):
        with suppress(OSError, ValueError, IndexError):
            ran = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            if ran > most:
                best, most = int(tid), ran
    return best


class LoopSched:
    """The server's event-loop thread's scheduler counters (ns on a CPU, ns runnable but
    waiting for one), sampled every SCHED_EVERY seconds: whether a slow fan-out is the
    server's own work or the server waiting for a CPU that the load processes hold."""

    def __init__(self, pid: int) -> None:
        tid = busiest_thread(pid)
        self.path = None if tid is None else f"/proc/{pid}/task/{tid}/schedstat"
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.path is not None and not self._stop.wait(SCHED_EVERY):
            with suppress(OSError, ValueError, IndexError):
                ran, waited = Path(self.path).read_text().split()[:2]
                self.samples.append((time.monotonic(), int(ran), int(waited)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def share(self, windows: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
        """% of the time within `windows` the thread ran and waited for a CPU."""
        times = [t for t, _, _ in self.samples]
        span = ran = waited = 0.0
        for start, end in windows:
            i, j = bisect_left(times, start), bisect_right(times, end) - 1
            if j <= i:
                continue
            (t0, r0, w0), (t1, r1, w1) = self.samples[i], self.samples[j]
            span, ran, waited = span + (t1 - t0) * 1e9, ran + r1 - r0, waited + w1 - w0
        return (100 * ran / span, 100 * waited / span) if span else None


def sockets_to(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` to `port` (its store connections)."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{name}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    mine = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            mine += 1
    return mine


def fmt_ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:,.0f} ms"


def dist(samples: Sequence[float]) -> str:
    if not samples:
        return "-"
    return f"{fmt_ms(percentile(samples, 0.5))} / {fmt_ms(percentile(samples, 0.99))}"


# --------------------------------------------------------------------------- content


def skill_md(name: str, n: int) -> bytes:
    return (
        f"---\nname: {name}\ndescription: Handles {name} work for the fleet benchmark, "
        f"edition {n}. Use when asked for {name}.\n---\n\n"
        + "\n".join(f"{i}. Step {i} of {name}, edition {n}." for i in range(20))
        + "\n"
    ).encode()


def files(name: str, n: int) -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name, n), "references/guide.md": b"# guide\n" + b"rule\n" * 200}


# --------------------------------------------------------------------------- servers


class Echo(pb_grpc.SkillReaderServicer):  # type: ignore[misc]
    """The baseline: `Revisions` answered with fixed bytes, and nothing else."""

    def __init__(self, reply: pb.RevisionsResponse) -> None:
        self.reply = reply

    async def Revisions(self, request: Any, context: Any) -> pb.RevisionsResponse:
        return self.reply


def echo_main(port: int, reply_hex: str) -> None:
    async def serve() -> None:
        server = grpc.aio.server()
        pb_grpc.add_SkillReaderServicer_to_server(
            Echo(pb.RevisionsResponse.FromString(bytes.fromhex(reply_hex))), server
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def _meta(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


# --------------------------------------------------------------------------- 1. streams


def streams_main(address: str, since_hex: str, conn: Connection) -> None:
    """A load process holding Watch streams on one channel; commands from `conn`:
    ("open", n) -> ("opened", confirmed, errors); ("await", counter) -> arrival times of
    the event reaching `counter` on every confirmed stream; ("stop",)."""
    raise_nofile()
    asyncio.run(_streams(address, since_hex, conn))


async def _streams(address: str, since_hex: str, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    channel = grpc.aio.insecure_channel(address)
    stub = pb_grpc.SkillReaderStub(channel)
    request = pb.WatchRequest(domain=DOMAIN, since=pb.Revision.FromString(bytes.fromhex(since_hex)))
    confirmed = retried = 0
    errors: list[str] = []
    arrivals: dict[int, list[float]] = {}
    tasks: list[asyncio.Task[None]] = []
    changed = asyncio.Event()

    async def hold() -> None:
        """One stream; a call gRPC's core cancelled before the server took it (no event yet)
        is retried after a pause, as the `grpc://` engine's follower would."""
        nonlocal confirmed, retried
        first = True
        for attempt in range(RETRIES + 1):
            try:
                async for event in stub.Watch(request, metadata=_meta(WORKERS_TOKEN)):
                    now = time.monotonic()
                    if first:
                        confirmed += 1
                        first = False
                    arrivals.setdefault(event.through.counter, []).append(now)
                    changed.set()
                return
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                if first and exc.code() == grpc.StatusCode.CANCELLED and attempt < RETRIES:
                    retried += 1
                    await asyncio.sleep(0.5 + random.random())
                    continue
                errors.append(f"{exc.code().name}: {exc.details()}")
                changed.set()
                return

    async def until(done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            changed.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.5)

    while True:
        cmd = await loop.run_in_executor(None, conn.recv)
        if cmd[0] == "open":
            for i in range(cmd[1]):
                tasks.append(asyncio.create_task(hold()))
                if i % OPEN_BATCH == OPEN_BATCH - 1:  # a ramp, not one burst (see OPEN_BATCH)
                    await asyncio.sleep(OPEN_PAUSE)
            await until(lambda: confirmed + len(errors) >= len(tasks), 120)
            conn.send(("opened", confirmed, errors[:5], len(errors), retried))
        elif cmd[0] == "await":
            want = cmd[1]

            def all_there(want: int = want) -> bool:
                return len(arrivals.get(want, ())) >= confirmed

            await until(all_there, 30)
            conn.send(("arrived", arrivals.get(want, [])))
        else:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await channel.close()
            conn.send(("stopped",))
            return


@dataclass
class Streams:
    samples: list[tuple[int, int, float]]  # (streams open, server threads, RSS MiB)
    refused: int
    refused_sample: list[str]
    fanout: list[float]  # ms from the publish's acknowledgement to each stream's event
    fanout_streams: int
    idle_cpu: list[float]  # the server's CPU (% of a core) at each sample, nothing changing
    retried: int  # calls gRPC's core cancelled before the server took them, opened again
    during: list[float] = field(default_factory=list)  # ms, step calls during the fan-out


class Prober:
    """Step calls (`Revisions`) from this process, one every PROBE_EVERY seconds on a channel
    of its own, timed: how long a worker's step waits while the server fans a publish out."""

    def __init__(self, address: str) -> None:
        self.timed: list[tuple[float, float]] = []  # (started, ms)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(address,), daemon=True)
        self._thread.start()

    def _run(self, address: str) -> None:
        request = pb.RevisionsRequest(domains=[DOMAIN])
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.SkillReaderStub(channel)
            while not self._stop.wait(PROBE_EVERY):
                t = time.monotonic()
                stub.Revisions(request, metadata=_meta(WORKERS_TOKEN), timeout=30)
                self.timed.append((t, (time.monotonic() - t) * 1000))

    def stop(self, since: float, until: float) -> list[float]:
        """The times of the calls begun between `since` and `until` (monotonic)."""
        self._stop.set()
        self._thread.join(35)
        return [ms for t, ms in self.timed if since <= t <= until]


def bench_streams(ctx: Any, srv: Server, size: Size) -> Streams:
    admin = srv.admin_store
    before = admin.publish(SHARED, "streams", files("streams", 1)).revision
    admin.publish(SHARED, "streams", files("streams", 2))
    since_hex = pb.Revision(epoch=before.epoch, counter=before.counter).SerializeToString().hex()
    pid = srv.pid
    samples = [(0, threads(pid), rss_mib(pid))]
    conns, procs = [], []
    for _ in range(size.procs):
        here, there = ctx.Pipe()
        p = ctx.Process(target=streams_main, args=(srv.address, since_hex, there), daemon=True)
        p.start()
        conns.append(here)
        procs.append(p)
    refused, sample, opened, retried = 0, [], 0, 0
    idle: list[float] = []  # the server's CPU (% of a core) with the streams open, idle
    try:
        for total in size.streams:
            more = total - opened
            for i, c in enumerate(conns):
                c.send(("open", more // size.procs + (1 if i < more % size.procs else 0)))
            for c in conns:
                _, _confirmed, errs, n_err, n_retried = c.recv()
                refused += n_err
                retried += n_retried
                sample += errs
            opened = total
            time.sleep(1.0)
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            time.sleep(IDLE_SAMPLE)
            idle.append(100 * (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0))
            samples.append((total, threads(pid), rss_mib(pid)))
            print(
                f"  streams {total}: threads {samples[-1][1]}, refused {refused}", file=sys.stderr
            )
        prober = Prober(srv.address)
        time.sleep(0.5)
        sent = time.monotonic()
        commit = admin.publish(SHARED, "streams", files("streams", 3))
        acked = time.monotonic()
        fanout: list[float] = []
        for c in conns:
            c.send(("await", commit.revision.counter))
        for c in conns:
            fanout += [(t - acked) * 1000 for t in c.recv()[1]]
        during = prober.stop(sent, acked + max(fanout, default=0) / 1000)
        for c in conns:
            c.send(("stop",))
        for c in conns:
            c.recv()
    finally:
        for p in procs:
            p.join(20)
            if p.is_alive():
                p.kill()
    return Streams(samples, refused, sample[:3], fanout, len(fanout), idle, retried, during)


# --------------------------------------------------------------------------- 2. CPU per call


def cpu_client_main(address: str, request_hex: str, calls: int, inflight: int, conn: Any) -> None:
    """Warm up, wait for "go", make `calls` Revisions calls with `inflight` in flight."""

    async def run() -> None:
        request = pb.RevisionsRequest.FromString(bytes.fromhex(request_hex))
        meta = _meta(WORKERS_TOKEN)
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.SkillReaderStub(channel)
            for _ in range(200):
                await stub.Revisions(request, metadata=meta)
            conn.send("ready")
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            left = calls

            async def one() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await stub.Revisions(request, metadata=meta)

            await asyncio.gather(*(one() for _ in range(inflight)))
        conn.send("done")

    asyncio.run(run())


def cpu_per_call(
    ctx: Any, pid: int, address: str, request: pb.RevisionsRequest, calls: int
) -> float:
    """Server CPU (ms) per call over `calls` calls from 2 processes, 16 in flight each."""
    conns, procs = [], []
    for i in range(2):
        here, there = ctx.Pipe()
        n = calls // 2 + (calls % 2 if i == 0 else 0)
        p = ctx.Process(
            target=cpu_client_main,
            args=(address, request.SerializeToString().hex(), n, 16, there),
            daemon=True,
        )
        p.start()
        conns.append(here)
        procs.append(p)
    for c in conns:
        assert c.recv() == "ready"
    time.sleep(0.2)
    cpu0 = cpu_seconds(pid)
    for c in conns:
        c.send("go")
    for c in conns:
        assert c.recv() == "done"
    used = cpu_seconds(pid) - cpu0
    for p in procs:
        p.join(10)
    return used / calls * 1000


@dataclass
class Cpu:
    skillfs_ms: float
    echo_ms: float

    @property
    def ratio(self) -> float:
        return self.skillfs_ms / self.echo_ms


def bench_cpu(ctx: Any, srv: Server, echo: Echoes, size: Size) -> Cpu:
    request = pb.RevisionsRequest(domains=[DOMAIN])
    ours: list[float] = []
    base: list[float] = []
    for turn in ("echo", "skillfs", "skillfs", "echo"):
        if turn == "echo":
            base.append(cpu_per_call(ctx, echo.pid, echo.address, request, size.calls))
        else:
            ours.append(cpu_per_call(ctx, srv.pid, srv.address, request, size.calls))
    return Cpu(sum(ours) / len(ours), sum(base) / len(base))


# --------------------------------------------------------------------------- 3. workers


@dataclass
class Step:
    started: float
    ms: float
    ok: bool
    counter: int
    version: int


class Worker:
    def __init__(self, skills: skillfs.Skills) -> None:
        self.skills = skills
        self.follower = skills.followers[0]
        self.steps: list[Step] = []
        self.errors: list[str] = []

    def step(self) -> None:
        t0 = time.monotonic()
        try:
            snap = self.skills.snapshot()
            snap.prompt()
            rev = snap.revisions[DOMAIN]
            counter = rev.counter if rev is not None else 0
            version = snap.skill(HOT).version or 0
            ok = True
        except Exception as exc:
            self.errors.append(repr(exc))
            counter, version, ok = -1, -1, False
        self.steps.append(Step(t0, (time.monotonic() - t0) * 1000, ok, counter, version))

    def run(self, first: float, stop: threading.Event) -> None:
        due = first
        while not stop.is_set():
            delay = due - time.monotonic()
            if delay > 0 and stop.wait(delay):
                return
            self.step()
            due += 1.0
            due = max(due, time.monotonic())  # a late step does not make the next ones bunch


def workers_main(url: str, users: Sequence[str], conn: Connection) -> None:
    """A load process of workers; commands from `conn`: ("start",), ("reach", counter,
    version, acked), ("stop", since) -> the steps' numbers and the C3 checks."""
    raise_nofile()
    from skillfs.api import Store
    from skillfs.store.opening import open_engine

    engine = open_engine(url, token=WORKERS_TOKEN)  # one channel for the whole process
    workers = [Worker(skillfs.Skills(Store(engine), AGENT, user)) for user in users]
    for w in workers:
        w.step()  # the first snapshot loads the scopes
    setup_errors = sum(not s.ok for w in workers for s in w.steps)
    for w in workers:
        w.steps.clear()
    # a load process holds 125 workers' heaps where a worker's own process would hold one: its
    # full collections would stall every worker of it at once (the server does the same)
    settle_gc()
    conn.send(("ready", setup_errors))
    stop = threading.Event()
    pool: list[threading.Thread] = []
    publishes: list[tuple[int, int, float]] = []
    while True:
        cmd = conn.recv()
        if cmd[0] == "start":
            start = time.monotonic()
            for i, w in enumerate(workers):
                t = threading.Thread(
                    target=w.run, args=(start + i / len(workers), stop), daemon=True
                )
                t.start()
                pool.append(t)
            conn.send(("started",))
        elif cmd[0] == "reach":
            _, counter, version, acked = cmd
            publishes.append((counter, version, acked))
            reached: list[float | None] = [None] * len(workers)
            deadline = time.monotonic() + 10
            while None in reached and time.monotonic() < deadline:
                now = time.monotonic()
                for i, w in enumerate(workers):
                    if reached[i] is None:
                        rev = w.follower.revision
                        if rev is not None and rev.counter >= counter:
                            reached[i] = (now - acked) * 1000
                time.sleep(REACH_POLL)
            conn.send(("reached", reached))
        else:
            since = cmd[1]
            stop.set()
            for t in pool:
                t.join(30)
            steps = [s for w in workers for s in w.steps if s.started >= since]
            errors = [e for w in workers for e in w.errors]
            c3 = []
            for counter, version, acked in publishes:
                shown = stale = failed = none = 0
                for w in workers:
                    nxt = next((s for s in w.steps if s.started > acked), None)
                    if nxt is None:
                        none += 1
                    elif not nxt.ok:  # an error, not a snapshot: no C3 claim either way
                        failed += 1
                    elif nxt.counter >= counter and nxt.version >= version:
                        shown += 1
                    else:  # a snapshot without the acknowledged publish: C3 broken
                        stale += 1
                c3.append((shown, stale, failed, none))
            acks = [acked for _, _, acked in publishes]
            quiet = [
                s.ms
                for s in steps
                if s.ok and not any(0 <= s.started - a < QUIET_AFTER for a in acks)
            ]
            conn.send(
                (
                    "stopped",
                    [s.ms for s in steps if s.ok],
                    quiet,
                    sum(not s.ok for s in steps),
                    errors[:3],
                    c3,
                )
            )
            for w in workers:
                w.skills.close()
            engine.close()
            return


def bucket_quantile(cumulative: dict[float, float], q: float) -> float:
    """The q-quantile in ms of a Prometheus histogram's cumulative bucket counts, linear
    within the bucket it falls in (what `histogram_quantile` does)."""
    bounds = sorted(cumulative)
    total = cumulative.get(math.inf, 0.0)
    if total <= 0:
        return 0.0
    want, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= want:
            if math.isinf(bound):
                return lower * 1000
            return (lower + (bound - lower) * (want - below) / max(count - below, 1e-9)) * 1000
        lower, below = bound, count
    return lower * 1000


@dataclass
class Workers:
    n: int
    seconds: float
    setup_errors: int
    steps: list[float]
    failed: int
    errors: list[str]
    reach: list[float]  # ms, every (publish, worker) pair that was reached
    reach_all: list[float]  # ms, the last worker per publish
    unreached: int
    c3_shown: int
    c3_missed: int  # snapshots that did not show the acknowledged publish
    c3_no_step: int
    c3_failed: int = 0  # first steps after a publish that raised instead
    quiet: list[float] = field(default_factory=list)  # steps not just after a publish
    threads: list[int] = field(default_factory=list)
    server_cpu: float = 0.0  # % of a core over the measured run
    load_cpu: float = 0.0  # the load processes', % of a core
    calls: dict[str, float] = field(default_factory=dict)  # gRPC calls/s by method
    server_step_ms: tuple[float, float] = (0.0, 0.0)  # the server's Revisions p50/p99
    rss: list[float] = field(default_factory=list)
    store_conns: list[int] = field(default_factory=list)
    #: The server's event-loop thread, % of the time running / waiting for a CPU: in the
    #: SCHED_WINDOW seconds after each publish, and over the rest of the run (None: unknown).
    loop_after: tuple[float, float] | None = None
    loop_rest: tuple[float, float] | None = None


def bench_workers(ctx: Any, srv: Server, size: Size) -> Workers:
    admin = srv.admin_store
    users = [f"u{i:04d}" for i in range(size.workers)]
    conns, procs = [], []
    for i in range(size.procs):
        here, there = ctx.Pipe()
        mine = users[i :: size.procs]
        p = ctx.Process(target=workers_main, args=(srv.url, mine, there), daemon=True)
        p.start()
        conns.append(here)
        procs.append(p)
    try:
        setup_errors = sum(c.recv()[1] for c in conns)
        print(f"  workers ready: {size.workers}", file=sys.stderr)
        for c in conns:
            c.send(("start",))
        for c in conns:
            c.recv()
        time.sleep(size.warmup)
        since = time.monotonic()
        sched = LoopSched(srv.pid)
        acks: list[float] = []
        calls0, cpu0, spent0 = srv.calls(), cpu_seconds(srv.pid), srv.revisions_seconds()
        load0 = sum(cpu_seconds(p.pid) for p in procs if p.pid is not None)
        result = Workers(size.workers, size.seconds, setup_errors, [], 0, [], [], [], 0, 0, 0, 0)
        gap = size.seconds / size.publishes
        for k in range(size.publishes):
            wake = since + k * gap + gap / 2
            while time.monotonic() < wake:
                time.sleep(0.05)
                result.threads.append(threads(srv.pid))
            commit = admin.publish(SHARED, HOT, files(HOT, 100 + k))
            acked = time.monotonic()
            acks.append(acked)
            version = commit.versions[HOT]
            for c in conns:
                c.send(("reach", commit.revision.counter, version, acked))
            got: list[float | None] = []
            for c in conns:
                got += c.recv()[1]
            reached = [x for x in got if x is not None]
            result.reach += reached
            result.unreached += len(got) - len(reached)
            if reached:
                result.reach_all.append(max(reached))
            result.rss.append(rss_mib(srv.pid))
            result.store_conns.append(srv.store_conns())
            print(
                f"  publish {k}: reached {len(reached)}/{len(got)}, "
                f"p99 {percentile(reached, 0.99) if reached else -1:.0f} ms",
                file=sys.stderr,
            )
        while time.monotonic() < since + size.seconds:
            time.sleep(0.05)
        elapsed = time.monotonic() - since
        after = [(a, a + SCHED_WINDOW) for a in acks]
        rest = list(
            zip([since, *(a + SCHED_WINDOW for a in acks)], [*acks, since + elapsed], strict=True)
        )
        sched.stop()
        result.loop_after = sched.share(after)
        result.loop_rest = sched.share(rest)
        result.server_cpu = 100 * (cpu_seconds(srv.pid) - cpu0) / elapsed
        load1 = sum(cpu_seconds(p.pid) for p in procs if p.pid is not None)
        result.load_cpu = 100 * (load1 - load0) / elapsed
        calls1 = srv.calls()
        result.calls = {m: (n - calls0.get(m, 0)) / elapsed for m, n in calls1.items()}
        spent = {b: n - spent0.get(b, 0.0) for b, n in srv.revisions_seconds().items()}
        result.server_step_ms = (bucket_quantile(spent, 0.5), bucket_quantile(spent, 0.99))
        for c in conns:
            c.send(("stop", since))
        for c in conns:
            _, steps, quiet, failed, errors, c3 = c.recv()
            result.steps += steps
            result.quiet += quiet
            result.failed += failed
            result.errors += errors
            for shown, missed, failed_first, none in c3:
                result.c3_shown += shown
                result.c3_missed += missed
                result.c3_failed += failed_first
                result.c3_no_step += none
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return result


# --------------------------------------------------------------------------- 4. views


@dataclass
class Views:
    n: int
    errors: int
    error_sample: list[str]
    threads: tuple[int, int, int]  # before, after the first round, after the second
    store_conns: tuple[int, int, int]
    redis_clients: tuple[int, int, int] | None
    rss: tuple[float, float, float]
    seconds: float


def bench_views(srv: Server, size: Size) -> Views:
    direct = skillfs.open_store(srv.store_url)
    agents = [f"view-{i:04d}" for i in range(size.views)]
    for a in agents:
        direct.publish(Scope.shared(a), "only", files("only", 1))
    direct.close()
    meta = _meta(VIEWS_TOKEN)
    errors: list[str] = []

    def sample() -> tuple[int, int, int | None, float]:
        return threads(srv.pid), srv.store_conns(), srv.redis_clients(), rss_mib(srv.pid)

    from support.grpc_servers import single

    s0 = sample()
    known: dict[str, Any] = {}
    t0 = time.monotonic()
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.SkillReaderStub(channel)
        for a in agents:
            view = pb.View(agent_id=a, user_id="u")
            try:
                reply = single(
                    stub.Snapshot(pb.SnapshotRequest(view=view), metadata=meta, timeout=30)
                )
                known[a] = reply.revisions
                prompt = single(stub.Prompt(pb.PromptRequest(view=view), metadata=meta, timeout=30))
                assert "<skill-id>only</skill-id>" in prompt.prompt, prompt
            except (grpc.RpcError, AssertionError) as exc:
                errors.append(repr(exc)[:300])
        time.sleep(1.0)
        s1 = sample()
        for a in agents:
            view = pb.View(agent_id=a, user_id="u")
            try:
                reply = single(
                    stub.Snapshot(
                        pb.SnapshotRequest(view=view, known=known.get(a, {})),
                        metadata=meta,
                        timeout=30,
                    )
                )
                assert reply.unchanged, reply
            except (grpc.RpcError, AssertionError) as exc:
                errors.append(repr(exc)[:300])
    seconds = time.monotonic() - t0
    time.sleep(1.0)
    s2 = sample()
    rc = (s0[2], s1[2], s2[2])
    return Views(
        size.views,
        len(errors),
        errors[:3],
        (s0[0], s1[0], s2[0]),
        (s0[1], s1[1], s2[1]),
        None if None in rc else rc,  # type: ignore[arg-type]
        (s0[3], s1[3], s2[3]),
        seconds,
    )


# --------------------------------------------------------------------------- one engine


@dataclass
class Echoes:
    pid: int
    address: str


class Server:
    """The skillfs server of one engine, its store and an admin client of it."""

    def __init__(self, name: str, tmp: Path, stack: ExitStack) -> None:
        from support.grpc_servers import ServerProcess

        self.name = name
        self.redis: Any = None
        store: Any
        if name == "redis":
            store, client = common.redis_server(tmp / "redis", stack)
            self.redis = client
            self.store_port = store.address[1]
            self.version = f"Redis {client.info('server')['redis_version']}"
        else:
            store, client = common.etcd_server(tmp / "etcd", stack)
            self.store_port = store.port
            self.version = f"etcd {client.status().version}"
        self.store_url = store.url
        tokens = tmp / f"tokens-{name}.json"
        tokens.write_text(tokens_document(TOKENS, receipt_key="fleet-receipt-key"))
        self.process = ServerProcess(store.url, tmp / f"serve-{name}", tokens=tokens).start()
        stack.callback(self.process.stop)
        assert self.process.proc is not None
        self.pid = self.process.proc.pid
        self.address = self.process.address
        self.url = f"grpc://{self.address}"
        self.admin_store = skillfs.open_store(self.url, token=ADMIN)
        stack.callback(self.admin_store.close)
        for i in range(SKILLS - 1):
            self.admin_store.publish(SHARED, f"skill-{i}", files(f"skill-{i}", 1))
        self.admin_store.publish(SHARED, HOT, files(HOT, 1))

    def store_conns(self) -> int:
        return sockets_to(self.pid, self.store_port)

    def calls(self) -> dict[str, float]:
        """gRPC calls served so far by method (`skillfs_grpc_requests_total` at /metrics)."""
        url = f"http://127.0.0.1:{self.process.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as reply:
            text = reply.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("skillfs_grpc_requests_total{"):
                labels, value = line.rsplit(" ", 1)
                method = labels.split('method="', 1)[1].split('"', 1)[0]
                out[method] = out.get(method, 0.0) + float(value)
        return out

    def revisions_seconds(self) -> dict[float, float]:
        """The server's own time for `Revisions` calls so far: cumulative count per bucket
        bound (`skillfs_grpc_request_seconds_bucket` at /metrics)."""
        url = f"http://127.0.0.1:{self.process.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as reply:
            text = reply.read().decode()
        out: dict[float, float] = {}
        for line in text.splitlines():
            if line.startswith("skillfs_grpc_request_seconds_bucket{") and '"Revisions"' in line:
                labels, value = line.rsplit(" ", 1)
                bound = labels.split('le="', 1)[1].split('"', 1)[0]
                out[float(bound)] = float(value)
        return out

    def redis_clients(self) -> int | None:
        """Clients Redis counts (`CLIENT LIST`), this benchmark's own connection left out."""
        if self.redis is None:
            return None
        return len(self.redis.client_list()) - 1


@dataclass
class Result:
    name: str
    version: str
    streams: Streams
    cpu: Cpu
    workers: Workers
    views: Views
    idle_threads: int


def start_echo(srv: Server, stack: ExitStack) -> Echoes:
    """The echo server, answering with the bytes the skillfs server answers."""
    from support.servers import free_port

    with grpc.insecure_channel(srv.address) as channel:
        reply = pb_grpc.SkillReaderStub(channel).Revisions(
            pb.RevisionsRequest(domains=[DOMAIN]), metadata=_meta(WORKERS_TOKEN)
        )
    port = free_port()
    argv = [sys.executable, "-m", "bench.fleet", "--echo", str(port)]
    proc = subprocess.Popen([*argv, "--reply", reply.SerializeToString().hex()], cwd=ROOT)
    stack.callback(proc.wait, 10)
    stack.callback(proc.kill)
    common.wait_port(f"127.0.0.1:{port}")
    return Echoes(proc.pid, f"127.0.0.1:{port}")


def bench_engine(name: str, tmp: Path, size: Size) -> Result:
    ctx = mp.get_context("spawn")
    with ExitStack() as stack:
        srv = Server(name, tmp, stack)
        echo = start_echo(srv, stack)
        time.sleep(1.0)
        idle = threads(srv.pid)
        print(f"{name}: streams ...", file=sys.stderr)
        streams = bench_streams(ctx, srv, size)
        print(f"{name}: cpu per call ...", file=sys.stderr)
        cpu = bench_cpu(ctx, srv, echo, size)
        print(f"{name}: workers ...", file=sys.stderr)
        workers = bench_workers(ctx, srv, size)
        print(f"{name}: views ...", file=sys.stderr)
        views = bench_views(srv, size)
        return Result(name, srv.version, streams, cpu, workers, views, idle)


# --------------------------------------------------------------------------- report


def loop_share(share: tuple[float, float] | None) -> str:
    return "n/a" if share is None else f"{share[0]:.0f} % / {share[1]:.0f} %"


def ok(good: bool, target: str) -> str:
    return f"ok ({target})" if good else f"MISSED ({target})"


def table(results: Sequence[Result], size: Size) -> str:
    def cells(fn: Any) -> list[str]:
        return [fn(r) for r in results]

    def stream_threads(r: Result) -> str:
        return ", ".join(f"{n:,}: {t}" for n, t, _ in r.streams.samples)

    def stream_rss(r: Result) -> str:
        return ", ".join(f"{n:,}: {m:.0f}" for n, _, m in r.streams.samples)

    def per_stream(r: Result) -> str:
        (n0, _, m0), (n1, _, m1) = r.streams.samples[0], r.streams.samples[-1]
        return f"{(m1 - m0) * 1024 / max(1, n1 - n0):.1f} KiB"

    def steps(r: Result) -> str:
        w = r.workers
        p99 = percentile(w.steps, 0.99) if w.steps else float("inf")
        return f"{dist(w.steps)} {ok(p99 <= STEP_TARGET_MS, f'p99 <= {STEP_TARGET_MS:.0f} ms')}"

    def step_count(r: Result) -> str:
        w = r.workers
        total = len(w.steps) + w.failed
        return (
            f"{total:,} in {w.seconds:.0f} s ({total / w.seconds:,.0f}/s of {w.n:,} expected); "
            f"failed {w.failed + w.setup_errors}"
        )

    def reach(r: Result) -> str:
        w = r.workers
        p99 = percentile(w.reach, 0.99) if w.reach else float("inf")
        good = p99 <= REACH_TARGET_MS and not w.unreached
        miss = f"; {w.unreached} not within 10 s" if w.unreached else ""
        return f"{dist(w.reach)} {ok(good, f'p99 <= {REACH_TARGET_MS:.0f} ms')}{miss}"

    def c3(r: Result) -> str:
        w = r.workers
        checked = w.c3_shown + w.c3_missed
        pct = 100 * w.c3_shown / checked if checked else 0
        extra = f"; {w.c3_no_step} without a step after it" if w.c3_no_step else ""
        if w.c3_failed:
            extra += f"; {w.c3_failed} whose next step raised (not counted)"
        return f"{w.c3_shown:,} of {checked:,} snapshots ({pct:.1f} %){extra}"

    def views_line(r: Result, what: str) -> str:
        v = r.views
        t: tuple[Any, ...] = getattr(v, what)
        return " → ".join(f"{x:.0f}" if isinstance(x, float) else str(x) for x in t)

    lines = [
        common.row("measure", (f"{r.name} ({r.version})" for r in results)),
        "|---|" + "---|" * len(results),
        common.row("**1. Watch streams on one token**", ("" for _ in results)),
        common.row(
            "streams open / refused",
            cells(
                lambda r: (
                    f"{r.streams.samples[-1][0] - r.streams.refused:,} / {r.streams.refused}"
                    f" ({r.streams.retried:,} calls cancelled by gRPC's core before the "
                    "server took them, opened on a retry)"
                )
            ),
        ),
        common.row(
            "why refused (a sample)",
            cells(lambda r: "; ".join(sorted(set(r.streams.refused_sample))) or "-"),
        ),
        common.row("server threads at streams open", cells(stream_threads)),
        common.row("server RSS (MiB) at streams open", cells(stream_rss)),
        common.row("RSS per stream (0 → last)", cells(per_stream)),
        common.row(
            "server CPU with the streams open, nothing changing (% of a core)",
            cells(
                lambda r: ", ".join(
                    f"{n:,}: {c:.0f} %"
                    for (n, _, _), c in zip(r.streams.samples[1:], r.streams.idle_cpu, strict=True)
                )
            ),
        ),
        common.row(
            "a publish's event on every stream, from its ack (p50 / p99)",
            cells(lambda r: f"{dist(r.streams.fanout)} on {r.streams.fanout_streams:,} streams"),
        ),
        common.row(
            "a step call (`Revisions`) begun during that publish's fan-out, one every 5 ms "
            "from the benchmark's process (calls; p50 / max)",
            cells(
                lambda r: (
                    f"{len(r.streams.during)}; {fmt_ms(percentile(r.streams.during, 0.5))}"
                    f" / {fmt_ms(max(r.streams.during))}"
                    if r.streams.during
                    else "-"
                )
            ),
        ),
        common.row("before (issue 12)", (BEFORE["streams"] for _ in results)),
        common.row(PREVIOUS_ROW, cells(lambda r: previous(r, "streams"))),
        common.row(f"**2. {size.workers:,} workers, a step a second**", ("" for _ in results)),
        common.row("steps", cells(step_count)),
        common.row("step `snapshot()` + `prompt()` (p50 / p99)", cells(steps)),
        common.row(
            "why steps failed (a sample)",
            cells(lambda r: "; ".join(sorted({e[:160] for e in r.workers.errors})) or "-"),
        ),
        common.row(
            f"steps not within {QUIET_AFTER:.0f} s after a publish (p50 / p99)",
            cells(lambda r: f"{dist(r.workers.quiet)} ({len(r.workers.quiet):,} steps)"),
        ),
        common.row("before (issue 12)", (BEFORE["steps"] for _ in results)),
        common.row(PREVIOUS_ROW, cells(lambda r: previous(r, "steps"))),
        common.row(
            f"a publish in every worker's cache, from its ack ({size.publishes} publishes; "
            "p50 / p99)",
            cells(reach),
        ),
        common.row(
            "until the last worker holds it (p50 / p99)", cells(lambda r: dist(r.workers.reach_all))
        ),
        common.row("before (issue 12)", (BEFORE["reach"] for _ in results)),
        common.row(PREVIOUS_ROW, cells(lambda r: previous(r, "reach"))),
        common.row(PREVIOUS_ROW + ": calls", cells(lambda r: previous(r, "calls"))),
        common.row("next step after the ack shows it (C3)", cells(c3)),
        common.row(
            "CPU during the run, % of a core: server / the load processes",
            cells(lambda r: f"{r.workers.server_cpu:.0f} % / {r.workers.load_cpu:.0f} %"),
        ),
        common.row(
            "the server's event-loop thread, % of the time running / runnable but waiting for "
            f"a CPU (/proc schedstat): in the {SCHED_WINDOW:.1f} s after each publish; the "
            "rest of the run",
            cells(
                lambda r: f"{loop_share(r.workers.loop_after)}; {loop_share(r.workers.loop_rest)}"
            ),
        ),
        common.row(
            "the server's own time per `Revisions` call (handler start to end, from its "
            "histogram; p50 / p99)",
            cells(
                lambda r: (
                    f"{r.workers.server_step_ms[0]:.2f} ms / {r.workers.server_step_ms[1]:.2f} ms"
                )
            ),
        ),
        common.row(
            "gRPC calls/s the server answered during the run, by method",
            cells(
                lambda r: ", ".join(
                    f"{m} {n:,.0f}"
                    for m, n in sorted(r.workers.calls.items(), key=lambda x: -x[1])
                    if n >= 0.5
                )
            ),
        ),
        common.row(
            "server threads during the run (min–max)",
            cells(lambda r: f"{min(r.workers.threads)}–{max(r.workers.threads)}"),
        ),
        common.row(
            "server store connections / RSS during the run",
            cells(
                lambda r: (
                    f"{min(r.workers.store_conns)}–{max(r.workers.store_conns)} / "
                    f"{max(r.workers.rss):.0f} MiB"
                )
            ),
        ),
        common.row(f"**3. {size.views} agents' views through `Snapshot`**", ("" for _ in results)),
        common.row(
            "Snapshot + Prompt, then Snapshot with revisions known: errors",
            cells(
                lambda r: f"{r.views.errors} of {3 * r.views.n:,} calls ({r.views.seconds:.1f} s)"
            ),
        ),
        common.row(
            "server threads (before → after → again)", cells(lambda r: views_line(r, "threads"))
        ),
        common.row(
            "server store connections (sockets; before → after → again)",
            cells(lambda r: views_line(r, "store_conns")),
        ),
        common.row(
            "Redis `CLIENT LIST` (before → after → again)",
            cells(lambda r: views_line(r, "redis_clients") if r.views.redis_clients else "n/a"),
        ),
        common.row(
            "server RSS MiB (before → after → again)", cells(lambda r: views_line(r, "rss"))
        ),
        common.row("before (issue 12)", (BEFORE["views"] for _ in results)),
        common.row(PREVIOUS_ROW, cells(lambda r: previous(r, "views"))),
        common.row("**4. server CPU per unchanged-step call**", ("" for _ in results)),
        common.row(
            "skillfs `Revisions` / echo server, ms per call",
            cells(lambda r: f"{r.cpu.skillfs_ms:.3f} / {r.cpu.echo_ms:.3f}"),
        ),
        common.row(
            "ratio",
            cells(
                lambda r: (
                    f"**{r.cpu.ratio:.2f}x** {ok(r.cpu.ratio <= CPU_TARGET, f'<= {CPU_TARGET}x')}"
                )
            ),
        ),
        common.row("before (issue 12)", (BEFORE["cpu"] for _ in results)),
        common.row(PREVIOUS_ROW, cells(lambda r: previous(r, "cpu"))),
    ]
    return "\n".join(lines)


def environment() -> str:
    return (
        f"Machine: {common.machine()}, grpcio {grpc.__version__}; load average "
        f"{os.getloadavg()[0]:.1f} at the end; run {time.strftime('%Y-%m-%d')}."
    )


def section(command: str, body: str, size: Size) -> str:
    return "\n".join(
        [
            "## Serving a fleet (`bench/fleet.py`)",
            "",
            f"Command: `{command}` (from the repository root; the store servers are started by "
            "the script with `support/servers.py`, the skillfs server as `skillfs serve` with its "
            'defaults — `--max-workers 64`, the caps of docs/server.md "Limits" — and the '
            "echo server as a grpc.aio process, all on 127.0.0.1).",
            "",
            environment(),
            "",
            f"Load from {size.procs} processes; {SKILLS} skills in the agent-shared scope; each "
            "worker is a `Skills` on its own `Store` over its process's one `grpc://` channel. "
            'The "before (issue 12)" rows quote the issue\'s measurements of the thread-pool '
            "server (workers stepping every 100 ms there).",
            "",
            body,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--quick", action="store_true", help="a small run for development")
    parser.add_argument("--workers", type=int, help="workers (default 1000, quick 20)")
    parser.add_argument("--streams", type=int, help="Watch streams (default 10000, quick 50)")
    parser.add_argument("--procs", type=int, help=f"load processes (default {MAX_PROCS})")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--echo", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--reply", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo:
        echo_main(args.echo, args.reply)
        return 0
    sys.path.insert(0, str(ROOT))
    raise_nofile()
    size = QUICK if args.quick else FULL
    if args.workers:
        size = replace(size, workers=args.workers)
    if args.streams:
        size = replace(size, streams=(args.streams // 10, args.streams // 2, args.streams))
    if args.procs:
        size = replace(size, procs=args.procs)
    assert size.procs <= MAX_PROCS
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results.append(bench_engine(name, Path(tmp), size))
    body = table(results, size)
    print(body)
    if args.write_docs:
        command = "python -m bench.fleet " + shlex.join(argv if argv is not None else sys.argv[1:])
        common.write_docs("bench/fleet.py", section(command.strip(), body, size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
