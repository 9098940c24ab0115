"""The per-step revision check on the server (docs/server.md, "The serving model"): calls
that arrive while a store read is out share the next read, and every answer comes from a
read that began after its call arrived, so an acknowledged write is always seen (C3)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs.model import Revision, Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.revisions import PACE, SharedReads
from support.grpc_servers import ADMIN, running
from tests.stores import url_for

DOMAIN = "agents/support-bot"
SHARED = Scope.shared("support-bot")


def test_calls_arriving_during_a_read_wait_for_the_next_one() -> None:
    """A read out when a call arrives may predate a write the caller saw acknowledged: the
    call is answered by the next read, which starts after it, together with the others."""
    counter = 0
    started: list[int] = []  # the counter each read saw when it began

    async def scenario() -> list[int]:
        nonlocal counter
        gate, began = asyncio.Event(), asyncio.Event()

        async def read(domains: Sequence[str]) -> dict[str, Revision | None]:
            seen = counter
            started.append(seen)
            began.set()
            await gate.wait()
            return {d: Revision(epoch="e", counter=seen) for d in domains}

        shared = SharedReads(read)
        first = asyncio.ensure_future(shared.revisions([DOMAIN]))
        await began.wait()
        counter = 1  # a write acknowledged after the first read began
        later = [asyncio.ensure_future(shared.revisions([DOMAIN])) for _ in range(20)]
        await asyncio.sleep(0)
        gate.set()
        answers = await asyncio.gather(first, *later)
        assert shared.reads == 2  # one for the first call, one shared by the twenty after it
        return [a[DOMAIN].counter for a in answers if a[DOMAIN] is not None]

    got = asyncio.run(scenario())
    assert started == [0, 1]
    assert got == [0] + [1] * 20  # every later call sees the write made before it arrived


@pytest.mark.serial
def test_reads_begin_at_most_once_per_pace_and_an_idle_call_reads_at_once() -> None:
    """A busy server's calls wait for the next read, begun at most once per PACE after the last
    (so more calls share each read); a call that finds the last read long past reads at once.
    Every read still begins after the calls it answers arrived (C3)."""
    pace = 0.05

    async def scenario() -> tuple[list[float], list[float], float, list[int]]:
        loop = asyncio.get_running_loop()
        began: list[float] = []
        arrived: list[float] = []
        answered: list[int] = []  # by which read, in the order the calls arrived

        async def read(domains: Sequence[str]) -> dict[str, Revision | None]:
            began.append(loop.time())
            return {d: Revision(epoch="e", counter=len(began)) for d in domains}

        shared = SharedReads(read, pace)

        async def call() -> None:
            arrived.append(loop.time())
            k = len(answered)
            answered.append(0)
            rev = (await shared.revisions([DOMAIN]))[DOMAIN]
            assert rev is not None
            answered[k] = rev.counter

        calls = []
        for _ in range(10):  # a call every 10 ms, for 100 ms
            calls.append(asyncio.ensure_future(call()))
            await asyncio.sleep(0.01)
        await asyncio.gather(*calls)
        await asyncio.sleep(2 * pace)
        idle = loop.time()
        await call()  # long after the last read: at once
        return began, arrived, idle, answered

    began, arrived, idle, answered = asyncio.run(scenario())
    assert all(began[n - 1] >= at for n, at in zip(answered, arrived, strict=True))
    # Not one read per call: the ten calls share one read per PACE of their arrival span, plus
    # the first and the one after the last (the span is 90 ms unless the loop runs late).
    reads_for_ten = len(set(answered[:10]))
    assert reads_for_ten <= 2 + (arrived[9] - arrived[0]) / pace
    assert reads_for_ten < 10
    gaps = [b - a for a, b in itertools.pairwise(began)]
    assert all(g >= pace * 0.99 for g in gaps)
    assert began[-1] - idle < pace / 2  # the idle call did not wait out a pace
    assert began[0] - arrived[0] < pace / 2  # nor did the first


@pytest.fixture(params=["memory", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, request.param, tmp_path)


@pytest.mark.serial
def test_concurrent_revisions_calls_share_store_reads_and_see_every_write(
    url: str, tmp_path: Path
) -> None:
    with running(url, tmp_path) as server:
        writer = skillfs.open_store(url)  # straight to the store, past the server
        meta = [("authorization", f"Bearer {ADMIN}")]

        async def burst() -> list[int]:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                stub = pb_grpc.SkillReaderStub(channel)
                request = pb.RevisionsRequest(domains=[DOMAIN])
                got = []
                for n in range(5):
                    rev = writer.publish(SHARED, "s", {"SKILL.md": md(n)}).revision
                    replies = await asyncio.gather(
                        *(stub.Revisions(request, metadata=meta) for _ in range(50))
                    )
                    got += [r.revisions[DOMAIN].counter - rev.counter for r in replies]
                return got

        engine = server.store.engine  # the store reads the calls make, counted at the engine
        reads: list[int] = []
        original = engine.revisions

        def revisions(domains: Sequence[str]) -> dict[str, Revision | None]:
            reads.append(len(domains))
            return original(domains)

        engine.revisions = revisions  # type: ignore[method-assign]
        began = time.monotonic()
        behind = asyncio.run(burst())
        elapsed = time.monotonic() - began
        assert min(behind) >= 0  # no answer older than the write acknowledged before the call
        # 250 calls in bursts of 50 share reads: about two calls a read or more (CI's most
        # loaded run: 51 reads; make test's serial lane beside a loaded parallel one: 143),
        # and at most one begun per PACE (plus each burst's first). How many depends on how
        # spread out the server takes the calls in, which a loaded machine stretches, so no
        # tighter count is asserted than that they share.
        assert 0 < len(reads) <= 175, len(reads)
        assert len(reads) <= 5 + elapsed / PACE, (len(reads), elapsed)
        writer.close()


def md(n: int) -> bytes:
    return f"---\nname: s\ndescription: Edition {n}. Use when testing.\n---\n".encode()
