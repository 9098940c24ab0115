"""Byte quotas that hold fleet-wide (docs/security.md, "Quotas"), on every engine and
topology: what a commit adds (manifests, kept in history once replaced, and the blobs its
versions bring) is charged in the engine's atomic commit against persisted counters, per
scope and per token, so a commit past a quota writes nothing, two writers racing for the
last bytes cannot both pass, another store object (another server) sees the same counters,
and GC re-counts them from what is kept. Through a skillfs server (grpc://) the server's
own limits and tokens apply: tests/server/test_quotas_server.py."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import skillfs
from skillfs.errors import QuotaExceeded, TooLarge
from skillfs.model import Scope
from skillfs.store.limits import Limits
from skillfs.store.quotas import Credential, acting_as
from skillfs.store.retention import HistoryPolicy
from tests.helpers import skill_md

AGENT = "support-bot"
ALICE, BOB = Scope.user(AGENT, "alice"), Scope.user(AGENT, "bob")
SHARED = Scope.shared(AGENT)
BLOB = 10_000


def files(name: str, tag: str = "") -> dict[str, bytes]:
    """A skill of ~10.5 KB: its SKILL.md and a 10,000-byte file of its own."""
    return {"SKILL.md": skill_md(name), "data.bin": (tag + name).encode().ljust(BLOB, b".")}


@pytest.fixture
def url(store_url: str) -> str:
    if store_url.startswith("grpc://"):
        pytest.skip("a skillfs server holds its own limits: tests/server/test_quotas_server.py")
    return store_url


def opened(url: str, quota: int | None = 35_000, **options: object) -> skillfs.Store:
    return skillfs.open_store(url, limits=Limits(scope_quota=quota), **options)


def race(work: Callable[[int], None], n: int) -> None:
    """`work(0)` to `work(n - 1)` at once, in threads, each given a minute."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def test_a_commit_past_a_scopes_quota_writes_nothing_and_says_which(url: str) -> None:
    with opened(url, 32_000) as store, opened(url, 32_000) as other:  # as two servers
        store.publish(ALICE, "one", files("one"))
        other.publish(ALICE, "two", files("two"))
        store.publish(ALICE, "one", files("one"))  # the same bytes again: its manifest only
        before = store.revision(AGENT)
        with pytest.raises(QuotaExceeded) as refused:
            other.publish(ALICE, "three", files("three"))
        said = str(refused.value)
        assert said.startswith(f"quota of scope {ALICE} exceeded: it holds ")
        assert "of its 32000, and this commit adds " in said
        assert "nothing was written" in said and "Limits.scope_quota" in said
        assert isinstance(refused.value, TooLarge)  # RESOURCE_EXHAUSTED, 413
        assert store.revision(AGENT) == before and store.skills(ALICE) == ["one", "two"]
        store.publish(SHARED, "three", files("three"))  # another scope holds its own
        store.publish(ALICE, "one", {"SKILL.md": skill_md("one")})  # small enough still


def test_a_token_is_charged_across_the_scopes_it_writes(url: str) -> None:
    """What a skillfs server does for a token's calls (`acting_as`): the commits of one
    token are charged to it in every scope of the agent, each scope within its own quota."""
    with opened(url, quota=None) as store:
        with acting_as(Credential(name="worker", quota_bytes=25_000)):
            store.publish(ALICE, "one", files("one"))
            store.publish(BOB, "two", files("two"))
            with pytest.raises(QuotaExceeded, match="quota of token 'worker' in agents/"):
                store.publish(BOB, "three", files("three"))
        store.publish(BOB, "three", files("three"))  # the store's own credentials: no token
        assert store.skills(BOB) == ["three", "two"]


def test_racing_writers_cannot_both_pass_a_quota(url: str) -> None:
    """Eight writers on two store objects race for a scope with room for three skills:
    exactly three land, in the engine's atomic step."""
    stores = [opened(url), opened(url)]
    landed: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        name = f"s{i}"
        try:
            stores[i % 2].publish(ALICE, name, files(name))
        except QuotaExceeded:
            with lock:
                refused.append(name)
            return
        with lock:
            landed.append(name)

    race(write, 8)
    try:
        assert len(landed) == 3 and len(refused) == 5, (landed, refused)
        assert sorted(stores[0].skills(ALICE)) == sorted(landed)
    finally:
        for s in stores:
            s.close()


def test_gc_recounts_what_is_kept(url: str) -> None:
    """Deleted skills whose history retention dropped, re-counted by GC, free their bytes;
    a counter GC finds too low (a commit it saw twice, a store older than quotas) is raised
    to what is kept."""
    drop_all = HistoryPolicy(keep_versions=0, keep_days=0)
    with opened(url, history_policy=drop_all) as store:
        for name in ("one", "two", "three"):
            store.publish(ALICE, name, files(name))
        with pytest.raises(QuotaExceeded):
            store.publish(ALICE, "four", files("four"))
        for name in ("one", "two"):
            store.delete(ALICE, name)
        with pytest.raises(QuotaExceeded):  # the deleted versions are still kept
            store.publish(ALICE, "four", files("four"))
        store.gc(grace=0)
        store.publish(ALICE, "four", files("four"))
        used = store.engine.quota_used(f"agents/{AGENT}")
        assert used is not None
        held = used[f"scope:{ALICE}"]
        store.engine.adjust_quota(f"agents/{AGENT}", {f"scope:{ALICE}": -held})
        store.gc(grace=0)
        assert store.engine.quota_used(f"agents/{AGENT}")[f"scope:{ALICE}"] == held  # type: ignore[index]


def test_etcd_commits_of_many_scopes_are_too_large_not_a_failed_transaction(
    store_url: str,
) -> None:
    """On etcd a commit's counters share its transaction with its manifests and their
    history copies, and each scope adds compares (its counter, its checked entries): updating
    62 skills in 62 scopes at once does not fit one transaction, and is refused before etcd
    sees it, saying so, where the same skills in a few scopes each fit."""
    if not store_url.startswith("etcd://"):
        pytest.skip("etcd's limit of operations per transaction")
    with opened(store_url, quota=None) as store:
        scopes = [Scope.user(AGENT, f"u{i}") for i in range(store.max_ops or 0)]
        for part in range(0, len(scopes), 20):
            store.commit(
                [skillfs.Put(s, "s", {"SKILL.md": skill_md("s")}) for s in scopes[part : part + 20]]
            )
        before = store.revision(AGENT)
        again = [skillfs.Put(s, "s", {"SKILL.md": skill_md("s", "v2")}) for s in scopes]
        with pytest.raises(TooLarge, match="commit fewer skills, or fewer scopes, at once") as e:
            store.commit(again)
        assert f"{len(scopes)} skill(s) in {len(scopes)} scope(s)" in str(e.value)
        assert store.revision(AGENT) == before


def test_charges_outside_a_commit_race_for_the_quota_like_commits(url: str) -> None:
    """A token's upload (or the usage counters it creates) is charged outside a commit, in
    one atomic step of its own (`Engine.charge_quota`): eight charges of 6,000 bytes on two
    store objects race for a quota of 20,000 and exactly three pass; a refused one adds
    nothing and names the quota; a refund gives bytes back."""
    domain = f"agents/{AGENT}"
    stores = [opened(url), opened(url)]
    results: list[bool] = []
    lock = threading.Lock()

    def charge(i: int) -> None:
        with acting_as(Credential(name="worker", quota_bytes=20_000)):
            try:
                stores[i % 2].charge_token(domain, 6_000, "this upload")
                ok = True
            except QuotaExceeded as exc:
                assert "this upload adds 6000; nothing was written" in str(exc)
                ok = False
        with lock:
            results.append(ok)

    race(charge, 8)
    try:
        assert sorted(results) == [False] * 5 + [True] * 3
        assert (stores[0].engine.quota_used(domain) or {})["token:worker"] == 18_000
        assert stores[1].charge_token(domain, 6_000, "this upload") is None  # no token acts
        with acting_as(Credential(name="worker", quota_bytes=20_000)):
            charge_ = stores[1].charge_token(domain, 2_000, "this upload")
            assert charge_ is not None
            stores[1].refund(domain, charge_, 5_000)
        assert (stores[0].engine.quota_used(domain) or {})["token:worker"] == 15_000
    finally:
        for s in stores:
            s.close()
