"""Uploads count against a token's quota fleet-wide (docs/security.md, "Quotas"): an
`UploadBlob` is charged to the token's persisted counter in its domain before its bytes are
read, so servers sharing a store cannot together admit more than the quota; a commit of an
uploaded blob does not charge the token for it again (its receipt says it was paid); GC's
recount forgets uploads never committed; a client that names no domain (before 0.2) is
charged in the domain of its token's first write grant."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs.errors import PermissionDenied, QuotaExceeded
from skillfs.model import Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.app import SkillfsServer
from skillfs.store.limits import Limits
from support.grpc_servers import ALICE, running
from tests.helpers import skill_md
from tests.stores import url_for

AGENT = "support-bot"
DOMAIN = f"agents/{AGENT}"
MINE = Scope.user(AGENT, "alice")
QUOTA = 20_000
TOKEN = "token:alice"


def blob(tag: str, size: int = 6_000) -> tuple[str, bytes]:
    data = tag.encode().ljust(size, b".")
    return hashlib.sha256(data).hexdigest(), data


@pytest.fixture
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the servers share: SQLite unless the test names another engine."""
    return url_for(request, getattr(request, "param", "sqlite"), tmp_path)


@pytest.fixture
def servers(db: str, tmp_path: Path) -> Iterator[list[SkillfsServer]]:
    """Two servers over one store, as a fleet runs them."""
    limits = Limits(token_quota=QUOTA)
    with (
        running(db, tmp_path / "one", http=None, limits=limits) as one,
        running(db, tmp_path / "two", http=None, limits=limits) as two,
    ):
        yield [one, two]


def client(server: SkillfsServer) -> skillfs.Store:
    return skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ALICE)


def charged(db: str) -> int:
    """What the store's counter of alice's token holds in the agent."""
    with skillfs.open_store(db) as store:
        return (store.engine.quota_used(DOMAIN) or {}).get(TOKEN, 0)


@pytest.mark.parametrize("db", ["sqlite", "redis", "etcd"], indirect=True)
def test_two_servers_cannot_together_admit_more_uploads_than_the_quota(
    servers: list[SkillfsServer], db: str
) -> None:
    clients = [client(s) for s in servers]
    try:
        for i in range(3):  # 18,000 of 20,000 bytes, through both servers
            sha, data = blob(f"b{i}")
            clients[i % 2].engine.put_blob(sha, [data], 0.0)
        sha, data = blob("b3")
        for c in clients:  # neither server admits a fourth: the counter is the store's
            with pytest.raises(QuotaExceeded) as refused:
                c.engine.put_blob(sha, [data], 0.0)
            said = str(refused.value)
            assert said.startswith(f"quota of token 'alice' in {DOMAIN} exceeded: it holds 18000")
            assert "this upload adds 6000; nothing was written" in said
            assert "quota_bytes" in said
        assert charged(db) == 18_000
        with skillfs.open_store(db) as store:
            assert store.engine.touch_blobs([sha], 0.0) == set()  # never stored
    finally:
        for c in clients:
            c.close()


def test_an_upload_then_a_commit_of_it_charges_the_token_once(
    servers: list[SkillfsServer], db: str
) -> None:
    sha, data = blob("data", 10_000)
    with client(servers[0]) as alice:
        alice.engine.put_blob(sha, [data], 0.0)
        receipt = alice.engine._receipts.get(sha)
        assert charged(db) == 10_000
    # committed through the other server, by a client that holds the receipt, which says
    # the upload was paid in this agent
    with client(servers[1]) as alice:
        alice.engine._receipts.put(sha, receipt)
        alice.publish(MINE, "one", {"SKILL.md": skill_md("one"), "data.bin": data})
    with skillfs.open_store(db) as store:
        used = store.engine.quota_used(DOMAIN) or {}
        assert used[TOKEN] == used[f"scope:{MINE}"]  # each blob once, the manifest once
        store.gc(grace=3600)
        assert (store.engine.quota_used(DOMAIN) or {})[TOKEN] == used[TOKEN]  # GC agrees


def test_gc_recount_forgets_uploads_never_committed(servers: list[SkillfsServer], db: str) -> None:
    sha, data = blob("orphan")
    with client(servers[0]) as alice:
        alice.engine.put_blob(sha, [data], 0.0)
        alice.publish(MINE, "one", {"SKILL.md": skill_md("one")})
    with skillfs.open_store(db) as store:
        before = charged(db)
        assert before > 6_000
        store.gc(grace=3600)  # the blob is within its grace: kept, but no longer counted
        assert charged(db) == before - 6_000
        assert store.engine.touch_blobs([sha], 0.0) == {sha}
        store.gc(grace=0)
        assert store.engine.touch_blobs([sha], 0.0) == set()


def test_an_old_client_that_names_no_domain_still_uploads(
    servers: list[SkillfsServer], db: str
) -> None:
    """A header without the domain (a client before 0.2) is charged in the domain of the
    token's first write grant (alice's: agent:support-bot/user:alice:write)."""
    sha, data = blob("old")
    header = pb.UploadBlobHeader(sha256=sha, size=len(data))
    with grpc.insecure_channel(f"127.0.0.1:{servers[0].grpc_port}") as channel:
        reply = pb_grpc.SkillAdminStub(channel).UploadBlob(
            iter([pb.UploadBlobRequest(header=header), pb.UploadBlobRequest(data=data)]),
            metadata=[("authorization", f"Bearer {ALICE}")],
        )
    assert reply.receipt.endswith(DOMAIN.encode())
    assert charged(db) == 6_000
    with (  # a domain the token may not write in is named in vain
        client(servers[0]) as alice,
        pytest.raises(PermissionDenied, match="may write nothing in agents/other"),
    ):
        alice.engine.put_blob(sha, [data], 0.0, "agents/other")
    with client(servers[1]) as alice:  # and the receipt proves the blob to a commit
        alice.engine._receipts.put(sha, (len(data), reply.receipt))
        alice.publish(MINE, "old", {"SKILL.md": skill_md("old"), "old.bin": data})
    with skillfs.open_store(db) as store:
        used = store.engine.quota_used(DOMAIN) or {}
        assert used[TOKEN] == used[f"scope:{MINE}"]


def test_a_publish_past_the_quota_stores_none_of_its_bytes(
    servers: list[SkillfsServer], db: str
) -> None:
    """`Publish` sends the bytes with the commit: the server's store charges the token for
    the blobs it lacks before writing them, so a publish past the quota leaves nothing
    behind that no counter holds (before, its blobs were written, then its commit refused)."""
    sha, data = blob("filler", 15_000)
    with client(servers[0]) as alice:
        alice.engine.put_blob(sha, [data], 0.0)
    big = b"x" * 10_000
    header = pb.PublishHeader(scope=str(MINE), skill="big", force=True)
    messages = [
        pb.PublishRequest(header=header),
        pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=skill_md("big"))),
        pb.PublishRequest(file=pb.PublishFile(path="big.bin", data=big)),
    ]
    with (
        grpc.insecure_channel(f"127.0.0.1:{servers[1].grpc_port}") as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        pb_grpc.SkillAdminStub(channel).Publish(
            iter(messages), metadata=[("authorization", f"Bearer {ALICE}")]
        )
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "quota of token 'alice'" in (refused.value.details() or "")
    with skillfs.open_store(db) as store:
        assert store.engine.touch_blobs([hashlib.sha256(big).hexdigest()], 0.0) == set()
        assert store.skills(MINE) == []
    assert charged(db) == 15_000
