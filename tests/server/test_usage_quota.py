"""Usage counters are a write, charged to the token that creates them (docs/security.md,
"Quotas"): a worker's credential may read every user of its agent, so it can name any user
id, and each made-up (user, skill) would be a new key; its quota bounds them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs.errors import QuotaExceeded
from skillfs.model import Scope
from skillfs.server.app import SkillfsServer
from skillfs.store.limits import Limits
from support.grpc_servers import ADMIN, READER, running
from tests.helpers import skill_md

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
QUOTA = 20_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    limits = Limits(token_quota=QUOTA)
    with running(f"memory://{uuid.uuid4().hex}", tmp_path, http=None, limits=limits) as srv:
        yield srv


def test_a_worker_naming_made_up_users_stops_at_its_quota(server: SkillfsServer) -> None:
    url = f"grpc://127.0.0.1:{server.grpc_port}"
    with skillfs.open_store(url, token=ADMIN) as admin, skillfs.open_store(url, token=READER) as w:
        admin.publish(SHARED, "shared-one", {"SKILL.md": skill_md("shared-one")})
        w.usage.record(AGENT, {("alice", "shared-one"): 1})
        w.usage.record(AGENT, {("alice", "shared-one"): 1})  # an existing key: charged once
        users = [f"u{i:05d}" for i in range(10_000)]  # every one shown the shared skill
        refused: QuotaExceeded | None = None
        started = time.monotonic()
        for part in range(0, len(users), 100):
            try:
                w.usage.record(AGENT, {(u, "shared-one"): 1 for u in users[part : part + 100]})
            except QuotaExceeded as exc:
                refused = exc
                break
        assert time.monotonic() - started < 30
        assert refused is not None, "10,000 made-up users recorded: nothing bounded them"
        said = str(refused)
        assert said.startswith(f"quota of token 'reader' in agents/{AGENT} exceeded: it holds ")
        assert f"of its {QUOTA}, and this batch of usage counters adds " in said
        assert "nothing was written" in said
        held = admin.usage.detail(AGENT)
        assert held[("alice", "shared-one")].count == 2
        # what a counter costs: its user, its skill and 32 bytes (GC's recount says the same)
        assert sum(len(u) + len(s) + 32 for u, s in held) <= QUOTA  # the refused: nothing
        assert len(held) < 500


def test_gc_keeps_what_usage_took_until_an_operator_drops_it_all(server: SkillfsServer) -> None:
    """A usage key records no token, so GC's recount cannot give a token's usage back to it
    (it did, before: a worker's room came back at every GC); dropping all of the agent's
    usage does, and a partial drop does not (its keys' tokens are unknown)."""
    url = f"grpc://127.0.0.1:{server.grpc_port}"
    with skillfs.open_store(url, token=ADMIN) as admin, skillfs.open_store(url, token=READER) as w:
        admin.publish(SHARED, "shared-one", {"SKILL.md": skill_md("shared-one")})

        def batch(tag: str) -> dict[tuple[str, str], int]:
            """20 made-up users' counters of 50 bytes each."""
            return {(f"{tag}-{k:04d}", "shared-one"): 1 for k in range(20)}

        def fill(tag: str) -> int:
            """Batches until the quota refuses one; how many were recorded."""
            for n in range(1000):
                try:
                    w.usage.record(AGENT, batch(f"{tag}{n:04d}"))
                except QuotaExceeded:
                    return n
            raise AssertionError("never refused")

        first = fill("a")
        assert first > 0
        admin.gc()
        with pytest.raises(QuotaExceeded):  # the batch refused before GC still is
            w.usage.record(AGENT, batch("gc"))
        admin.usage.drop(AGENT, users=["a0000-0000"], reason="one made-up user")
        with pytest.raises(QuotaExceeded):  # a partial drop gives nothing back
            w.usage.record(AGENT, batch("partial"))
        admin.usage.drop(AGENT, reason="made-up users")
        assert admin.usage.detail(AGENT) == {}
        assert fill("b") == first  # all of the room is back
