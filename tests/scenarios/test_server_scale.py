"""Horizontal scale: three `skillfs serve` processes over one Redis and over one etcd.

A publish through server 1 is in the next read through server 3, every round (C3 across
servers: they cache nothing that could be stale), and killing a server while clients stream
leaves `grpc://` clients working through the others, with nothing skipped (C8)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs.model import Change, Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.runtime import Skills
from support.grpc_servers import ADMIN, ALICE, ServerProcess, single, wait_health
from tests.stores import url_for

AGENT = "support-bot"
A = Scope.user(AGENT, "alice")
SHARED = Scope.shared(AGENT)
ROUNDS = 100


def files(n: int) -> dict[str, bytes]:
    md = f"---\nname: s\ndescription: Version {n}. Use when testing.\n---\n\nversion {n}\n"
    return {"SKILL.md": md.encode(), "references/r.md": f"v{n}\n".encode()}


@pytest.fixture(params=["redis", "etcd"])
def servers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    store_url = url_for(request, request.param, tmp_path)
    procs = [ServerProcess(store_url, tmp_path / f"s{i}") for i in range(3)]
    for p in procs:
        p.start(wait=False)
    try:
        for p in procs:
            wait_health(p.address, "SERVING", timeout=30)
        yield procs
    finally:
        for p in procs:
            p.stop()


@pytest.mark.slow
def test_publish_through_one_is_read_through_another(servers: list[ServerProcess]) -> None:
    one, _, three = servers
    writer = skillfs.open_store(f"grpc://{one.address}", token=ALICE)
    reader = skillfs.open_store(f"grpc://{three.address}", token=ALICE)
    worker = Skills(reader, AGENT, "alice")
    with grpc.insecure_channel(three.address) as ch:
        rpc = pb_grpc.SkillReaderStub(ch)
        view = pb.View(agent_id=AGENT, user_id="alice")
        meta = [("authorization", f"Bearer {ALICE}")]
        stale = []
        for n in range(1, ROUNDS + 1):
            c = writer.publish(A, "s", files(n))
            m = reader.manifest(A, "s")  # a read through server 3
            snap = worker.snapshot()  # the runtime through server 3
            served = single(
                rpc.Snapshot(pb.SnapshotRequest(view=view), metadata=meta)
            )  # its snapshot
            got = (m.version, snap.skill("s").version, served.skills[0].version)
            if got != (c.version,) * 3:
                stale.append((n, c.version, got))
            if n % 25 == 0:  # and the file bytes of that version, through either side
                assert snap.read_bytes("s", "references/r.md") == f"v{n}\n".encode()
                prompt = single(rpc.Prompt(pb.PromptRequest(view=view), metadata=meta)).prompt
                assert f"Version {n}." in prompt
        assert not stale, stale[:5]
    worker.close()


@pytest.mark.slow
def test_killing_a_server_mid_stream_leaves_clients_working(
    servers: list[ServerProcess],
) -> None:
    addresses = ",".join(p.address for p in servers)
    writer = skillfs.open_store(f"grpc://{addresses}", token=ADMIN)
    follower = skillfs.open_store(f"grpc://{addresses}", token=ALICE)
    worker = Skills(skillfs.open_store(f"grpc://{addresses}", token=ALICE), AGENT, "alice")
    since = writer.publish(A, "s", files(0)).revision
    seen: list[Change] = []
    stop = threading.Event()

    def follow() -> None:
        for change in follower.changes.follow(AGENT, since=since, stop=stop, poll=0.5):
            seen.append(change)

    t = threading.Thread(target=follow)
    t.start()
    versions = []
    try:
        for n in range(1, 61):
            if n == 20:
                servers[1].kill()  # mid-stream: the follower and the worker hold streams to it
            if n == 40:
                servers[0].kill()
            versions.append(writer.publish(A, "s", files(n)).version)
            assert worker.snapshot().skill("s").version == versions[-1]
        deadline = time.monotonic() + 20
        while len(seen) < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(10)
    assert [c.version for c in seen if c.op == "put"] == versions  # in order, nothing skipped
    assert worker.snapshot().read_bytes("s", "references/r.md") == b"v60\n"
    worker.close()
