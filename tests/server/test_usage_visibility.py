"""Usage is a write by the least-privileged credential (issue 28): a token that may only
read records load counts, so a server counts them only for skills its view can see — live
in the user's scope, the agent's shared scope or a market the token may read — and drops
the rest without writing anything (docs/governance.md, "Usage and last use")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs.api import Store
from skillfs.errors import PermissionDenied
from skillfs.model import Scope
from skillfs.server.app import SkillfsServer
from support.grpc_servers import ADMIN, ALICE, READER, running
from tests.helpers import skill_md

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
MINE = Scope.user(AGENT, "alice")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(f"memory://{uuid.uuid4().hex}", tmp_path, http=None) as srv:
        yield srv


def client(server: SkillfsServer, token: str) -> Store:
    return skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=token)


def test_a_read_only_token_records_usage_only_of_skills_its_view_sees(
    server: SkillfsServer,
) -> None:
    """The reported case: a read-only token recorded made-up skill names by the hundred
    thousand, each a key nothing bounded. Names no scope of the view holds live (made up,
    deleted, disabled, a draft, another user's) are dropped; real ones count."""
    admin, reader, alice = client(server, ADMIN), client(server, READER), client(server, ALICE)
    try:
        admin.publish(SHARED, "shared-one", {"SKILL.md": skill_md("shared-one")})
        admin.publish(SHARED, "gone", {"SKILL.md": skill_md("gone")})
        admin.delete(SHARED, "gone")
        admin.publish(SHARED, "off", {"SKILL.md": skill_md("off")})
        admin.governance.disable(SHARED, "off", reason="broken")
        admin.publish(MINE, "mine", {"SKILL.md": skill_md("mine")})
        admin.publish(Scope.market("team"), "from-market", {"SKILL.md": skill_md("from-market")})
        admin.publish(Scope.market("zeta"), "further", {"SKILL.md": skill_md("further")})
        admin.drafts.propose(MINE, "proposal", {"SKILL.md": skill_md("proposal")})
        made_up = {("alice", f"made-up-{i}"): 1 for i in range(2000)}
        started = time.monotonic()
        reader.usage.record(AGENT, made_up)
        assert time.monotonic() - started < 10
        real = {
            ("alice", "shared-one"): 2,
            ("alice", "mine"): 3,
            ("alice", "from-market"): 1,
            ("alice", "further"): 1,  # in a second market: read on past the first
            ("bob", "shared-one"): 1,
            ("bob", "mine"): 1,  # alice's skill: bob's view does not hold it
            ("alice", "gone"): 1,
            ("alice", "off"): 1,
            ("alice", "proposal"): 1,  # a draft: no view holds it as a skill
        }
        reader.usage.record(AGENT, real)
        # alice's token reads no market: a market skill's name is not hers to count
        alice.usage.record(
            AGENT, {("alice", "mine"): 1, ("alice", "made-up"): 1, ("alice", "from-market"): 5}
        )
        assert admin.usage.counts(AGENT) == {
            ("alice", "shared-one"): 2,
            ("alice", "mine"): 4,
            ("alice", "from-market"): 1,
            ("alice", "further"): 1,
            ("bob", "shared-one"): 1,
        }
    finally:
        for s in (admin, reader, alice):
            s.close()


def test_only_an_admin_of_the_agent_drops_usage(server: SkillfsServer) -> None:
    """DropUsage needs an admin grant on the whole agent; the server records its token."""
    admin, alice = client(server, ADMIN), client(server, ALICE)
    try:
        admin.publish(MINE, "mine", {"SKILL.md": skill_md("mine")})
        alice.usage.record(AGENT, {("alice", "mine"): 2})
        with pytest.raises(PermissionDenied, match="admin"):
            alice.usage.drop(AGENT, users=["alice"], reason="mine to forget")
        drop = admin.usage.drop(AGENT, users=["alice"], reason="reset", actor="claimed")
        assert (drop.actor, drop.dropped) == ("admin", 1)  # the token, not the claim
        assert admin.usage.counts(AGENT) == {} and admin.usage.drops(AGENT) == [drop]
    finally:
        admin.close()
        alice.close()
