"""Server benchmarks: what the gRPC layer costs over a bare gRPC server and over the store.

    python -m bench.grpc                      # prints a table
    python -m bench.grpc --write-docs         # also replaces this section of docs/benchmarks.md

In one run, with every server in its own process (so the client threads do not share a GIL
with it), on one Redis started here (support/servers.py):

- ReadFile of a 4 KiB file naming its manifest (scope, skill, version: what a snapshot holds),
  8 client threads, throughput and p50, against a bare grpcio server whose ReadFile yields the
  same 4 KiB in the same message type with no auth, lookup or metrics. Target: >= 0.7x the
  bare server's throughput;
- a worker's per-step `Skills.snapshot()` when nothing changed, through a skillfs server
  (grpc://) against directly on the store (redis://), and the server's own Snapshot RPC given
  the revisions the caller holds.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

import skillfs
from bench import common
from bench.common import ROOT, timed
from skillfs.model import Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.runtime import Skills

TARGET = 0.7
THREADS = 8
AGENT = "support-bot"  # what the test tokens grant (support/grpc_servers.py)
USER = "alice"
SCOPE = Scope.user(AGENT, USER)
FILE = random.Random(4096).randbytes(4096)  # the same bytes in the echo process


class Echo(pb_grpc.SkillReaderServicer):  # type: ignore[misc]
    """The baseline: ReadFile returning the bytes, and nothing else."""

    def ReadFile(self, request: Any, context: Any) -> Iterator[Any]:
        yield pb.FileChunk(range=0, data=FILE)


def echo_server(port: int) -> None:
    server = grpc.server(ThreadPoolExecutor(max_workers=128))
    pb_grpc.add_SkillReaderServicer_to_server(Echo(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def throughput(call: Callable[[], object], seconds: float) -> tuple[float, float]:
    """Calls per second over THREADS threads for `seconds`, and the p50 latency in µs."""
    for _ in range(200):
        call()
    stop = time.monotonic() + seconds
    samples: list[list[float]] = [[] for _ in range(THREADS)]

    def worker(out: list[float]) -> None:
        while time.monotonic() < stop:
            t = time.perf_counter()
            call()
            out.append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker, args=(s,)) for s in samples]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    flat = [x for s in samples for x in s]
    return len(flat) / elapsed, statistics.median(flat) * 1e6


def p50(call: Callable[[], object], n: int) -> float:
    """The median latency of `n` calls, one at a time, in µs."""
    return statistics.median(timed(call, n, warmup=50).samples)


def run(seconds: float, n: int) -> str:
    sys.path.insert(0, str(ROOT))
    from support.grpc_servers import ADMIN, ALICE, ServerProcess, single
    from support.servers import RedisServer, free_port

    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as redis_server:
        echo_port = free_port()
        echo = subprocess.Popen([sys.executable, "-m", "bench.grpc", "--echo", str(echo_port)],
                                cwd=ROOT)  # fmt: skip
        server = ServerProcess(redis_server.url, Path(tmp) / "skillfs").start()
        try:
            common.wait_port(f"127.0.0.1:{echo_port}")
            admin = skillfs.open_store(f"grpc://{server.address}", token=ADMIN)
            md = b"---\nname: s\ndescription: A bench skill. Use when benchmarking.\n---\n"
            admin.publish(SCOPE, "s", {"SKILL.md": md, "data.bin": FILE})
            m = admin.manifest(SCOPE, "s")
            request = pb.ReadFileRequest(
                ranges=[
                    pb.BlobRange(
                        sha256=m.files["data.bin"].sha256,
                        source=pb.Source(scope=str(SCOPE), skill="s", version=m.version),
                    )
                ]
            )
            meta = [("authorization", f"Bearer {ALICE}")]
            results: dict[str, tuple[float, float]] = {}
            one_call: dict[str, float] = {}
            for name, address in (("echo", f"127.0.0.1:{echo_port}"), ("skillfs", server.address)):
                with grpc.insecure_channel(address) as ch:
                    stub = pb_grpc.SkillReaderStub(ch)

                    def read(stub: Any = stub) -> bytes:
                        return b"".join(c.data for c in stub.ReadFile(request, metadata=meta))

                    assert read() == FILE
                    results[name] = throughput(read, seconds)
                    one_call[name] = p50(read, n)
            ratio = results["skillfs"][0] / results["echo"][0]

            direct = Skills(skillfs.open_store(redis_server.url), AGENT, USER)
            remote = Skills(
                skillfs.open_store(f"grpc://{server.address}", token=ALICE), AGENT, USER
            )
            snap_direct = p50(direct.snapshot, n)
            snap_remote = p50(remote.snapshot, n)
            with grpc.insecure_channel(server.address) as ch:
                stub = pb_grpc.SkillReaderStub(ch)
                view = pb.View(agent_id=AGENT, user_id=USER)
                first = single(stub.Snapshot(pb.SnapshotRequest(view=view), metadata=meta))
                known = pb.SnapshotRequest(view=view, known=first.revisions)
                snap_rpc = p50(lambda: single(stub.Snapshot(known, metadata=meta)), n)
            direct.close()
            remote.close()
        finally:
            server.stop()
            echo.kill()
            echo.wait()

    cmd = "python -m bench.grpc " + shlex.join(a for a in sys.argv[1:] if a != "--write-docs")
    verdict = "meets" if ratio >= TARGET else "MISSES"
    return "\n".join(
        [
            "## gRPC server (`bench/grpc.py`)",
            "",
            f"`{cmd.strip()}` on {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, grpcio {grpc.__version__}; every server in "
            "its own process on loopback, the skillfs server over one local Redis.",
            "",
            f"ReadFile of a 4 KiB file naming its manifest, {THREADS} client threads, "
            f"{seconds:.0f} s each:",
            "",
            "| server | calls/s | p50 |",
            "|---|---:|---:|",
            f"| bare grpcio server, same bytes | {results['echo'][0]:,.0f} | "
            f"{results['echo'][1]:,.0f} µs |",
            f"| skillfs server (token, grants, manifest check, blob cache, metrics) | "
            f"{results['skillfs'][0]:,.0f} | {results['skillfs'][1]:,.0f} µs |",
            "",
            f"Ratio {ratio:.2f}x the bare server's throughput: {verdict} the {TARGET}x target.",
            "",
            f"A worker's per-step snapshot when nothing changed (p50 of {n}):",
            "",
            "| path | p50 |",
            "|---|---:|",
            f"| one bare grpcio call, one thread (the floor of any call) | "
            f"{one_call['echo']:,.0f} µs |",
            f"| one skillfs ReadFile, one thread | {one_call['skillfs']:,.0f} µs |",
            f"| `Skills.snapshot()` directly on Redis | {snap_direct:,.0f} µs |",
            f"| `Skills.snapshot()` through the server (grpc://) | {snap_remote:,.0f} µs |",
            f"| the server's Snapshot RPC, caller's revisions given | {snap_rpc:,.0f} µs |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput run")
    parser.add_argument("--n", type=int, default=2000, help="snapshots timed per path")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--echo", type=int, help=argparse.SUPPRESS)  # the baseline's process
    args = parser.parse_args()
    if args.echo:
        echo_server(args.echo)
        return
    section = run(args.seconds, args.n)
    print(section)
    if args.write_docs:
        common.write_docs("bench/grpc.py", section)


if __name__ == "__main__":
    main()
