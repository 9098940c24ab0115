"""Limits every engine keeps whoever calls it (the Store, or a client's Commit through a
skillfs server): deletions of what does not exist, usage counters that cannot overflow, and
the work one Redis commit script may do (docs/consistency.md, "Limits")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Put, Scope
from skillfs.engines.base import CommitOp
from skillfs.engines.redis import scripts as redis_scripts
from skillfs.engines.redis.engine import RedisEngine
from skillfs.errors import InvalidPath, NotFound, TooLarge
from skillfs.model import USAGE_MAX, Manifest
from skillfs.store.limits import USAGE_BATCH_MAX
from tests.helpers import manifest, skill_md
from tests.stores import url_for

SHARED = Scope.shared("support-bot")
ALICE = Scope.user("support-bot", "alice")


# ----------------------------------------------------------------- deletions


def test_commit_deleting_a_skill_that_never_existed_writes_nothing(store: skillfs.Store) -> None:
    """Through the engine's own commit (a grpc:// client's Commit reaches it so): NotFound,
    no tombstone, no revision."""
    tombstone = CommitOp(scope=ALICE, manifest=manifest("ghost", 1, deleted=True), expect=0)
    with pytest.raises(NotFound, match=r"ghost.*nothing to delete"):
        store.engine.commit("agents/support-bot", [tombstone])
    assert store.engine.load_scope(ALICE) == {}
    assert store.revision("support-bot") is None


def test_commit_deleting_a_deleted_skill_writes_nothing(store: skillfs.Store) -> None:
    store.publish(ALICE, "gone", {"SKILL.md": skill_md("gone")})
    store.delete(ALICE, "gone")
    again = CommitOp(scope=ALICE, manifest=manifest("gone", 3, deleted=True), expect=2)
    held = store.publish(ALICE, "held", {"SKILL.md": skill_md("held")})
    files = store.manifest(ALICE, "held").files  # stored blobs: a server holds it to them
    other = Manifest(
        skill="other", version=1, commit_id=uuid.uuid4().hex, committed_at=time.time(),
        files=files,
    )  # fmt: skip
    keep = CommitOp(scope=ALICE, manifest=other, expect=0)
    before = held.revision
    with pytest.raises(NotFound, match=r"gone.*nothing to delete"):
        store.engine.commit("agents/support-bot", [keep, again])
    assert store.revision("support-bot") == before
    assert store.engine.load_scope(ALICE)["gone"].version == 2
    assert "other" not in store.engine.load_scope(ALICE)


# ----------------------------------------------------------------- usage counters


def test_usage_batch_over_the_cap_is_refused(store: skillfs.Store) -> None:
    store.usage.record("support-bot", {("alice", "s"): 3})
    for bad, error in [(USAGE_BATCH_MAX + 1, TooLarge), (2**70, TooLarge), (-1, InvalidPath)]:
        with pytest.raises(error, match="nothing was recorded"):
            store.usage.record("support-bot", {("alice", "t"): 1, ("alice", "s"): bad})
    assert store.usage.counts("support-bot") == {("alice", "s"): 3}


def test_usage_counters_saturate_instead_of_overflowing(store: skillfs.Store) -> None:
    """Engines saturate whatever reaches them; through a server (grpc://) a batch over the
    cap is refused there, so the server's counters never get near the edge from a client."""
    if store.url.startswith("grpc"):
        with pytest.raises(TooLarge, match="nothing was recorded"):
            store.engine.add_usage("support-bot", {("", "s"): 2**62})
        assert store.usage.counts("support-bot") == {}
        return
    store.engine.add_usage("support-bot", {("", "s"): USAGE_MAX - 5, ("u", "t"): 1})
    store.engine.add_usage("support-bot", {("", "s"): 10, ("u", "t"): USAGE_MAX})
    store.usage.record("support-bot", {("", "s"): USAGE_BATCH_MAX})
    assert store.usage.counts("support-bot") == {("", "s"): USAGE_MAX, ("u", "t"): USAGE_MAX}
    store.usage.record("support-bot", {("u", "new"): 2})
    assert store.usage.counts("support-bot")[("u", "new")] == 2


# ----------------------------------------------------------------- one Redis script's work


@pytest.fixture(params=["redis", "redis-cluster", "redis-sentinel"])
def redis_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[skillfs.Store]:
    with skillfs.open_store(url_for(request, request.param, tmp_path)) as s:
        yield s


def test_redis_commit_over_max_ops_is_too_large(redis_store: skillfs.Store) -> None:
    n = redis_store.max_ops
    assert n == 63  # the engine's 64, less the entry the scope's name register takes
    puts = [Put(SHARED, f"s{i}", {"SKILL.md": skill_md(f"s{i}")}) for i in range(n + 1)]
    with pytest.raises(TooLarge, match=f"limit of {n} per atomic commit"):
        redis_store.commit(puts)
    assert redis_store.skills(SHARED) == []
    redis_store.commit(puts[:n])
    assert len(redis_store.skills(SHARED)) == n


@pytest.mark.serial
def test_redis_longest_commit_script_stays_short(redis_url: str) -> None:
    """The worst commit a client may send: max_ops skills of 2,000 files each, created and
    then all updated (the update also copies the old manifests to history). Redis's SLOWLOG
    times each script on the server."""
    engine = RedisEngine(redis_url)
    client = engine._client
    client.config_set("slowlog-log-slower-than", 0)
    try:
        for version in (1, 2):
            ops = [
                CommitOp(scope=SHARED, manifest=manifest(f"s{i}", version, files=2000),
                         expect=version - 1)
                for i in range(engine.max_ops or 0)
            ]  # fmt: skip
            client.slowlog_reset()
            engine.commit("agents/support-bot", ops)
            took = [e["duration"] / 1e6 for e in client.slowlog_get(128) if _is_script(e)]
            assert took and max(took) < 0.5, took
    finally:
        client.config_set("slowlog-log-slower-than", 10000)
        engine.close()


def _is_script(entry: dict[str, object]) -> bool:
    command = entry["command"]
    text = command.decode() if isinstance(command, bytes) else str(command)
    return text.upper().startswith(("EVALSHA", "EVAL"))


def test_redis_commit_script_reads_a_manifest_head_without_decoding(redis_url: str) -> None:
    """The script takes version and deleted from the head of a manifest's JSON, as skillfs
    writes it (decoding a large manifest whole would cost ~10 ms per MB)."""
    engine = RedisEngine(redis_url)
    pattern = redis_scripts._HEAD
    for m in (manifest("s-1", 7, files=3), manifest("s", 12, deleted=True)):
        body = m.model_dump_json()
        found = engine._client.eval(f"return {{string.match(ARGV[1], {pattern})}}", 0, body)
        assert found == [str(m.version).encode(), str(m.deleted).lower().encode()]
    engine.close()
