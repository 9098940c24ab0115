"""Blob receipts and upload budgets on a skillfs server: an upload never committed cannot be
kept from GC forever by touching it with its receipt, and one token cannot upload without
bound (docs/server.md, "Blobs and hashes")."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs.auth import Tokens
from skillfs.errors import TooLarge
from skillfs.model import Scope
from skillfs.remote.engine import GrpcEngine
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.app import SkillfsServer
from skillfs.server.proofs import UploadBudget
from support.grpc_servers import ADMIN, ALICE, running
from tests.helpers import skill_md

A = Scope.user("support-bot", "alice")
ORPHAN = b"uploaded, never committed\n"
ORPHAN_SHA = hashlib.sha256(ORPHAN).hexdigest()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(f"memory://{uuid.uuid4().hex}", tmp_path) as srv:
        yield srv


def touch(server: SkillfsServer, proof: pb.BlobProof) -> list[pb.BlobProof]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        reply = pb_grpc.SkillAdminStub(ch).TouchBlobs(
            pb.TouchBlobsRequest(blobs=[proof]), metadata=[("authorization", f"Bearer {ALICE}")]
        )
    return list(reply.present)


def test_a_receipt_refreshes_its_blob_only_within_its_life(server: SkillfsServer) -> None:
    now = [1_000_000.0]
    server.tokens.clock = lambda: now[0]
    alice = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ALICE)
    engine = alice.engine
    assert isinstance(engine, GrpcEngine)
    engine.put_blob(ORPHAN_SHA, [ORPHAN], 0.0)
    size, receipt = engine._receipts.get(ORPHAN_SHA) or (0, b"")
    proof = pb.BlobProof(sha256=ORPHAN_SHA, size=size, receipt=receipt)
    # within its life the receipt proves the upload; the touch hands back the same receipt,
    # so touching again and again never extends it
    now[0] += Tokens.RECEIPT_TTL - 60
    (answer,) = touch(server, proof)
    assert answer.receipt == receipt
    now[0] += 120
    assert touch(server, proof) == []
    # uploading the bytes again is proof again, and counts against the token's budget
    engine._receipts.pop(ORPHAN_SHA)
    engine.put_blob(ORPHAN_SHA, [ORPHAN], 0.0)
    assert alice.publish(A, "s", {"SKILL.md": skill_md("s"), "o.md": ORPHAN}).version == 1
    alice.close()


def test_uploads_per_token_are_bounded(
    server: SkillfsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(UploadBudget, "BYTES", 1000)
    url = f"grpc://127.0.0.1:{server.grpc_port}"
    alice = skillfs.open_store(url, token=ALICE)
    alice.engine.put_blob(hashlib.sha256(b"a" * 600).hexdigest(), [b"a" * 600], 0.0)
    big = b"b" * 600
    with pytest.raises(TooLarge, match="budget of 1000 bytes"):
        alice.engine.put_blob(hashlib.sha256(big).hexdigest(), [big], 0.0)
    with pytest.raises(TooLarge, match="budget of 1000 bytes"):
        alice.publish(A, "s", {"SKILL.md": skill_md("s"), "big.md": big})
    assert alice.skills(A) == []
    with skillfs.open_store(url, token=ADMIN) as admin:  # operators are not counted
        admin.publish(A, "s", {"SKILL.md": skill_md("s"), "big.md": big})
    alice.close()
