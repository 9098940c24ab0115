"""Freshness (docs/design.md §3 C3-C5) inside one process: what an unchanged snapshot costs, what a
change for another user costs, and what happens when the store's revision jumps or goes back."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

import skillfs
from skillfs import Market, Scope, Skills
from skillfs.engines.base import Engine
from skillfs.errors import StoreUnavailable
from skillfs.model import Revision
from skillfs.runtime.follower import Follower
from skillfs.store.feed import Subscription
from tests.runtime_helpers import CountingEngine, counting_store, md, memory_store

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
BOB = Scope.user("bot", "bob")
TEAM = Scope.market("team")


def settle(skills: Skills) -> None:
    """Wait until every follower's watch has caught up with the store (no pending changes)."""
    for f in skills.followers:
        rev = skills.store.domain_revisions([f.domain])[f.domain]
        if rev is not None:
            assert f.wait_for(rev, 5.0)


def test_unchanged_snapshot_is_one_revisions_call_and_nothing_else() -> None:
    store, counter = counting_store()
    for i in range(50):
        store.publish(SHARED, f"s{i}", {"SKILL.md": md(f"s{i}"), "r.md": b"x" * 2000})
    store.publish(TEAM, "m", {"SKILL.md": md("m")})
    skills = Skills(store, "bot", "alice", [Market("team")])
    first = skills.snapshot()
    first.prompt()
    settle(skills)
    counter.clear()
    me = threading.get_ident()
    for _ in range(100):
        snap = skills.snapshot()
        snap.prompt()
        snap.tools()
        assert snap is first
    calls = [c for c in counter.calls if c.thread == me]
    assert [c.name for c in calls] == ["revisions"] * 100
    assert calls[0].args == (["agents/bot", "markets/team"],)  # agent and market together


def test_other_users_changes_never_reload_this_users_scopes() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    store, counter = counting_store(url)
    bobs = skillfs.open_store(url)  # another replica: its commit's own reads are not counted
    store.publish(SHARED, "s", {"SKILL.md": md("s")})
    store.publish(ALICE, "a", {"SKILL.md": md("a")})
    skills = Skills(store, "bot", "alice")
    first = skills.snapshot()
    counter.clear()
    for i in range(20):
        bobs.publish(BOB, f"b{i}", {"SKILL.md": md(f"b{i}")})
        snap = skills.snapshot()
        assert snap.token == first.token and snap.merged is first.merged
        assert snap.revisions["agents/bot"] != first.revisions["agents/bot"]
    settle(skills)
    mine = [
        c
        for c in counter.calls  # every thread: the watch too
        if c.name in ("load_scope", "load_skills") and c.args[0] in (SHARED, ALICE)
    ]
    assert mine == []

    # a change in alice's scope reloads that one skill, once, and nothing else of hers
    counter.clear()
    me = threading.get_ident()
    store.publish(ALICE, "a", {"SKILL.md": md("a", "edited")})
    published = len(counter.calls)  # the publish's own reads are on this thread before here
    assert skills.snapshot().skill("a").description == "edited"
    settle(skills)
    loads = [
        (c.name, c.args)
        for i, c in enumerate(counter.calls)
        if c.name in ("load_scope", "load_skills") and (c.thread != me or i >= published)
    ]
    assert loads == [("load_skills", (ALICE, ["a"]))]


def test_many_users_share_one_follower_per_agent() -> None:
    store = memory_store()
    a, b = Skills(store, "bot", "alice", [Market("team")]), Skills(store, "bot", "bob")
    assert a.followers[0] is b.followers[0]
    assert [f.domain for f in a.followers] == ["agents/bot", "markets/team"]
    other = Skills(memory_store(), "bot", "alice")
    assert other.followers[0] is not a.followers[0]  # one per store


def test_first_snapshot_and_a_new_user_load_only_their_scopes() -> None:
    store, counter = counting_store()
    store.publish(SHARED, "s", {"SKILL.md": md("s")})
    store.publish(BOB, "b", {"SKILL.md": md("b")})
    me = threading.get_ident()
    counter.clear()
    Skills(store, "bot", "alice").snapshot()
    # the second revision read proves the two loads saw one state (C4); nothing moved
    # in between, so the change log needs no read
    assert counter.names(me) == ["revisions", "load_scope", "load_scope", "revisions"]
    counter.clear()
    Skills(store, "bot", "carol").snapshot()  # shared scope already warm
    assert counter.names(me) == ["revisions", "load_scope", "revisions"]


def test_watch_keeps_the_cache_warm_between_steps() -> None:
    store, counter = counting_store()
    skills = Skills(store, "bot", "alice")
    skills.snapshot()
    rev = store.publish(ALICE, "a", {"SKILL.md": md("a"), "r.md": b"ref"}).revision
    assert skills.followers[0].wait_for(rev, 5.0)  # applied by the watch, files prefetched
    counter.clear()
    me = threading.get_ident()
    snap = skills.snapshot()
    assert [s.id for s in snap.skills] == ["a"]
    assert snap.load("a", "r.md") == "ref"
    assert counter.names(me) == ["revisions"]


# ------------------------------------------------------------------ C5: resets


class Switch:
    """An engine that can be swapped under the worker, as a failover or a restore does."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __getattr__(self, name: str) -> object:
        return getattr(self.engine, name)


def test_restored_backup_going_back_reloads_everything(tmp_path: Path) -> None:
    live_path, backup_path = tmp_path / "live.db", tmp_path / "backup.db"
    live = skillfs.open_store(f"sqlite:///{live_path}")
    live.publish(ALICE, "a", {"SKILL.md": md("a", "version one")})
    live.publish(SHARED, "s", {"SKILL.md": md("s")})
    with sqlite3.connect(live_path) as src, sqlite3.connect(backup_path) as dst:
        src.backup(dst)
    live.publish(ALICE, "a", {"SKILL.md": md("a", "version two")})
    live.publish(ALICE, "lost", {"SKILL.md": md("lost")})

    switch = Switch(live.engine)
    worker = skillfs.Store(cast(Engine, switch))
    skills = Skills(worker, "bot", "alice")
    before = skills.snapshot()
    assert before.skill("a").description == "version two"
    switch.engine = skillfs.open_store(f"sqlite:///{backup_path}").engine  # the restore
    time.sleep(0.01)
    after = skills.snapshot()
    rb, ra = before.revisions["agents/bot"], after.revisions["agents/bot"]
    assert rb is not None and ra is not None
    assert ra.epoch == rb.epoch and ra.counter < rb.counter  # same line, went back
    assert after.skill("a").description == "version one"  # reloaded, not the stale cache
    assert [s.id for s in after.skills] == ["a", "s"]


def test_new_epoch_reloads_everything(tmp_path: Path) -> None:
    old = skillfs.open_store(f"sqlite:///{tmp_path / 'old.db'}")
    new = skillfs.open_store(f"sqlite:///{tmp_path / 'new.db'}")
    for i in range(5):  # the old line is ahead of the new one in counters
        old.publish(ALICE, "a", {"SKILL.md": md("a", f"old {i}")})
    new.publish(ALICE, "a", {"SKILL.md": md("a", "replica")})
    switch = Switch(old.engine)
    skills = Skills(skillfs.Store(cast(Engine, switch)), "bot", "alice")
    assert skills.snapshot().skill("a").description == "old 4"
    switch.engine = new.engine  # a failover to a replica that missed writes
    time.sleep(0.01)
    snap = skills.snapshot()
    assert snap.skill("a").description == "replica"
    new.publish(ALICE, "a", {"SKILL.md": md("a", "replica 2")})
    assert skills.snapshot().skill("a").description == "replica 2"


class Hooked(Switch):
    """A `Switch` that runs `then` once, right after its next `revisions` read: what another
    thread does between a step's revision read and its `Follower.at`."""

    then: Callable[[], None] | None = None

    def revisions(self, domains: list[str]) -> dict[str, Revision | None]:
        out: dict[str, Revision | None] = self.engine.revisions(domains)
        then, self.then = self.then, None
        if then is not None:
            then()
        return out


def test_an_old_epochs_log_fed_after_the_steps_read_does_not_hide_an_ack(tmp_path: Path) -> None:
    """The server's hub read the old line's log before a failover; its feed lands after a
    step read the new line. The fed cache is as old as that read, not as the feed: the step
    reloads and shows the write acknowledged on the new line (C3, C5)."""
    old = skillfs.open_store(f"sqlite:///{tmp_path / 'old.db'}")
    new = skillfs.open_store(f"sqlite:///{tmp_path / 'new.db'}")
    old.publish(SHARED, "s", {"SKILL.md": md("s")})
    r1 = old.publish(ALICE, "a", {"SKILL.md": md("a", "old line")}).revision
    switch = Hooked(old.engine)
    follower = Follower(skillfs.Store(cast(Engine, switch)), "agents/bot")
    skills = Skills(follower.store, "bot", "alice", followers=lambda domain: follower)
    assert skills.snapshot().skill("a").description == "old line"
    old.publish(BOB, "b", {"SKILL.md": md("b")})
    hub_read = old.engine.changes("agents/bot", r1, 0)
    read_at = time.monotonic()
    new.publish(ALICE, "a", {"SKILL.md": md("a", "acknowledged on the new line")})
    switch.engine = new.engine  # the failover
    time.sleep(0.01)
    switch.then = lambda: follower.on_watch(r1, hub_read, read_at, read_at)
    assert skills.snapshot().skill("a").description == "acknowledged on the new line"


def test_snapshots_of_one_worker_never_go_back() -> None:
    store = memory_store()
    skills = Skills(store, "bot", "alice")
    seen: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def step(me: int) -> None:
        try:
            while not done.is_set():
                snap = skills.snapshot()
                if snap.skills:
                    version = snap.skill("a").version
                    assert version is not None
                    assert f"v{version}\n" in snap.load("a")  # that very version's document
                    seen.setdefault(me, []).append(version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=step, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for n in range(1, 301):
        store.publish(ALICE, "a", {"SKILL.md": md("a", body=f"v{n}")})
        time.sleep(0.0005)
    done.set()
    for t in threads:
        t.join()
    assert not errors
    for versions in seen.values():
        assert versions == sorted(versions)  # C5, per thread of the worker
    assert sum(len(v) for v in seen.values()) > 100
    assert skills.snapshot().skill("a").version == 300


# ------------------------------------------------------------------ trading C3, and outages


def test_max_staleness_skips_the_round_trip_while_the_watch_is_fresh() -> None:
    store, counter = counting_store()
    store.publish(SHARED, "s", {"SKILL.md": md("s")})
    skills = Skills(store, "bot", "alice", max_staleness=5.0)
    skills.snapshot()
    counter.clear()
    me = threading.get_ident()
    for _ in range(10):
        skills.snapshot()
    assert counter.names(me) == []
    rev = store.publish(SHARED, "t", {"SKILL.md": md("t")}).revision
    assert skills.followers[0].wait_for(rev, 5.0)
    assert "t" in [s.id for s in skills.snapshot().skills]  # the watch brought it
    assert counter.names(me).count("revisions") == 0
    strict = Skills(store, "bot", "alice")
    strict.snapshot()
    counter.clear()
    strict.snapshot()
    assert counter.names(me) == ["revisions"]  # off by default: C3 holds


class Flaky:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.down = False

    def __getattr__(self, name: str) -> object:
        if self.down:
            raise StoreUnavailable("store memory:// is unavailable (test)")
        return getattr(self.engine, name)


def test_outage_raises_unless_the_caller_asked_for_the_last_snapshot() -> None:
    flaky = Flaky(memory_store().engine)
    store = skillfs.Store(cast(Engine, flaky), retry_for=0.05)
    store.publish(SHARED, "s", {"SKILL.md": md("s")})
    skills = Skills(store, "bot", "alice")
    good = skills.snapshot()
    flaky.down = True
    with pytest.raises(StoreUnavailable):
        skills.snapshot()
    stale = skills.snapshot(allow_stale=True)
    assert stale.stale and stale.token == good.token and "s" in stale.load("s")
    flaky.down = False
    fresh = skills.snapshot()
    assert not fresh.stale and fresh.token == good.token


def test_asnapshot_from_asyncio() -> None:
    store = memory_store()
    store.publish(SHARED, "s", {"SKILL.md": md("s")})
    skills = Skills(store, "bot", "alice")

    async def main() -> list[skillfs.Snapshot]:
        return list(await asyncio.gather(*(skills.asnapshot() for _ in range(5))))

    snaps = asyncio.run(main())
    assert {s.token for s in snaps} == {snaps[0].token}
    assert "s" in snaps[0].prompt()


def test_closing_every_worker_stops_the_watch() -> None:
    store = memory_store()
    a, b = Skills(store, "bot", "alice"), Skills(store, "bot", "bob")
    a.snapshot(), b.snapshot()
    feed = store.changes.feed
    assert feed.domains == ["agents/bot"]
    a.close()
    assert feed.domains == ["agents/bot"]
    b.close()
    assert feed.domains == []
    time.sleep(1.2)  # the wait out when the last one left ends (memory: 1 s)
    calls = feed.calls
    time.sleep(1.2)
    assert feed.calls == calls  # following nothing, the feed asks the store nothing
    with Skills(store, "bot", "alice") as again:  # and it starts again when needed
        store.publish(ALICE, "x", {"SKILL.md": md("x")})
        assert [s.id for s in again.snapshot().skills] == ["x"]


def test_closing_a_worker_ends_its_wait_changed_at_once_and_tracks_nothing_again() -> None:
    """A host that closes a view while a thread waits on it (`skillfs mcp` at the end of its
    input) is not held for the rest of the wait (it was: 5 s before the process could exit)."""
    store = memory_store()
    store.publish(SHARED, "s", {"SKILL.md": md("s")})
    skills = Skills(store, "bot", "alice")
    token = skills.snapshot().token
    done: list[float] = []
    waiter = threading.Thread(
        target=lambda: (skills.wait_changed(token, 30.0), done.append(time.monotonic()))
    )
    waiter.start()
    time.sleep(0.3)  # the waiter is in its wait
    closed = time.monotonic()
    skills.close()
    waiter.join(5.0)
    assert done and done[0] - closed < 1.0
    assert store.changes.feed.domains == []  # the wait did not track the view again


def test_a_close_racing_another_workers_first_step_keeps_the_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One request closes alice's `Skills` while another opens bob's, of the same agent: the
    close's unfollow and the open's follow happen in that order, so the watch goes on."""
    store = memory_store()
    store.publish(ALICE, "a", {"SKILL.md": md("a")})
    store.publish(BOB, "b", {"SKILL.md": md("b")})
    alice = Skills(store, "bot", "alice")
    alice.snapshot()
    unfollowing, go_on = threading.Event(), threading.Event()
    unfollow = Subscription.close

    def descheduled(self: Subscription) -> None:
        unfollowing.set()
        go_on.wait(5)
        unfollow(self)

    monkeypatch.setattr(Subscription, "close", descheduled)
    closing = threading.Thread(target=alice.close)
    closing.start()
    assert unfollowing.wait(5)
    bob = Skills(store, "bot", "bob")
    opening = threading.Thread(target=bob.snapshot)
    opening.start()
    opening.join(0.3)  # unfixed, bob follows here, and the close then unfollows him
    go_on.set()
    closing.join(5)
    opening.join(5)
    assert store.changes.feed.domains == ["agents/bot"]
    rev = store.publish(BOB, "b", {"SKILL.md": md("b", "v2")}).revision
    assert bob.followers[0].wait_for(rev, 5.0)


def test_counting_engine_sees_every_call() -> None:
    """The wrapper the round-trip tests rely on records calls from every thread."""
    counter = CountingEngine(memory_store().engine)
    t = threading.Thread(target=lambda: counter.revisions(["agents/x"]))
    t.start()
    t.join()
    counter.ping()
    assert counter.names() == ["revisions", "ping"]
    assert counter.names(threading.get_ident()) == ["ping"]
