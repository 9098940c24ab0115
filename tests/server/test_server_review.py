"""The two-person rule through a real server (docs/governance.md, "The two-person rule";
docs/security.md): each person's token is their actor, so one token cannot propose and
approve; a raw `Commit` built with the proto stubs is refused like the store's own writes;
only an admin grant on the scope changes the setting. Refusals write nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import PermissionDenied, ReviewRequired
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.app import SkillfsServer
from tests.helpers import skill_files as files
from tests.helpers import token_server
from tests.server.test_server_propose import open_as
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ANA = "review-ana-token-0123456789abcdef"
BOB = "review-bob-token-0123456789abcdef"
TOKENS = [("ana", ANA, ["*:admin"]), ("bob", BOB, [f"agent:{AGENT}:write"])]


@pytest.fixture(params=["memory", "redis"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SkillfsServer]:
    with token_server(url_for(request, request.param, tmp_path), tmp_path, TOKENS) as srv:
        yield srv


def test_two_tokens_two_persons(server: SkillfsServer) -> None:
    ana, bob = open_as(server, ANA), open_as(server, BOB)
    bob.publish(SHARED, "triage", files("triage"))
    with pytest.raises(PermissionDenied, match="may not admin"):  # a write grant is not enough
        bob.review.require(SHARED)
    assert not ana.review.rule(SHARED).required
    ana.review.require(SHARED, options=skillfs.WriteOptions(message="SOC 2"))
    assert bob.review.rule(SHARED).actor == "ana"
    with pytest.raises(PermissionDenied, match="may not admin"):
        bob.review.lift(SHARED)
    rev = ana.revision(AGENT)
    with pytest.raises(ReviewRequired, match="turned on by ana"):
        bob.publish(SHARED, "triage", files("triage", "bob's"))
    with pytest.raises(ReviewRequired, match="turned on by ana"):
        ana.publish(SHARED, "triage", files("triage", "ana's"))  # an admin too
    assert ana.revision(AGENT) == rev
    bob.drafts.propose(SHARED, "triage", files("triage", "reviewed"))
    with pytest.raises(ReviewRequired, match="'bob' wrote the draft"):
        bob.drafts.approve(SHARED, "triage")
    ana.drafts.approve(SHARED, "triage")
    assert b"reviewed" in bob.read(SHARED, "triage", "SKILL.md")
    bob.governance.disable(SHARED, "triage", "still immediate")
    assert bob.manifest(SHARED, "triage").disabled


def test_a_raw_commit_is_held_to_the_rule(server: SkillfsServer) -> None:
    """A client that skips its own checks: a Commit of a manifest it built, sent with the
    proto stubs by the admin's token, is refused by the server's rules."""
    ana = open_as(server, ANA)
    ana.publish(SHARED, "a", files("a"))
    ana.publish(SHARED, "b", files("b", "other text"))
    ana.review.require(SHARED)
    held, other = ana.manifest(SHARED, "a"), ana.manifest(SHARED, "b")
    forged = held.model_copy(update={"version": held.version + 1, "commit_id": "raw-1",
                                     "files": other.files})  # fmt: skip
    commit = pb.CommitRequest(
        domain=f"agents/{AGENT}",
        ops=[pb.CommitOp(scope=str(SHARED), manifest_json=forged.model_dump_json().encode(),
                         expect=held.version)],
    )  # fmt: skip
    rev = ana.revision(AGENT)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = pb_grpc.SkillAdminStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.Commit(iter([commit]), metadata=[("authorization", f"Bearer {ANA}")])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "requires review" in (err.value.details() or "")
    assert dict(err.value.trailing_metadata() or ())["skillfs-error"] == "ReviewRequired"
    assert ana.revision(AGENT) == rev and ana.manifest(SHARED, "a").version == held.version
