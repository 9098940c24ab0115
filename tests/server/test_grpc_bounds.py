"""No gRPC message grows with the store (docs/server.md, "Bounded messages"): collections
answered in bounded messages from one read, requests that name many things sent in several
calls, a manifest or a revision's changes larger than a message sent in pieces. The server
and the client here cap every message at 1 MiB; each test passes that cap many times over."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs.api import Store
from skillfs.engines.base import CommitOp
from skillfs.model import FileEntry, Manifest, Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.remote.wire import BUDGET, PROTOCOL_KEY, UNBOUNDED, joined, packed
from skillfs.runtime import Skills
from skillfs.server.app import SkillfsServer
from skillfs.store.retention import HistoryPolicy
from support.grpc_servers import ADMIN, running
from tests.helpers import skill_md

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
MiB = 1024 * 1024


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(f"memory://{uuid.uuid4().hex}", tmp_path) as srv:  # max_message_mib=1
        yield srv


@pytest.fixture
def remote(server: SkillfsServer) -> Iterator[Store]:
    """A client whose own messages are capped at 1 MiB too."""
    url = f"grpc://127.0.0.1:{server.grpc_port}?max_message={MiB}"
    store = skillfs.open_store(url, token=ADMIN)
    yield store
    store.close()


def table(n: int, tag: str = "") -> dict[str, FileEntry]:
    """`n` file rows (~150 bytes of JSON each) naming one blob, which `seed` stores."""
    sha = hashlib.sha256(b"x").hexdigest()
    return {
        f"references/{tag}file-{i:05d}.md": FileEntry(sha256=sha, size=1, mode=0o644, mtime=1.0)
        for i in range(n)
    }


def manifest(skill: str, version: int, files: dict[str, FileEntry]) -> Manifest:
    return Manifest(
        skill=skill,
        version=version,
        commit_id=uuid.uuid4().hex,
        committed_at=time.time(),
        frontmatter={"name": skill, "description": "Does things. Use when testing."},
        files=files,
    )


def seed(server: SkillfsServer, scope: Scope, manifests: list[Manifest]) -> None:
    """Write manifests straight into the server's store, many per commit (fast)."""
    server.store.blobs.put(hashlib.sha256(b"x").hexdigest(), b"x", time.time())
    for i in range(0, len(manifests), 500):
        ops = [
            CommitOp(scope=scope, manifest=m, expect=m.version - 1) for m in manifests[i : i + 500]
        ]
        server.store.engine.commit(scope.domain, ops)


def test_packing_round_trips_and_bounds_every_message() -> None:
    big, small = b"a" * (3 * BUDGET + 7), b"b" * 10
    for items in ([], [small], [small, big, small], [big, big], [small] * 10_000):
        messages = list(packed(items))
        assert messages, "a protocol 1 caller reads exactly one message, even empty"
        assert all(sum(len(i) for i in batch) <= BUDGET for batch, _ in messages)
        assert joined(messages) == items


def test_a_scope_over_the_message_cap_loads_whole(server: SkillfsServer, remote: Store) -> None:
    # 400 skills of 20 files: ~1.3 MB of manifests, over the 1 MiB cap
    seed(server, SHARED, [manifest(f"s{i:03d}", 1, table(20)) for i in range(400)])
    assert len(remote.manifests(SHARED)) == 400
    assert len(remote.manifests(SHARED, [f"s{i:03d}" for i in range(400)])) == 400
    with Skills(remote, AGENT, "alice") as worker:
        assert len(worker.snapshot().skills) == 400
    assert sorted(remote.skills(SHARED)) == [f"s{i:03d}" for i in range(400)]


def test_one_manifest_over_the_cap_is_read_and_committed_in_pieces(
    server: SkillfsServer, remote: Store
) -> None:
    files = {"SKILL.md": skill_md("wide"), **{p: b"x" for p in table(8000)}}
    result = remote.publish(SHARED, "wide", files)  # ~1.2 MB of manifest: a Commit stream
    assert len(remote.manifest(SHARED, "wide").files) == 8001
    remote.publish(SHARED, "wide", {**files, "more.md": b"more"}, result.version)
    assert [v.version for v in remote.versions(SHARED, "wide")] == [2, 1]
    assert len(remote.manifest(SHARED, "wide", version=1).files) == 8001
    assert [m.version for m in remote.history(SHARED, "wide")] == [2, 1]  # whole, streamed
    with Skills(remote, AGENT, "alice") as worker:
        text = worker.snapshot().load("wide")
    assert "… and 7801 more" in text  # SKILL.md's header lists 200 paths, not 8,001


def test_history_over_the_cap_lists_summaries(server: SkillfsServer, remote: Store) -> None:
    # 12 versions of a 1,500-file skill: ~2.7 MB of history
    seed(server, SHARED, [manifest("deep", 1, table(1500))])
    for v in range(2, 13):
        current = server.store.manifest(SHARED, "deep")
        nxt = manifest("deep", v, table(1500, tag=f"v{v}-"))
        server.store.engine.commit(
            SHARED.domain, [CommitOp(scope=SHARED, manifest=nxt, expect=current.version)]
        )
    summaries = remote.versions(SHARED, "deep")
    assert [s.version for s in summaries] == list(range(12, 0, -1))
    assert {s.file_count for s in summaries} == {1500}
    assert len(remote.history(SHARED, "deep")) == 12


def test_usage_and_audit_over_the_cap(server: SkillfsServer, remote: Store) -> None:
    counts = {(f"user{i}", f"skill-{i % 100}"): 1 for i in range(30_000)}  # ~1.4 MB
    remote.usage.record(AGENT, counts)  # sent in several calls
    assert len(remote.usage.detail(AGENT)) == 30_000  # read in bounded messages
    seed(server, SHARED, [manifest(f"a{i:04d}", 1, table(1)) for i in range(3000)])
    assert len(remote.governance.audit(AGENT, limit=5000)) == 3000


def test_a_commit_of_many_skills_reaches_a_remote_follower(
    server: SkillfsServer, remote: Store
) -> None:
    """One commit whose changes pass a message (500 skills, a 4,000-character message each):
    a grpc:// worker's watch gets them in pieces and sees all of them at one revision."""
    first = remote.publish(SHARED, "first", {"SKILL.md": skill_md("first")})
    with Skills(remote, AGENT, "alice") as worker:
        assert len(worker.snapshot().skills) == 1
        remote.commit(
            [skillfs.Put(SHARED, f"m{i:03d}", {"SKILL.md": skill_md(f"m{i:03d}")})
             for i in range(500)],
            options=skillfs.WriteOptions(message="m" * 4000),
        )  # fmt: skip
        assert len(worker.snapshot().skills) == 501
    changes = list(remote.changes.follow(AGENT, since=first.revision, timeout=2))
    assert len(changes) == 500 and all(c.message == "m" * 4000 for c in changes)


def test_a_commit_landing_during_a_streamed_read_is_not_in_it(
    server: SkillfsServer, remote: Store
) -> None:
    seed(server, SHARED, [manifest(f"s{i:03d}", 1, table(40)) for i in range(300)])
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = pb_grpc.SkillReaderStub(channel)
        meta = (("authorization", f"Bearer {ADMIN}"), (PROTOCOL_KEY, "2"))
        stream = stub.GetManifests(
            pb.GetManifestsRequest(scope=str(SHARED), whole_scope=True), metadata=meta
        )
        first = next(stream)
        remote.publish(SHARED, "late", {"SKILL.md": skill_md("late")})  # lands mid-stream
        rest = list(stream)
    messages = [first, *rest]
    assert len(messages) > 1, "several messages: the read spans the commit"
    names = {
        Manifest.from_json(b).skill
        for b in joined((m.manifests_json, m.continued) for m in messages)
    }
    assert len(names) == 300 and "late" not in names  # one read, before the commit


def test_a_client_falls_back_on_a_server_of_protocol_1(
    server: SkillfsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server before bounded messages answers in one message, knows no summaries and takes a
    commit in one message; a new client reads and writes through it all the same."""
    from skillfs.server import admin, reader, watching

    def old_budget(context: object) -> int:
        return UNBOUNDED

    for module in (admin, reader, watching):
        monkeypatch.setattr(module, "budget", old_budget)
    monkeypatch.setattr(reader.wire, "PROTOCOL", 0)  # Ping answers no protocol
    seed(server, SHARED, [manifest(f"s{i:03d}", 1, table(20)) for i in range(50)])
    old = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN)
    try:
        assert len(old.manifests(SHARED)) == 50
        old.publish(SHARED, "p", {"SKILL.md": skill_md("p")})
        old.publish(SHARED, "p", {"SKILL.md": skill_md("p", "two")})
        assert old.engine.protocol == 1  # type: ignore[attr-defined]  # grpc:// only
        assert [v.version for v in old.versions(SHARED, "p")] == [2, 1]
        assert old.read(SHARED, "p", "SKILL.md", version=1) == skill_md("p")
    finally:
        old.close()


@pytest.mark.slow
def test_past_16_mib_a_scope_and_a_history_through_grpc(
    server: SkillfsServer, remote: Store, tmp_path: Path
) -> None:
    """The outside tester's case: 9,000 ordinary skills of 10 files (18 MB of manifests) in
    the shared scope, and a skill whose kept history passes 16 MiB; every grpc:// surface
    still works, and a publish on top is reported as what it is."""
    import fsspec
    from typer.testing import CliRunner

    from skillfs.cli.app import app

    seed(server, SHARED, [manifest(f"s{i:04d}", 1, table(10, f"{i}-")) for i in range(9000)])
    url = f"grpc://127.0.0.1:{server.grpc_port}"
    with Skills(remote, AGENT, "alice") as worker:
        assert len(worker.snapshot().skills) == 9000
    fs = fsspec.filesystem(
        "skillfs", store=url, agent_id=AGENT, token=ADMIN, base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip
    assert len(fs.ls("skills", detail=False)) == 9000
    listed = CliRunner().invoke(
        app, ["ls", "--scope", str(SHARED), "--store", url, "--token", ADMIN, "--json"]
    )
    assert listed.exit_code == 0, listed.output
    # 30 versions of a 4,000-file skill: ~19 MB of history
    seed(server, ALICE, [manifest("deep", 1, table(4000))])
    for v in range(2, 31):
        nxt = manifest("deep", v, table(4000, tag=f"v{v}-"))
        server.store.engine.commit(
            ALICE.domain, [CommitOp(scope=ALICE, manifest=nxt, expect=v - 1)]
        )
    assert [s.version for s in remote.versions(ALICE, "deep")][:3] == [30, 29, 28]
    history = CliRunner().invoke(
        app, ["history", "deep", "--scope", str(ALICE), "--store", url, "--token", ADMIN]
    )
    assert history.exit_code == 0, history.output
    files = {"SKILL.md": skill_md("deep"), "one.md": b"one"}
    pruning = skillfs.open_store(
        f"{url}?max_message={MiB}",
        token=ADMIN,
        history_policy=HistoryPolicy(keep_versions=10, keep_days=0),
    )
    result = pruning.publish(ALICE, "deep", files, expected_version=30)  # then retention
    assert result.version == 31 and remote.manifest(ALICE, "deep").version == 31
    assert len(remote.versions(ALICE, "deep")) == 11  # the live one and the ten it keeps
    pruning.close()
