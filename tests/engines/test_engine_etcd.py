"""The etcd engine against real etcd: physical layout, the commit transaction, paging,
compaction, endpoint rotation, faults (C7), auth and TLS. The Store-level contract is in
test_conformance.py."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import etcd3
import grpc
import pytest
from etcd3 import etcdrpc

import skillfs
from skillfs.engines.base import EMPTY, CommitOp, VersionMismatch
from skillfs.engines.etcd import client as ec
from skillfs.engines.etcd import gateway as etcd_gateway
from skillfs.engines.etcd.engine import EtcdEngine
from skillfs.errors import (
    InvalidArgument,
    InvalidPath,
    PermissionDenied,
    StoreUnavailable,
    TooLarge,
)
from skillfs.model import Candidate, Manifest, Revision, Rollout, Scope
from support.servers import HOST, EtcdCluster, EtcdServer, free_port
from tests import helpers
from tests.helpers import raw_engine, skill_md

ALICE = Scope.user("support-bot", "alice")
SHARED = Scope.shared("support-bot")
MARKET = Scope.market("team")
MiB = 1024 * 1024


def manifest(skill: str, version: int, files: int = 1, commit_id: str = "c") -> Manifest:
    """tests/helpers.py's manifest with `files` entries (one by default) and this commit id."""
    return helpers.manifest(skill, version, files=files).model_copy(update={"commit_id": commit_id})


def raw_keys(client: etcd3.Etcd3Client, prefix: str = "") -> dict[str, bytes]:
    found = client.get_prefix(prefix) if prefix else client.get_all()
    return {m.key.decode(): v for v, m in found}


@pytest.fixture
def server_client(etcd_server: EtcdServer, etcd_url: str) -> Iterator[etcd3.Etcd3Client]:
    c = etcd_server.client()
    yield c
    c.close()


@pytest.fixture
def engine(etcd_url: str) -> Iterator[EtcdEngine]:
    e = EtcdEngine(etcd_url)
    yield e
    e.close()


def ns_url(url: str) -> str:
    return f"{url}?prefix=t{uuid.uuid4().hex[:10]}/"


# ----------------------------------------------------------------- URL and layout


def test_url_options(etcd_server: EtcdServer) -> None:
    e = EtcdEngine(f"etcd://u:secret@{etcd_server.endpoint},localhost?prefix=a/&timeout=2")
    assert e.url == f"etcd://u:***@{etcd_server.endpoint},localhost?prefix=a/&timeout=2"
    assert [ep.target for ep in e._etcd.endpoints] == [etcd_server.endpoint, "localhost:2379"]
    assert e._etcd.timeout == 2.0 and e.max_ops == 62 and e.chunk_size == MiB
    e.close()
    with pytest.raises(InvalidArgument, match="unknown option"):
        EtcdEngine(f"etcd://{etcd_server.endpoint}?prefx=a/")
    with pytest.raises(InvalidArgument, match="timeout"):
        EtcdEngine(f"etcd://{etcd_server.endpoint}?timeout=soon")
    with pytest.raises(InvalidArgument, match="need TLS"):
        EtcdEngine(f"etcd://{etcd_server.endpoint}?cert=/x")
    assert isinstance(raw_engine(skillfs.open_store(etcd_server.url)), EtcdEngine)


def test_physical_layout(etcd_url: str, server_client: etcd3.Etcd3Client) -> None:
    store = skillfs.open_store(etcd_url)
    c1 = store.publish(ALICE, "code-reviewer", {"SKILL.md": skill_md("code-reviewer", "one")})
    c2 = store.publish(ALICE, "code-reviewer", {"SKILL.md": skill_md("code-reviewer", "two")})
    c3 = store.publish(SHARED, "s", {"SKILL.md": skill_md("s")})
    cm = store.publish(MARKET, "m", {"SKILL.md": skill_md("m")})
    store.usage.record("support-bot", {("alice", "code-reviewer"): 2, ("", "s"): 1})
    keys = raw_keys(server_client)
    sha = store.manifest(ALICE, "code-reviewer").files["SKILL.md"].sha256
    live = "agents/support-bot/users/alice/skills/code-reviewer"
    assert Manifest.model_validate_json(keys[live]).version == 2
    assert (
        Manifest.model_validate_json(keys[f"history/{live}/0000000001"]).commit_id == c1.commit_id
    )
    assert "agents/support-bot/shared/skills/s" in keys and "markets/team/skills/m" in keys
    assert c2.revision < c3.revision
    assert keys["agents/support-bot/rev"] == c3.commit_id.encode()  # the latest commit's id
    assert keys["markets/team/rev"] == cm.commit_id.encode()
    assert keys[f"blobs/{sha}/0"] == skill_md("code-reviewer", "two")
    assert float(keys[f"blobs/{sha}"]) > 0
    count, when = keys["usage/agents/support-bot/alice/code-reviewer"].split(b" ")
    assert count == b"2" and float(when) == store.usage.detail("support-bot")[("", "s")].last_used
    assert keys["usage/agents/support-bot//s"].startswith(b"1 ")
    assert store.usage.counts("support-bot") == {("alice", "code-reviewer"): 2, ("", "s"): 1}
    assert keys["domains"] == b"1"  # the domain index is complete (the store started with it)
    assert keys["domains/agents/support-bot"] == keys["domains/markets/team"] == b""
    # the quota counters of each domain, one key each (docs/engine-etcd.md, "Quotas")
    scope_bytes = int(keys["quota/agents/support-bot/scope%3Auser%3Asupport-bot%2Falice"])
    assert scope_bytes > 2 * len(skill_md("code-reviewer", "two"))  # both versions, their blobs
    assert int(keys["quota/markets/team/scope%3Amarket%3Ateam"]) > 0
    tops = {k.split("/", 1)[0] for k in keys}
    assert tops == {"agents", "markets", "history", "blobs", "usage", "domains", "quota"}
    # the revision is the store's own mod_revision of the rev key; the epoch names the cluster
    _, meta = server_client.get("agents/support-bot/rev")
    rev = store.revision("support-bot")
    assert rev is not None and rev.counter == meta.mod_revision
    assert rev.epoch == f"{meta.response_header.cluster_id:016x}-{meta.create_revision}"
    store.close()


def test_prefix_keeps_every_key_inside(etcd_url: str, server_client: etcd3.Etcd3Client) -> None:
    store = skillfs.open_store(f"{etcd_url}?prefix=tenant1/")
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a", "2")})
    store.usage.record("support-bot", {("alice", "a"): 1})
    keys = raw_keys(server_client)
    assert keys and all(k.startswith("tenant1/") for k in keys)
    other = skillfs.open_store(f"{etcd_url}?prefix=tenant2/")
    assert other.agents() == [] and store.agents() == ["support-bot"]
    assert list(other.engine.blob_shas()) == [] and len(list(store.engine.blob_shas())) == 2
    store.close()
    other.close()


# ----------------------------------------------------------------- the commit transaction


def test_commit_is_one_transaction(engine: EtcdEngine, server_client: etcd3.Etcd3Client) -> None:
    ops = [CommitOp(scope=ALICE, manifest=manifest(f"s{i}", 1), expect=0) for i in range(3)]
    rev = engine.commit("agents/support-bot", ops)
    for i in range(3):
        _, meta = server_client.get(f"agents/support-bot/users/alice/skills/s{i}")
        assert meta.mod_revision == rev.counter  # all written at the commit's one revision
    _, meta = server_client.get("agents/support-bot/rev")
    assert meta.mod_revision == rev.counter


def test_version_mismatch_writes_nothing(
    engine: EtcdEngine, server_client: etcd3.Etcd3Client
) -> None:
    engine.commit(
        "agents/support-bot", [CommitOp(scope=ALICE, manifest=manifest("b", 1), expect=0)]
    )
    engine.commit(
        "agents/support-bot", [CommitOp(scope=ALICE, manifest=manifest("b", 2), expect=1)]
    )
    before = raw_keys(server_client)
    rev = engine.revisions(["agents/support-bot"])["agents/support-bot"]
    ops = [
        CommitOp(scope=ALICE, manifest=manifest("a", 1), expect=0),
        CommitOp(scope=ALICE, manifest=manifest("b", 2), expect=1),  # b is at 2
    ]
    with pytest.raises(VersionMismatch) as err:
        engine.commit("agents/support-bot", ops)
    assert (err.value.skill, err.value.current) == ("b", 2)
    assert raw_keys(server_client) == before
    assert engine.revisions(["agents/support-bot"])["agents/support-bot"] == rev


def test_racing_commits_one_wins(etcd_url: str) -> None:
    """Ten engines commit version 2 of one skill at once: exactly one succeeds."""
    engines = [EtcdEngine(etcd_url) for _ in range(10)]
    engines[0].commit("agents/a", [CommitOp(scope=Scope.shared("a"), manifest=manifest("x", 1),
                                            expect=0)])  # fmt: skip
    barrier = threading.Barrier(len(engines))
    results: list[object] = []

    def go(e: EtcdEngine, i: int) -> None:
        barrier.wait()
        op = CommitOp(
            scope=Scope.shared("a"), manifest=manifest("x", 2, commit_id=str(i)), expect=1
        )
        try:
            results.append(e.commit("agents/a", [op]))
        except VersionMismatch as exc:
            results.append(exc.current)

    threads = [threading.Thread(target=go, args=(e, i)) for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(isinstance(r, Revision) for r in results) == 1
    assert sorted(r for r in results if isinstance(r, int)) == [2] * 9
    assert [m.version for m in engines[0].history(Scope.shared("a"), "x")] == [1]
    for e in engines:
        e.close()


def test_max_ops_fits_one_transaction(engine: EtcdEngine) -> None:
    n = engine.max_ops
    assert n is not None
    first = [CommitOp(scope=ALICE, manifest=manifest(f"s{i}", 1), expect=0) for i in range(n)]
    engine.commit("agents/support-bot", first)
    # the worst case: every op also copies its old manifest to history
    second = [CommitOp(scope=ALICE, manifest=manifest(f"s{i}", 2), expect=1) for i in range(n)]
    engine.commit("agents/support-bot", second)
    assert len(engine.load_scope(ALICE)) == n
    assert all(len(engine.history(ALICE, f"s{i}")) == 1 for i in range(0, n, 10))


def test_commit_over_the_request_limit_is_too_large(engine: EtcdEngine) -> None:
    big = [CommitOp(scope=ALICE, manifest=manifest(f"s{i}", 1, files=3000), expect=0)
           for i in range(6)]  # fmt: skip
    with pytest.raises(TooLarge, match="--max-request-bytes"):
        engine.commit("agents/support-bot", big)
    assert engine.load_scope(ALICE) == {}


def test_touch_of_many_blobs_fits_the_op_limit(engine: EtcdEngine) -> None:
    """touch_blobs nests one transaction per blob, and etcd counts the nested operation
    against --max-txn-ops too: 300 blobs must be cut into batches that fit."""
    shas = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(300)]
    for sha in shas[:250]:
        engine.put_blob(sha, [b"x"], now=1.0)
    assert engine.touch_blobs(shas, now=2.0) == set(shas[:250])


def test_a_skill_of_many_files_publishes_on_etcd(etcd_url: str) -> None:
    with skillfs.open_store(etcd_url) as store:
        files = {f"references/r{i}.md": b"%d" % i for i in range(300)}
        store.publish(ALICE, "big", {"SKILL.md": skill_md("big"), **files})
        files["references/r7.md"] = b"changed"
        assert store.publish(ALICE, "big", {"SKILL.md": skill_md("big"), **files}).version == 2
        assert store.read(ALICE, "big", "references/r7.md") == b"changed"


def test_every_batched_request_fits_both_limits(engine: EtcdEngine) -> None:
    """Each request the engine sends stays under the op and byte limits by construction."""
    sent: list[Any] = []
    real = engine._etcd.rpc

    def txn(request: Any) -> Any:
        sent.append(request)
        return real(lambda ep, t, md: ep.kv.Txn(request, timeout=t, metadata=md))

    engine._etcd.txn = txn  # type: ignore[method-assign]
    shas = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(400)]
    engine.touch_blobs(shas, now=1.0)
    engine.get_chunks([(s, 0) for s in shas])
    engine.revisions([f"agents/a{i:03d}{'x' * 100}" for i in range(300)])
    engine.add_usage("bot", {("u" * 128, f"skill-{i}-{'s' * 50}"): 1 for i in range(300)})
    engine.drop_history(ALICE, "s", list(range(1, 400)))
    assert len(sent) > 10
    for request in sent:
        assert ec.txn_ops(request) <= ec.MAX_TXN_OPS
        assert request.ByteSize() <= ec.MAX_REQUEST_BYTES - ec.ENVELOPE


def test_packed_cuts_by_bytes_as_well_as_ops(engine: EtcdEngine) -> None:
    etcd = engine._etcd
    sizes = [len(b) for b in etcd.packed([b"k" * 100_000] * 40, len)]
    assert sum(sizes) == 40 and max(sizes) <= etcd.request_budget // 100_008
    assert [len(b) for b in etcd.packed(list(range(300)), lambda _: 1, reserve_ops=1)] == [
        127,
        127,
        46,
    ]


def test_a_request_over_etcds_limits_is_a_bug_report_at_once(etcd_server: EtcdServer) -> None:
    """A cluster whose limits are lower than the engine was told (here: the URL claims 1,000
    operations): etcd's INVALID_ARGUMENT is no outage, so it is not retried for retry_for."""
    e = EtcdEngine(ns_url(etcd_server.url) + "&max_txn_ops=1000", retry_for=10)
    started = time.monotonic()
    with pytest.raises(ec.RequestOverLimit, match=r"too many operations.*report it") as caught:
        e.revisions([f"agents/a{i}" for i in range(300)])
    assert not isinstance(caught.value, StoreUnavailable)
    assert time.monotonic() - started < 2
    with skillfs.open_store(ns_url(etcd_server.url) + "&max_txn_ops=1000") as store:
        started = time.monotonic()
        with pytest.raises(ec.RequestOverLimit):
            store.domain_revisions([f"agents/a{i}" for i in range(300)])
        assert time.monotonic() - started < 2
    e.close()


def test_a_request_over_the_limits_is_never_sent(engine: EtcdEngine) -> None:
    request = etcdrpc.TxnRequest(success=[ec.get_op(b"k%d" % i) for i in range(129)])
    with pytest.raises(ec.RequestOverLimit, match="129 operations"):
        engine._etcd.txn(request)


def test_limit_options_in_the_url(etcd_server: EtcdServer) -> None:
    e = EtcdEngine(f"{etcd_server.url}?max_txn_ops=1024&max_request_bytes=10485760")
    assert e.max_ops == 510 and e.max_manifest_bytes > 4 * MiB
    with pytest.raises(InvalidPath, match=r"max_request_bytes=1000 .* at least"):
        EtcdEngine(f"{etcd_server.url}?max_request_bytes=1000")


def test_a_skill_that_can_be_created_can_be_updated(engine: EtcdEngine) -> None:
    """Creation and update have the same limit: a manifest fits half a request, so the update,
    which also moves the old manifest to history, always fits."""
    low, high = 1000, 20_000  # the most files that fit, but for the digits of their time
    while low + 1 < high:
        mid = (low + high) // 2
        fits = len(manifest("s", 1, files=mid).model_dump_json()) < engine.max_manifest_bytes - 100
        low, high = (mid, high) if fits else (low, mid)
    most = low
    engine.commit(
        "agents/support-bot",
        [CommitOp(scope=ALICE, manifest=manifest("s", 1, files=most), expect=0)],
    )
    for version in (2, 3):
        op = CommitOp(scope=ALICE, manifest=manifest("s", version, files=most), expect=version - 1)
        engine.commit("agents/support-bot", [op])
    assert [m.version for m in engine.history(ALICE, "s")] == [2, 1]
    over = CommitOp(scope=ALICE, manifest=manifest("t", 1, files=most + 100), expect=0)
    with pytest.raises(TooLarge, match=r"per manifest.*update"):
        engine.commit("agents/support-bot", [over])
    assert set(engine.load_scope(ALICE)) == {"s"}


def test_a_staged_candidate_counts_toward_the_manifest_limit(engine: EtcdEngine) -> None:
    """A manifest with its candidate still uses at most half a request: a candidate that
    would pass it is refused, nothing written (docs/governance.md)."""
    per_file = len(manifest("s", 1, files=100).model_dump_json()) / 100
    live = manifest("s", 1, files=int(0.6 * engine.max_manifest_bytes / per_file))
    engine.commit("agents/support-bot", [CommitOp(scope=ALICE, manifest=live, expect=0)])
    candidate = Candidate(files=live.files, rollout=Rollout(fraction=0.1), commit_id="c2")
    staged = live.model_copy(update={"version": 2, "commit_id": "c2", "candidate": candidate})
    with pytest.raises(TooLarge, match=r"files \(and a candidate of \d+\) is"):
        engine.commit("agents/support-bot", [CommitOp(scope=ALICE, manifest=staged, expect=1)])
    assert engine.load_scope(ALICE)["s"].version == 1
    small = Candidate(files={}, rollout=Rollout(fraction=0.1), commit_id="c2")
    fits = staged.model_copy(update={"candidate": small})
    engine.commit("agents/support-bot", [CommitOp(scope=ALICE, manifest=fits, expect=1)])
    assert engine.load_scope(ALICE)["s"].candidate == small


# ----------------------------------------------------------------- paging


def fill_scope(engine: EtcdEngine, skills: int, files: int) -> int:
    """Commit `skills` manifests of `files` entries each; returns their total JSON size."""
    total = 0
    for i in range(0, skills, 4):
        ops = [CommitOp(scope=SHARED, manifest=manifest(f"s{j:03d}", 1, files=files), expect=0)
               for j in range(i, min(skills, i + 4))]  # fmt: skip
        total += sum(len(op.manifest.model_dump_json()) for op in ops)
        engine.commit("agents/support-bot", ops)
    return total


def test_scope_over_the_default_4_mib_response_cap(etcd_url: str) -> None:
    writer = EtcdEngine(etcd_url)
    total = fill_scope(writer, 40, 1200)  # 40 manifests of about 140 KiB
    assert total > 5 * MiB
    default = EtcdEngine(etcd_url)
    loaded = default.load_scope(SHARED)
    assert len(loaded) == 40 and all(len(m.files) == 1200 for m in loaded.values())
    # a receive limit of 4 MiB (etcd3's default) still works: pages shrink until they fit
    capped = EtcdEngine(etcd_url, max_response_bytes=4 * MiB)
    assert capped.load_scope(SHARED) == loaded
    tiny_pages = EtcdEngine(etcd_url, page_size=3)
    assert tiny_pages.load_scope(SHARED) == loaded
    for e in (writer, default, capped, tiny_pages):
        e.close()


def test_pages_are_one_snapshot(etcd_url: str) -> None:
    """Writes landing between pages are not mixed in: pages read at the first page's revision."""
    writer = EtcdEngine(etcd_url)
    fill_scope(writer, 12, 1)
    reader = EtcdEngine(etcd_url, page_size=2)
    real_range = reader._etcd.range
    calls = 0

    def range_and_write(request: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:  # between the first and the second page
            op = CommitOp(scope=SHARED, manifest=manifest("s011", 2), expect=1)
            writer.commit("agents/support-bot", [op])
        return real_range(request)

    reader._etcd.range = range_and_write  # type: ignore[method-assign]
    loaded = reader.load_scope(SHARED)
    assert calls == 6 and len(loaded) == 12 and loaded["s011"].version == 1
    assert writer.load_scope(SHARED)["s011"].version == 2
    writer.close()
    reader.close()


def test_listings_skip_large_subtrees(engine: EtcdEngine) -> None:
    small = EtcdEngine(engine.url, page_size=2)
    for u in ["a", "a.b", "a+", "b", "zz"]:
        scope = Scope.user("bot", u)
        ops = [CommitOp(scope=scope, manifest=manifest(f"s{i}", 1), expect=0) for i in range(5)]
        engine.commit("agents/bot", ops)
    engine.commit("agents/bot.x", [CommitOp(scope=Scope.shared("bot.x"), manifest=manifest("s", 1),
                                            expect=0)])  # fmt: skip
    engine.commit("markets/m", [CommitOp(scope=Scope.market("m"), manifest=manifest("s", 1),
                                         expect=0)])  # fmt: skip
    for e in (engine, small):
        assert e.domains() == ["agents/bot", "agents/bot.x", "markets/m"]
        assert [str(s) for s in e.scopes("agents/bot")] == [
            "user:bot/a", "user:bot/a+", "user:bot/a.b", "user:bot/b", "user:bot/zz"
        ]  # fmt: skip
        assert e.scopes("agents/bot.x") == [Scope.shared("bot.x")]
        assert e.scopes("markets/m") == [Scope.market("m")]
    small.close()


# ----------------------------------------------------------------- blobs


@pytest.mark.slow
def test_64_mib_blob_round_trip(engine: EtcdEngine, server_client: etcd3.Etcd3Client) -> None:
    data = os.urandom(64 * MiB)
    sha = hashlib.sha256(data).hexdigest()
    chunks = [data[i : i + MiB] for i in range(0, len(data), MiB)]
    t0 = time.monotonic()
    engine.put_blob(sha, chunks, now=100.0)
    put_s = time.monotonic() - t0
    assert engine.touch_blobs([sha, "0" * 64], now=200.0) == {sha}
    t0 = time.monotonic()
    got = engine.get_chunks([(sha, i) for i in range(64)])
    get_s = time.monotonic() - t0
    assert b"".join(c or b"" for c in got) == data
    assert engine.get_chunks([(sha, 64)]) == [None]
    keys = [m.key.decode() for _, m in server_client.get_prefix(f"blobs/{sha}", keys_only=True)]
    assert len(keys) == 65  # 64 chunks and the last-use key
    assert list(engine.blob_shas()) == [sha]
    assert not engine.delete_blob_if_idle(sha, cutoff=150.0)  # touched at 200
    assert engine.delete_blob_if_idle(sha, cutoff=250.0)
    assert raw_keys(server_client, "blobs/") == {}
    print(f"64 MiB blob: put {put_s:.2f}s, get {get_s:.2f}s")


def test_partial_upload_is_not_present_and_gc_collects_it(
    engine: EtcdEngine, server_client: etcd3.Etcd3Client
) -> None:
    sha = "ab" * 32
    server_client.put(f"blobs/{sha}", b"partial 100.0")  # an upload that crashed after chunk 0
    server_client.put(f"blobs/{sha}/0", b"x")
    orphan = "cd" * 32
    server_client.put(f"blobs/{orphan}/0", b"y")  # chunks whose marker GC already removed
    assert engine.touch_blobs([sha, orphan], now=200.0) == set()
    assert sorted(engine.blob_shas()) == sorted([sha, orphan])
    assert not engine.delete_blob_if_idle(sha, cutoff=50.0)
    assert engine.delete_blob_if_idle(sha, cutoff=150.0)
    assert engine.delete_blob_if_idle(orphan, cutoff=0.0)
    assert raw_keys(server_client, "blobs/") == {}
    # an upload resuming over a stale marker completes it
    server_client.put(f"blobs/{sha}", b"partial 100.0")
    engine.put_blob(sha, [b"x", b"y"], now=300.0)
    assert raw_keys(server_client, "blobs/") == {
        f"blobs/{sha}": b"300.0", f"blobs/{sha}/0": b"x", f"blobs/{sha}/1": b"y"
    }  # fmt: skip
    assert engine.touch_blobs([sha], now=400.0) == {sha}


def test_gc_racing_a_touch_keeps_the_blob(engine: EtcdEngine) -> None:
    sha = "ef" * 32
    engine.put_blob(sha, [b"z"], now=100.0)
    real_txn = engine._etcd.txn
    calls = 0

    def touch_between(request: object) -> object:  # GC read the last-use key, then a publisher
        nonlocal calls  # touches the blob before GC's conditional delete
        calls += 1
        if calls == 2:
            engine.touch_blobs([sha], now=300.0)
        return real_txn(request)

    engine._etcd.txn = touch_between  # type: ignore[method-assign]
    assert not engine.delete_blob_if_idle(sha, cutoff=200.0)
    assert engine.get_chunks([(sha, 0)]) == [b"z"]


def test_usage_counters_under_contention(etcd_url: str) -> None:
    engines = [EtcdEngine(etcd_url) for _ in range(6)]

    def bump(e: EtcdEngine) -> None:
        for _ in range(20):
            e.add_usage("bot", {("u1", "s"): 1, ("u/2", "s k"): 2})

    threads = [threading.Thread(target=bump, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engines[0].usage("bot") == {("u1", "s"): 120, ("u/2", "s k"): 240}
    for e in engines:
        e.close()


class _AnswerLost(grpc.RpcError):  # type: ignore[misc]  # grpc is untyped
    """What a client sees when a request reached etcd but its answer did not come back."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection reset after the request was sent"


class _LoseAnswers:
    """The KV stub of an endpoint, losing the answer of the first `n` transactions that
    `matches` picks, after etcd applied them."""

    def __init__(self, kv: Any, matches: Any, n: int = 1) -> None:
        self._kv, self._matches, self.left = kv, matches, n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)

    def Txn(self, request: Any, **kw: Any) -> Any:
        response = self._kv.Txn(request, **kw)
        if self.left and self._matches(request):
            self.left -= 1
            raise _AnswerLost()
        return response


def test_a_usage_batch_whose_answer_is_lost_counts_once(
    engine: EtcdEngine, server_client: etcd3.Etcd3Client
) -> None:
    engine.add_usage("bot", {("u", "s"): 1})
    ep = engine._etcd.endpoints[0]

    def bumps_usage(request: Any) -> bool:
        return any(op.request_put.key.startswith(b"usage/agents/") for op in request.success)

    lossy = _LoseAnswers(ep.kv, bumps_usage)
    ep.kv = lossy
    engine.add_usage("bot", {("u", "s"): 2, ("u", "t"): 5})  # applied, answer lost, retried
    assert lossy.left == 0
    lossy.left = 1
    engine.add_usage("bot", {("u", "s"): 10})
    assert lossy.left == 0
    assert engine.usage("bot") == {("u", "s"): 13, ("u", "t"): 5}
    # the batches' markers are on a lease: they go by themselves
    marks = list(server_client.get_prefix("usage/batches/"))
    assert len(marks) == 3 and all(meta.lease_id for _, meta in marks)


def test_put_blob_uploads_a_blob_gc_swept_after_it_was_seen(engine: EtcdEngine) -> None:
    sha = "12" * 32
    engine.put_blob(sha, [b"old"], now=100.0)
    real_touch = engine.touch_blobs

    def swept_first(shas: Any, now: float) -> set[str]:  # GC deletes it between the two steps
        assert engine.delete_blob_if_idle(sha, cutoff=1e12)
        return real_touch(shas, now)

    engine.touch_blobs = swept_first  # type: ignore[method-assign]
    engine.put_blob(sha, [b"old"], now=200.0)
    engine.touch_blobs = real_touch  # type: ignore[method-assign]
    assert engine.get_chunks([(sha, 0)]) == [b"old"]
    assert engine.touch_blobs([sha], now=300.0) == {sha}


# ----------------------------------------------------------------- revisions and the log


@pytest.mark.serial
def test_changes_waits_then_times_out(engine: EtcdEngine) -> None:
    rev = engine.commit("agents/a", [CommitOp(scope=Scope.shared("a"), manifest=manifest("x", 1),
                                              expect=0)])  # fmt: skip
    t0 = time.monotonic()
    assert engine.changes("agents/a", rev, timeout=0.3) == []
    assert 0.25 < time.monotonic() - t0 < 2.0
    assert engine.changes("agents/a", rev, timeout=0) == []
    later: list[Revision] = []

    def commit_soon() -> None:
        time.sleep(0.2)
        ops = [CommitOp(scope=Scope.shared("a"), manifest=manifest(n, v), expect=v - 1)
               for n, v in (("x", 2), ("y", 1))]  # fmt: skip
        later.append(engine.commit("agents/a", ops))

    t = threading.Thread(target=commit_soon)
    t.start()
    got = engine.changes("agents/a", rev, timeout=5)
    t.join()
    assert [(c.op, c.skill, c.version, c.revision) for c in got] == [
        ("put", "x", 2, later[0]), ("put", "y", 1, later[0])
    ]  # fmt: skip
    # a domain that does not exist yet: nothing, then a reset once it is created
    assert engine.changes("agents/b", Revision(epoch="", counter=0), timeout=0.1) == []


def test_compaction_means_reset(
    etcd_server: EtcdServer, engine: EtcdEngine, server_client: etcd3.Etcd3Client
) -> None:
    scope = Scope.shared("a")
    r1 = engine.commit("agents/a", [CommitOp(scope=scope, manifest=manifest("x", 1), expect=0)])
    engine.commit("agents/b", [CommitOp(scope=Scope.shared("b"), manifest=manifest("y", 1),
                                        expect=0)])  # fmt: skip
    r2 = engine.commit("agents/a", [CommitOp(scope=scope, manifest=manifest("x", 2), expect=1)])
    assert [c.version for c in engine.changes("agents/a", r1, timeout=1)] == [2]
    _, meta = server_client.get("agents/b/rev")
    server_client.compact(meta.mod_revision, physical=True)
    # the log no longer reaches back to r1: reload
    assert engine.changes("agents/a", r1, timeout=1) == [reset(r2)]
    # r2 is current: the compaction of older revisions is no reason to reset
    assert engine.changes("agents/a", r2, timeout=0.2) == []
    r3 = engine.commit("agents/a", [CommitOp(scope=scope, manifest=manifest("x", 3), expect=2)])
    assert [(c.version, c.revision) for c in engine.changes("agents/a", r2, timeout=1)] == [(3, r3)]


def reset(rev: Revision) -> skillfs.Change:
    return skillfs.Change(revision=rev, op="reset")


def test_data_replaced_means_new_epoch(etcd_server: EtcdServer, engine: EtcdEngine) -> None:
    scope = Scope.shared("a")
    r1 = engine.commit("agents/a", [CommitOp(scope=scope, manifest=manifest("x", 1), expect=0)])
    etcd_server.flush()  # the data is gone (a wipe, a restore of another history)
    assert engine.changes("agents/a", r1, timeout=1) == [reset(EMPTY)]
    r2 = engine.commit("agents/a", [CommitOp(scope=scope, manifest=manifest("x", 1), expect=0)])
    assert r2.epoch != r1.epoch and r2.counter > r1.counter
    assert engine.changes("agents/a", r1, timeout=1) == [reset(r2)]
    assert engine.changes("agents/a", Revision(epoch=r2.epoch, counter=r2.counter + 5), 1) == [
        reset(r2)
    ]  # the counter went back


# ----------------------------------------------------------------- revisions over the gateway


def test_gateway_reads_are_the_grpc_reads(
    engine: EtcdEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One domain (a range read), a never-written one, a few, and more than one transaction
    holds (packed in several): each domain's last commit, read over the JSON gateway — the
    same answers the gRPC read gives, and the engine's `revisions` takes the gateway's."""
    written = [f"agents/bot-{i}" for i in range(3)]
    committed = {}
    for i, domain in enumerate(written):
        ops = [CommitOp(scope=Scope.shared(f"bot-{i}"), manifest=manifest("s", 1), expect=0)]
        committed[domain] = engine.commit(domain, ops)
    many = written + [f"agents/never-{i}" for i in range(ec.MAX_TXN_OPS + 5)]
    asks = ([written[2]], ["agents/never-0"], written, many)
    for domains in asks:
        want = {d: committed.get(d) for d in domains}
        assert engine._gateway.revisions(domains) == want
        assert engine.revisions(domains) == want

    def no_grpc(request: Any) -> Any:
        raise AssertionError("read over gRPC")

    monkeypatch.setattr(engine._etcd, "range", no_grpc)
    monkeypatch.setattr(engine._etcd, "txn", no_grpc)
    for domains in asks:
        assert engine.revisions(domains) == {d: committed.get(d) for d in domains}


def test_a_forked_child_reads_over_its_own_gateway_connection(engine: EtcdEngine) -> None:
    """A child forked with an idle gateway connection opens its own: on the parent's, the
    two processes' answers would mix."""
    revs = {}
    for a in ("fa", "fb"):
        ops = [CommitOp(scope=Scope.shared(a), manifest=manifest("s", 1), expect=0)]
        revs[f"agents/{a}"] = engine.commit(f"agents/{a}", ops)
    assert engine.revisions(["agents/fa"]) == {"agents/fa": revs["agents/fa"]}

    def child() -> None:
        want = {"agents/fb": revs["agents/fb"]}
        ok = all(engine._gateway.revisions(["agents/fb"]) == want for _ in range(300))
        os._exit(0 if ok else 1)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    for _ in range(300):
        assert engine._gateway.revisions(["agents/fa"]) == {"agents/fa": revs["agents/fa"]}
    proc.join(30)
    assert proc.exitcode == 0


@pytest.mark.serial
@pytest.mark.slow
def test_gateway_reads_rest_then_follow_the_failover(
    etcd_cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The member in use is killed: the gateway read gives up at once (the engine reads over
    gRPC, which rotates), rests — even once the gRPC client is on a live member — then reads
    from the member that client moved to."""
    monkeypatch.setattr(etcd_gateway, "REST", 3.0)
    store = _cluster_store(etcd_cluster, first=1, timeout=2.0)
    engine = raw_engine(store)
    assert isinstance(engine, EtcdEngine)
    rev = store.publish(ALICE, "a", {"SKILL.md": skill_md("a")}).revision
    domain = [ALICE.domain]
    gateway = engine._gateway
    try:
        assert gateway.revisions(domain) == {ALICE.domain: rev}  # member 1's gateway
        etcd_cluster.kill(1)
        with caplog.at_level(logging.WARNING, logger="skillfs.engines.etcd.gateway"):
            t0 = time.monotonic()
            assert gateway.revisions(domain) is None
            assert time.monotonic() - t0 < 1.0
            assert engine.revisions(domain) == {ALICE.domain: rev}  # over gRPC: it rotates
            assert engine._etcd.endpoint != etcd_cluster.endpoints[1]
            assert time.monotonic() - t0 < 2.5  # still within the rest
            assert gateway.revisions(domain) is None  # resting: a live member, not tried
            time.sleep(max(0.0, t0 + 3.1 - time.monotonic()))
            assert gateway.revisions(domain) == {ALICE.domain: rev}  # the member moved to
        warned = [r.getMessage() for r in caplog.records if "gateway read" in r.getMessage()]
        assert len(warned) == 1 and etcd_cluster.endpoints[1] in warned[0], warned
    finally:
        _restore(etcd_cluster)
    store.close()


# ----------------------------------------------------------------- connections and faults


def test_unreachable_store_names_its_endpoints_fast() -> None:
    ports = [free_port(), free_port()]
    url = f"etcd://u:pw@{HOST}:{ports[0]},{HOST}:{ports[1]}"
    e = EtcdEngine(url, timeout=1.0, retry_for=3.0)
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        e.ping()
    assert time.monotonic() - t0 < 3.5
    msg = str(err.value)
    assert f"{HOST}:{ports[0]}" in msg and f"{HOST}:{ports[1]}" in msg and "pw" not in msg
    e.close()


@pytest.mark.slow
def test_recovers_when_the_server_comes_back(etcd_server: EtcdServer, etcd_url: str) -> None:
    store = skillfs.Store(EtcdEngine(etcd_url, timeout=1.0, retry_for=1.0), retry_for=0.5)
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    etcd_server.kill()
    try:
        with pytest.raises(StoreUnavailable, match=etcd_server.endpoint):
            store.manifest(ALICE, "a")
    finally:
        etcd_server.start()
    deadline = time.monotonic() + 5
    while True:  # the same engine: its channel reconnects within about a second
        try:
            assert store.manifest(ALICE, "a").version == 1
            break
        except StoreUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    store.close()


def _cluster_store(cluster: EtcdCluster, first: int = 0, **kw: Any) -> skillfs.Store:
    """A store over every member, `first` listed first (the member calls go to)."""
    order = [first] + [i for i in range(cluster.size) if i != first]
    url = "etcd://" + ",".join(cluster.endpoints[i] for i in order)
    return skillfs.Store(EtcdEngine(ns_url(url), **kw))


def only(cluster: EtcdCluster, i: int, store: skillfs.Store) -> str:
    """The URL of `store` (its prefix) on member `i` alone."""
    return f"etcd://{cluster.endpoints[i]}?{store.url.split('?', 1)[1]}"


def _restore(cluster: EtcdCluster) -> None:
    cluster.start()
    cluster.leader_index()


@pytest.mark.slow
def test_rotation_when_the_member_in_use_is_killed(
    etcd_cluster: EtcdCluster, caplog: pytest.LogCaptureFixture
) -> None:
    store = _cluster_store(etcd_cluster, first=1, timeout=2.0)
    engine = raw_engine(store)
    assert isinstance(engine, EtcdEngine)
    c = store.publish(ALICE, "a", {"SKILL.md": skill_md("a", "0")})
    assert engine._etcd.endpoint == etcd_cluster.endpoints[1]
    assert engine.changes_many({ALICE.domain: c.revision}, 0.1) == {}  # the watch stream opens
    etcd_cluster.kill(1)
    try:
        with caplog.at_level("WARNING", logger="skillfs.engines.etcd.watch"):
            engine.changes_many({ALICE.domain: c.revision}, 2.0)  # the stream breaks
        said = [r.getMessage() for r in caplog.records if "watch stream" in r.getMessage()]
        assert said and all("\n" not in m and "UNAVAILABLE" in m for m in said), said
        t0 = time.monotonic()
        c = store.publish(ALICE, "a", {"SKILL.md": skill_md("a", "1")})
        first_write = time.monotonic() - t0
        for n in range(2, 20):
            c = store.publish(ALICE, "a", {"SKILL.md": skill_md("a", str(n))})
        assert c.version == 20 and engine._etcd.endpoint != etcd_cluster.endpoints[1]
        assert store.read(ALICE, "a", "SKILL.md") == skill_md("a", "19")
        assert first_write < 5.0
    finally:
        _restore(etcd_cluster)
    store.close()


@pytest.mark.slow
def test_writes_continue_with_one_member_down(etcd_cluster: EtcdCluster) -> None:
    etcd_cluster.stop(0)
    try:
        store = _cluster_store(etcd_cluster, first=0, timeout=2.0)  # the dead member first
        for n in range(10):
            store.publish(SHARED, f"s{n}", {"SKILL.md": skill_md(f"s{n}")})
        assert len(store.skills(SHARED)) == 10
        assert store.revision("support-bot") is not None
    finally:
        _restore(etcd_cluster)
    # the member that was down catches up; a store on it alone sees every write
    alone = skillfs.Store(EtcdEngine(only(etcd_cluster, 0, store)))
    assert len(alone.skills(SHARED)) == 10
    alone.close()
    store.close()


@pytest.mark.slow
def test_a_hung_member_times_out_and_rotates(etcd_cluster: EtcdCluster) -> None:
    """SIGSTOP: the member accepts connections but never answers. Nothing may hang."""
    store = _cluster_store(etcd_cluster, first=2, timeout=1.0)
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    pid = etcd_cluster.pid(2)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        assert store.publish(ALICE, "a", {"SKILL.md": skill_md("a", "2")}).version == 2
        assert store.manifest(ALICE, "a").version == 2
        assert time.monotonic() - t0 < 8.0
    finally:
        os.kill(pid, signal.SIGCONT)
        _restore(etcd_cluster)
    store.close()


@pytest.mark.serial
@pytest.mark.slow
def test_c7_leader_kill_loses_no_acknowledged_write(etcd_cluster: EtcdCluster) -> None:
    leader = etcd_cluster.leader_index()
    store = _cluster_store(etcd_cluster, first=leader, timeout=2.0)
    store.retry_for = 20.0
    acked: list[tuple[int, str, int]] = []  # (version, commit id, payload) of acknowledged writes
    killed_at: list[int] = []
    errors: list[Exception] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            files = {"SKILL.md": skill_md("s", str(n)), "n": str(n).encode()}
            try:
                c = store.publish(SHARED, "s", files)
            except Exception as exc:
                errors.append(exc)
                return
            acked.append((c.version, c.commit_id, n))

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(1.0)
        killed_at.append(len(acked))
        etcd_cluster.kill(leader)
        time.sleep(3.0)
        stop.set()
        t.join(30)
        assert not t.is_alive()
    finally:
        stop.set()
        _restore(etcd_cluster)
    assert not errors
    assert killed_at[0] > 5 and len(acked) > killed_at[0] + 5, (killed_at, len(acked))
    # every acknowledged write is there, read through the member that was killed
    reader = skillfs.Store(EtcdEngine(only(etcd_cluster, leader, store)))
    kept = {m.version: m for m in reader.history(SHARED, "s")}
    for version, commit_id, n in acked:
        assert kept[version].commit_id == commit_id
        entry = kept[version].files["n"]
        assert reader.read_entry(entry) == str(n).encode()
    print(f"C7: {len(acked)} writes acknowledged, {len(acked) - killed_at[0]} after the kill")
    reader.close()
    store.close()


# ----------------------------------------------------------------- auth and TLS


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[EtcdServer]:
    """A private server with auth enabled and one user, root:rootpw."""
    with EtcdServer(tmp_path / "etcd-auth") as server:
        c = server.client()
        c.authstub.UserAdd(etcd3.etcdrpc.AuthUserAddRequest(name="root", password="rootpw"), 5)
        c.authstub.UserGrantRole(
            etcd3.etcdrpc.AuthUserGrantRoleRequest(user="root", role="root"), 5
        )
        c.authstub.AuthEnable(etcd3.etcdrpc.AuthEnableRequest(), 5)
        c.close()
        yield server


@pytest.mark.slow
def test_user_and_password(auth_server: EtcdServer, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"etcd://root:rootpw@{auth_server.endpoint}?prefix=p/"
    store = skillfs.open_store(url)
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    assert store.read(ALICE, "a", "SKILL.md") == skill_md("a")
    engine = raw_engine(store)
    assert isinstance(engine, EtcdEngine)
    domain = [ALICE.domain]
    now = engine.revisions(domain)
    assert engine._gateway.revisions(domain) == now  # with the token the gRPC client got
    sent: list[bytes] = []
    request = etcd_gateway._Connection.request

    def counted(conn: Any, data: bytes) -> tuple[int, bytes]:
        sent.append(data)
        return request(conn, data)

    monkeypatch.setattr(etcd_gateway._Connection, "request", counted)
    engine._etcd.endpoints[0].token = "expired.token"  # the server forgot it (TTL): log in again
    assert engine._gateway.revisions(domain) is None  # refused: over gRPC, which logs in again
    assert len(sent) == 1 and b"Authorization: expired.token" in sent[0]
    assert engine._gateway.revisions(domain) is None
    assert len(sent) == 1  # not sent again with the refused token
    assert store.manifest(ALICE, "a").version == 1
    assert engine._gateway.revisions(domain) == now  # the new token
    rev = store.revision("support-bot")
    assert rev is not None
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a", "2")})
    assert [c.version for c in engine.changes("agents/support-bot", rev, 1)] == [2]  # watch too
    store.close()
    wrong = EtcdEngine(f"etcd://root:wrong@{auth_server.endpoint}")
    assert wrong._gateway.revisions(domain) is None  # no token: over gRPC, which reports it
    with pytest.raises(PermissionDenied, match="credentials"):
        wrong.revisions(domain)
    with pytest.raises(PermissionDenied, match="user"):
        EtcdEngine(f"etcd://{auth_server.endpoint}").ping()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def tls_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """etcd serving TLS, with client-certificate auth unless the test's parameter is False;
    yields (endpoint, cert dir)."""
    d = tmp_path / "pki"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "1", "-subj", "/CN=skillfs-test-ca", cwd=d)  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):  # fmt: skip
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", "-extfile",
                 f"{name}.ext", cwd=d)  # fmt: skip
    client, peer = free_port(), free_port()
    argv = [
        "etcd", "--name", "tls", "--data-dir", str(tmp_path / "data"),
        "--listen-client-urls", f"https://{HOST}:{client}",
        "--advertise-client-urls", f"https://{HOST}:{client}",
        "--listen-peer-urls", f"http://{HOST}:{peer}",
        "--initial-advertise-peer-urls", f"http://{HOST}:{peer}",
        "--initial-cluster", f"tls=http://{HOST}:{peer}",
        "--cert-file", str(d / "server.pem"), "--key-file", str(d / "server.key"),
    ]  # fmt: skip
    if getattr(request, "param", True):
        argv += ["--client-cert-auth", "--trusted-ca-file", str(d / "ca.pem")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
    with open(tmp_path / "etcd.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        yield f"{HOST}:{client}", d
    finally:
        proc.kill()
        proc.wait(10)


def _wait_up(engine: EtcdEngine) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            engine.ping()
            return
        except StoreUnavailable:
            assert time.monotonic() < deadline, "TLS etcd did not come up"
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("tls_server", [False], indirect=True)
def test_gateway_reads_over_tls(tls_server: tuple[str, Path]) -> None:
    """Server TLS (`cacert=`): the gateway reads go over TLS too, checked against the CA."""
    endpoint, d = tls_server
    engine = EtcdEngine(f"etcd://{endpoint}?cacert={d / 'ca.pem'}", timeout=2.0)
    _wait_up(engine)
    ops = [CommitOp(scope=ALICE, manifest=manifest("a", 1), expect=0)]
    rev = engine.commit(ALICE.domain, ops)
    assert engine._gateway.revisions([ALICE.domain]) == {ALICE.domain: rev}
    engine.close()


@pytest.mark.slow
def test_tls_with_client_certificate(tls_server: tuple[str, Path]) -> None:
    endpoint, d = tls_server
    url = (f"etcd://{endpoint}?cacert={d / 'ca.pem'}&cert={d / 'client.pem'}"
           f"&key={d / 'client.key'}")  # fmt: skip
    engine = EtcdEngine(url, timeout=2.0)
    _wait_up(engine)
    store = skillfs.Store(engine)
    store.publish(ALICE, "a", {"SKILL.md": skill_md("a")})
    assert store.read(ALICE, "a", "SKILL.md") == skill_md("a")
    domain = [ALICE.domain]
    now = engine.revisions(domain)
    assert now[ALICE.domain] is not None
    # etcd 3.4's gateway cannot call its own gRPC service when clients need certificates
    # (503, "connection closed"): the engine reads over gRPC (docs/engine-etcd.md)
    assert engine._gateway.revisions(domain) is None
    store.close()
    no_client_cert = EtcdEngine(f"etcd://{endpoint}?cacert={d / 'ca.pem'}", timeout=1.0,
                                retry_for=1.0)  # fmt: skip
    with pytest.raises(StoreUnavailable):
        no_client_cert.ping()
    no_client_cert.close()


def test_a_version_whose_predecessor_retention_dropped_is_still_in_the_log(etcd_url: str) -> None:
    """The log dates version w+1 by the history copy of w its commit wrote; a policy that
    keeps no replaced version drops that copy right after the commit. The live key dates the
    current version then (review: with `keep_versions=0` a put went unreported, and a
    worker's next step kept showing the old version: C3)."""
    policy = skillfs.HistoryPolicy(keep_versions=0, keep_days=0)
    scope, domain = Scope.shared("kept-none"), "agents/kept-none"
    with (
        skillfs.open_store(etcd_url, history_policy=policy) as store,
        skillfs.Skills(store, "kept-none", "u") as skills,
    ):
        store.publish(scope, "x", {"SKILL.md": skill_md("x", "One.")})
        assert "One." in skills.snapshot().load("x")
        before = store.engine.revisions([domain])[domain]
        assert before is not None
        v2 = store.publish(scope, "x", {"SKILL.md": skill_md("x", "Two.")})
        assert [m.version for m in store.history(scope, "x")] == [2]  # version 1 dropped
        assert "Two." in skills.snapshot().load("x")
        got = store.engine.changes(domain, before, 0)
        assert [(c.op, c.skill, c.version, c.revision) for c in got] == [
            ("put", "x", 2, v2.revision)
        ]
