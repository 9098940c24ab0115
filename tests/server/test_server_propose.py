"""The `propose` grant (docs/server.md, docs/governance.md): a token that may write drafts
(`_drafts/<name>`) and nothing live, enforced by a real server on Commit, Publish, Delete,
Rollback and DropHistory; every refused request writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs import Put, Scope
from skillfs.auth import Grant, Level
from skillfs.errors import PermissionDenied
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.app import SkillfsServer
from tests.helpers import skill_files as files
from tests.helpers import skill_md, token_server
from tests.stores import url_for

SHARED = Scope.shared("support-bot")
ALICE = Scope.user("support-bot", "alice")
ADMIN = "propose-admin-token-0123456789abcdef"
PROPOSER = "propose-agent-token-0123456789abcdef"
READER = "propose-reader-token-0123456789abcdef"
TOKENS = [
    ("admin", ADMIN, ["*:admin"]),
    ("agent", PROPOSER, ["agent:support-bot/shared:propose", "agent:support-bot/user:*:read"]),
    ("reader", READER, ["*:read"]),
]


@pytest.fixture(params=["memory", "redis", "etcd"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SkillfsServer]:
    with token_server(url_for(request, request.param, tmp_path), tmp_path, TOKENS) as srv:
        yield srv


def open_as(server: SkillfsServer, token: str) -> skillfs.Store:
    return skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=token)


def test_propose_grant_parses_between_read_and_write() -> None:
    g = Grant.parse("agent:support-bot/shared:propose")
    assert g.level == Level.propose and Level.read < Level.propose < Level.write


def test_a_propose_token_writes_drafts_and_nothing_live(server: SkillfsServer) -> None:
    admin, agent = open_as(server, ADMIN), open_as(server, PROPOSER)
    admin.publish(SHARED, "live", files("live"))
    access = agent.access(SHARED)
    assert access.read and access.propose and not access.write
    done = agent.drafts.propose(
        SHARED,
        "live",
        files("live", "better"),
        options=skillfs.WriteOptions(message="from the agent"),
    )
    assert done.versions == {"_drafts/live": 1}
    assert admin.manifest(SHARED, "_drafts/live").actor == "agent"
    agent.drafts.propose(
        SHARED, "live", files("live", "best"), options=skillfs.WriteOptions(expected_version=1)
    )  # reuses blobs
    rev = admin.revision("support-bot")
    refused = {
        "publish": lambda: agent.publish(SHARED, "live", files("live", "pwned")),
        "delete": lambda: agent.delete(SHARED, "live"),
        "rollback": lambda: agent.rollback(SHARED, "live", 1),
        "approve": lambda: agent.drafts.approve(SHARED, "live"),
        "archive": lambda: agent.archive.add(SHARED, "live"),
        "disable": lambda: agent.governance.disable(SHARED, "live"),
        "a draft and a live skill": lambda: agent.commit(
            [Put(SHARED, "_drafts/x", files("x")), Put(SHARED, "x", files("x"))]
        ),
        "another scope": lambda: agent.drafts.propose(ALICE, "x", files("x")),
    }
    for what, call in refused.items():
        with pytest.raises(PermissionDenied, match=r"may not (write|propose)"):
            call()
        assert admin.revision("support-bot") == rev, what
    with pytest.raises(PermissionDenied, match="not even drafts"):
        open_as(server, READER).drafts.propose(SHARED, "y", files("y"))
    with pytest.raises(PermissionDenied, match="may not propose"):  # its blobs are stored
        open_as(server, READER).drafts.propose(SHARED, "live", files("live", "best"))
    assert (
        admin.skills(SHARED) == ["live"]
        and "body" in admin.read(SHARED, "live", "SKILL.md").decode()
    )
    admin.drafts.approve(SHARED, "live", options=skillfs.WriteOptions(expected_version=2))
    assert b"best" in admin.read(SHARED, "live", "SKILL.md")
    agent.drafts.propose(SHARED, "other", files("other"))
    agent.drafts.reject(SHARED, "other", reason="changed my mind")  # a draft: its own to remove
    assert admin.drafts.list(SHARED) == []


def test_publish_rpc_takes_the_level_of_the_entry(server: SkillfsServer) -> None:
    def publish(skill: str) -> pb.CommitResult:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            stub = pb_grpc.SkillAdminStub(ch)
            header = pb.PublishHeader(scope=str(SHARED), skill=skill, force=True)
            messages = [
                pb.PublishRequest(header=header),
                pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=skill_md("p"))),
            ]
            return stub.Publish(iter(messages), metadata=[("authorization", f"Bearer {PROPOSER}")])

    assert publish("_drafts/p").versions == {"_drafts/p": 1}
    with pytest.raises(grpc.RpcError) as err:
        publish("p")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    admin = open_as(server, ADMIN)
    assert admin.skills(SHARED) == [] and [d.name for d in admin.drafts.list(SHARED)] == ["p"]
    assert admin.manifest(SHARED, "_drafts/p").base_version == 0
