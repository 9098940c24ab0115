"""Small blobs go to a skillfs server in UploadBlobs batches (docs/server.md, "Blobs and
hashes"): every message under the test servers' 1 MiB cap, big blobs alone through UploadBlob;
each blob of a batch held to UploadBlob's rules (the token's quota charged before the bytes
are read, the receipt naming the domain charged, the SHA-256 checked, nothing of a bad batch
stored); a server without UploadBlobs (before 0.2) gets UploadBlob per blob, remembered."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs.errors import QuotaExceeded
from skillfs.model import FileEntry, Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.admin import Admin
from skillfs.server.app import SkillfsServer
from skillfs.store.limits import Limits
from support.grpc_servers import ADMIN, ALICE, running
from tests.helpers import skill_md

pytestmark = pytest.mark.server  # a skillfs server in this process, over SQLite

KiB = 1024
MiB = 1024 * KiB
DOMAIN = "agents/support-bot"
TOKEN = "token:alice"
SHARED = Scope.shared("support-bot")


def blob(tag: str, size: int) -> tuple[str, bytes]:
    data = tag.encode().ljust(size, b".")
    return hashlib.sha256(data).hexdigest(), data


def calls(server: SkillfsServer, method: str, code: str = "OK") -> int:
    sample = server.metrics.registry.get_sample_value(
        "skillfs_grpc_requests_total", {"method": method, "code": code}
    )
    return int(sample or 0)


def client(server: SkillfsServer, token: str) -> skillfs.Store:
    """A grpc:// store whose messages are capped at 1 MiB, as the server's are."""
    url = f"grpc://127.0.0.1:{server.grpc_port}?max_message={MiB}"
    return skillfs.open_store(url, token=token)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'skills.db'}"


@pytest.fixture
def server(db: str, tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(db, tmp_path / "server", http=None, limits=Limits(token_quota=40_000)) as s:
        yield s


def charged(db: str) -> int:
    with skillfs.open_store(db) as store:
        return (store.engine.quota_used(DOMAIN) or {}).get(TOKEN, 0)


def held(db: str, shas: list[str]) -> set[str]:
    with skillfs.open_store(db) as store:
        return store.engine.touch_blobs(shas, 0.0)


def test_blobs_of_mixed_sizes_go_in_batches_under_a_1_mib_cap(
    server: SkillfsServer, db: str
) -> None:
    """600 tiny blobs (two batches: at most 500 blobs a call), 30 of 200 KiB (6 MB: split by
    the 4 MiB a call carries at most) and two over 256 KiB, one of them over the 1 MiB cap
    (each alone, in pieces)."""
    blobs = dict(blob(f"tiny-{i}", 100) for i in range(600))
    blobs.update(blob(f"mid-{i}", 200 * KiB) for i in range(30))
    blobs.update([blob("big", 300 * KiB), blob("huge", MiB + MiB // 2)])
    with client(server, ADMIN) as admin:
        admin.blobs.upload(blobs, set(), time.time())
    # 500 tiny; 100 tiny and 20 x 200 KiB (4 MiB at most a call); 10 x 200 KiB
    assert calls(server, "UploadBlobs") == 3
    assert calls(server, "UploadBlob") == 2
    assert held(db, list(blobs)) == set(blobs)
    with skillfs.open_store(db) as store:
        entries = [
            FileEntry(sha256=sha, size=len(data), mode=0o644, mtime=0.0)
            for sha, data in blobs.items()
        ]
        assert store.blobs.read_many(entries) == blobs


def test_a_batch_is_charged_to_the_token_before_its_bytes_are_read(
    server: SkillfsServer, db: str
) -> None:
    within = dict(blob(f"paid-{i}", 6_000) for i in range(5))  # 30,000 of 40,000
    past = dict(blob(f"over-{i}", 6_000) for i in range(3))  # 18,000 more: over
    with client(server, ALICE) as alice:
        alice.engine.put_blobs({s: [d] for s, d in within.items()}, 0.0, DOMAIN)
        for sha in within:  # each receipt says the upload was paid in the agent
            size, receipt = alice.engine._receipts.get(sha)
            assert size == 6_000 and receipt.endswith(DOMAIN.encode())
        assert charged(db) == 30_000
        with pytest.raises(QuotaExceeded, match="this upload adds 18000; nothing was written"):
            alice.engine.put_blobs({s: [d] for s, d in past.items()}, 0.0, DOMAIN)
    assert held(db, list(past)) == set()
    assert charged(db) == 30_000


def refused_batch(
    server: SkillfsServer, messages: list[pb.UploadBlobsRequest], token: str = ALICE
) -> grpc.RpcError:
    """The error a raw UploadBlobs call of `messages` gets (it must fail)."""
    with (
        grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        pb_grpc.SkillAdminStub(channel).UploadBlobs(
            iter(messages), metadata=[("authorization", f"Bearer {token}")]
        )
    return refused.value


def test_a_batch_past_the_quota_is_refused_on_its_first_message_alone(
    server: SkillfsServer, db: str
) -> None:
    """No byte is sent: a server that read the bytes before charging would answer that the
    stream ended short (INVALID_ARGUMENT), not that the quota refuses them."""
    past = [blob(f"unsent-{i}", 6_000) for i in range(7)]  # 42,000 of a 40,000 quota
    first = pb.UploadBlobsRequest(
        blobs=[pb.BlobSize(sha256=s, size=len(d)) for s, d in past], domain=DOMAIN
    )
    refused = refused_batch(server, [first])
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "this upload adds 42000" in (refused.details() or "")
    assert held(db, [s for s, _ in past]) == set()
    assert charged(db) == 0


def test_a_bad_blob_in_a_batch_stores_nothing_of_it_and_gives_the_charge_back(
    server: SkillfsServer, db: str
) -> None:
    batch = [blob(f"b{i}", 1_000) for i in range(3)]
    sent = [d if i != 1 else d.replace(b".", b"!") for i, (_, d) in enumerate(batch)]
    first = pb.UploadBlobsRequest(
        blobs=[pb.BlobSize(sha256=s, size=len(d)) for s, d in batch], domain=DOMAIN
    )
    refused = refused_batch(server, [first, pb.UploadBlobsRequest(data=b"".join(sent))])
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    said = refused.details() or ""
    assert f"blob 2 of 3 {batch[1][0]} do not hash to it; nothing was stored" in said
    assert held(db, [s for s, _ in batch]) == set()
    deadline = time.monotonic() + 5  # the refund is not awaited by the call
    while charged(db) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert charged(db) == 0


@pytest.mark.parametrize(
    ("blobs", "said"),
    [
        ([("a" * 64, 10)] * 501, "UploadBlobs names 501 blobs: at most 500 per call"),
        ([("a" * 64, 3 * MiB), ("b" * 64, 2 * MiB)], "at most 4194304 per call"),
        ([], "name the blobs (sha256, size) in the first message"),
    ],
)
def test_a_batch_out_of_bounds_is_refused_before_its_bytes(
    server: SkillfsServer, blobs: list[tuple[str, int]], said: str
) -> None:
    first = pb.UploadBlobsRequest(blobs=[pb.BlobSize(sha256=s, size=n) for s, n in blobs])
    assert said in (refused_batch(server, [first], ADMIN).details() or "")


def test_a_server_without_upload_blobs_gets_one_upload_per_blob(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server before 0.2 answers UNIMPLEMENTED (forced here): the client falls back on
    UploadBlob per blob and remembers it for that server."""
    asked: list[int] = []

    async def unimplemented(
        self: Admin, request: object, context: grpc.aio.ServicerContext
    ) -> None:
        asked.append(1)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    monkeypatch.setattr(Admin, "UploadBlobs", unimplemented)
    with running(db, tmp_path / "old", http=None) as old, client(old, ALICE) as alice:
        first = dict(blob(f"one-{i}", 50) for i in range(4))
        second = dict(blob(f"two-{i}", 50) for i in range(3))
        alice.engine.put_blobs({s: [d] for s, d in first.items()}, 0.0, DOMAIN)
        alice.engine.put_blobs({s: [d] for s, d in second.items()}, 0.0, DOMAIN)
        assert asked == [1]  # asked once, then remembered
        assert calls(old, "UploadBlob") == 7
        assert all(alice.engine._receipts.get(s) is not None for s in [*first, *second])
    assert held(db, [*first, *second]) == {*first, *second}


def test_a_skill_of_2000_small_files_is_uploaded_in_four_calls(
    server: SkillfsServer, db: str
) -> None:
    """The case that made 2,001 UploadBlob calls (~1.5 ms each of client and server CPU)."""
    files = {"SKILL.md": skill_md("many-files")}
    files.update({f"references/note-{i:04d}.md": b"note %d\n" % i for i in range(1999)})
    with client(server, ADMIN) as admin:
        admin.publish(SHARED, "many-files", files)
    assert calls(server, "UploadBlobs") == 4 and calls(server, "UploadBlob") == 0
    with skillfs.open_store(db) as store:
        m = store.manifest(SHARED, "many-files")
        stored = store.blobs.read_many(m.files.values())
        assert {path: stored[e.sha256] for path, e in m.files.items()} == files


def test_a_retried_upload_sends_only_the_batches_that_did_not_land(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second of two batches fails (the server goes away): the store's retry sends that
    batch again, not the first, which was stored and charged (twice its bytes would pass the
    token's quota)."""
    original = Admin.UploadBlobs
    seen: list[int] = []

    async def flaky(self: Admin, request: object, context: grpc.aio.ServicerContext) -> object:
        seen.append(len(seen) + 1)
        if len(seen) == 2:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")
        return await original(self, request, context)

    monkeypatch.setattr(Admin, "UploadBlobs", flaky)
    blobs = dict(blob(f"r{i}", 50) for i in range(600))  # 30,000 bytes of a 40,000 quota
    limits = Limits(token_quota=40_000)
    with running(db, tmp_path / "s", http=None, limits=limits) as s, client(s, ALICE) as alice:
        alice.blobs.upload(blobs, set(), time.time(), DOMAIN)
        assert seen == [1, 2, 3]
    assert held(db, list(blobs)) == set(blobs)
    assert charged(db) == 30_000
