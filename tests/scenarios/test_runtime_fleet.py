"""A worker process following many agents (docs/design.md §6.1): one watch thread and one store
connection for all of them, whatever their number (issue 12)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import skillfs
from skillfs import Scope, Skills
from skillfs.store.blobs import SMALL_FILE_BYTES
from tests.stores import url_for

AGENTS = [f"a{i:02d}" for i in range(50)]


def md(name: str, n: int) -> bytes:
    return f"---\nname: {name}\ndescription: Version {n}. Use when testing.\n---\nv{n}\n".encode()


def _clients(admin: Any, name: str) -> int:
    return sum(1 for c in admin.client_list() if c.get("name") == name)


def _settle(workers: list[Skills]) -> None:
    """Every worker's follower current, and the watch back in its wait."""
    revs = [w.snapshot().revisions[f"agents/{w.agent_id}"] for w in workers]
    for w, rev in zip(workers, revs, strict=True):
        assert rev is not None and w.followers[0].wait_for(rev, 10)
    time.sleep(0.5)


def test_50_agents_cost_what_one_agent_costs(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`Skills` for 50 agents in one process: the same threads and Redis connections as for
    one (measured before this change: +50 threads, +50 connections), and a publish for each
    agent still reaches its worker's cache through the one watch."""
    base = url_for(request, "redis", tmp_path)
    admin = request.getfixturevalue("redis_server").client()
    writer = skillfs.open_store(base)
    for a in AGENTS:
        writer.publish(Scope.shared(a), "s", {"SKILL.md": md("s", 1)})
    store = skillfs.open_store(base + "&client_name=skillfs-fleet-worker")
    threads0 = set(threading.enumerate())
    one = [Skills(store, AGENTS[0], "alice")]
    _settle(one)
    threads1, conns1 = set(threading.enumerate()), _clients(admin, "skillfs-fleet-worker")
    fifty = one + [Skills(store, a, "alice") for a in AGENTS[1:]]
    _settle(fifty)
    threads50, conns50 = set(threading.enumerate()), _clients(admin, "skillfs-fleet-worker")
    # the store's change feed: its dispatcher and a thread per wait out (a long one, and a
    # short one once a domain was added during it), and as many connections besides the
    # per-step reads' one, for 1 agent and for 50 alike (threads of earlier tests may end
    # meanwhile: count the ones that appeared)
    feed = [f"skillfs-feed {store.url}", f"skillfs-feed-wait {store.url}"]
    assert sorted(t.name for t in threads1 - threads0) == feed
    assert [t.name for t in threads50 - threads1] in ([], feed[1:]), threads50 - threads1
    assert conns1 <= 2 and conns50 <= 3, (conns1, conns50)
    assert store.changes.feed.domains == sorted(f"agents/{a}" for a in AGENTS)
    revs = {
        a: writer.publish(Scope.shared(a), "s", {"SKILL.md": md("s", 2)}).revision for a in AGENTS
    }
    for w in fifty:  # pushed by the one watch, not pulled by a step
        assert w.followers[0].wait_for(revs[w.agent_id], 10), w.agent_id
    assert not set(threading.enumerate()) - threads50
    assert all("Version 2" in w.snapshot().prompt() for w in fifty)  # C3 as ever
    for w in fifty:
        w.close()
    store.close()
    writer.close()
    admin.close()


def test_a_grpc_worker_follows_50_agents_with_one_call(tmp_path: Path) -> None:
    """Over grpc://, the process's one watch asks the server about all 50 agents in one
    WatchMany call (one watch slot, not 50 Watch streams) that waits while nothing changes,
    and each publish reaches its worker's cache with the manifest the event carried; an idle
    call costs the server no store read of its own."""
    from support.grpc_servers import ADMIN, running

    with running("memory://fleet-grpc", tmp_path) as server:
        address = f"grpc://127.0.0.1:{server.grpc_port}"
        writer = skillfs.open_store(address, token=ADMIN)
        for a in AGENTS:
            writer.publish(Scope.shared(a), "s", {"SKILL.md": md("s", 1)})
        store = skillfs.open_store(address, token=ADMIN)
        calls: list[int] = []
        many = store.engine.changes_many

        def counted(since: Any, timeout: float) -> Any:
            calls.append(len(since))
            return many(since, timeout)

        store.engine.changes_many = counted  # type: ignore[method-assign]
        workers = [Skills(store, a, "alice") for a in AGENTS]
        _settle(workers)
        # the server runs in this process too: count the worker's watch threads by name
        names = [t.name for t in threading.enumerate()]
        assert names.count(f"skillfs-feed {store.url}") == 1  # other tests' stores aside
        assert names.count(f"skillfs-feed-wait {store.url}") <= 2  # a long wait, a short one
        assert not [n for n in names if n.startswith("skillfs-follow")]
        assert server.backend.watches.open <= 2  # WatchMany calls, not a Watch per agent
        assert max(calls) == 50
        served: list[str] = []
        engine = server.store.engine
        for name in ("revisions", "changes", "changes_many", "load_scope", "load_skills"):
            original = getattr(engine, name)

            def count(*args: Any, _name: str = name, _fn: Any = original) -> Any:
                if not threading.current_thread().name.startswith("skillfs-feed"):
                    served.append(_name)
                return _fn(*args)

            setattr(engine, name, count)
        asked = len(calls)
        time.sleep(2.5)
        # the worker's one WatchMany waits (Engine.watch_wait, 25 s on grpc://): no call a
        # second while nothing changes...
        assert len(calls) - asked <= 1
        # ...and the server reads nothing for it: the hub, which follows the domains anyway,
        # tells it of changes
        assert served == []
        loads: list[str] = []
        for name in ("load_scope", "load_skills"):
            original = getattr(store.engine, name)

            def load(*args: Any, _name: str = name, _fn: Any = original) -> Any:
                loads.append(_name)
                return _fn(*args)

            setattr(store.engine, name, load)
        revs = {a: writer.publish(Scope.shared(a), "s", {"SKILL.md": md("s", 2)}).revision
                for a in AGENTS[:5]}  # fmt: skip
        for w in workers[:5]:
            assert w.followers[0].wait_for(revs[w.agent_id], 10), w.agent_id
        assert loads == []  # the events carried the changed manifests: no GetManifests
        assert all("Version 2" in w.snapshot().prompt() for w in workers[:5])
        for w in workers:
            w.close()
        store.close()
        writer.close()


def test_a_grpc_worker_of_one_agent_keeps_one_watch_stream_across_publishes(
    tmp_path: Path,
) -> None:
    """Following one domain over grpc://, the worker's watch keeps its Watch stream open from
    one publish to the next (a message per publish, no call per publish), and each event
    carries the manifest and its small files, so the worker loads and reads nothing itself:
    its follower warms its blob cache from the event (a file too large to carry is read)."""
    from support.grpc_servers import ADMIN, running

    with running("memory://fleet-one", tmp_path) as server:
        address = f"grpc://127.0.0.1:{server.grpc_port}"
        writer = skillfs.open_store(address, token=ADMIN)
        shared = Scope.shared("solo")
        writer.publish(shared, "s", {"SKILL.md": md("s", 1)})
        store = skillfs.open_store(address, token=ADMIN)
        worker = Skills(store, "solo", "alice")
        follower = worker.followers[0]
        worker.snapshot()  # follows the agent from here; what it loaded is warmed by the watch
        first = writer.publish(shared, "s", {"SKILL.md": md("s", 2)}).revision
        assert follower.wait_for(first, 10)  # the watch's first event: all warm from here
        hub = server.backend.hub
        subscribed: list[str] = []
        subscribe = hub.subscribe

        def counted(domain: str, manifests: bool) -> Any:
            subscribed.append(domain)
            return subscribe(domain, manifests)

        hub.subscribe = counted  # type: ignore[method-assign]
        loads: list[str] = []
        for name in ("load_scope", "load_skills", "get_chunks"):
            original = getattr(store.engine, name)

            def load(*args: Any, _name: str = name, _fn: Any = original) -> Any:
                loads.append(_name)
                return _fn(*args)

            setattr(store.engine, name, load)
        for n in range(3, 8):
            notes = f"notes {n}\n".encode() * 50
            files = {"SKILL.md": md("s", n), "notes.md": notes}
            rev = writer.publish(shared, "s", files).revision
            assert follower.wait_for(rev, 10), n  # its files warm too
            assert worker.snapshot().read_bytes("s", "notes.md") == notes
        assert subscribed == []  # the stream open before the publishes carried all five
        assert loads == []
        big = b"x" * (SMALL_FILE_BYTES + 1)  # over what an event carries (and a prefetch reads)
        rev = writer.publish(shared, "s", {"SKILL.md": md("s", 9), "big.bin": big}).revision
        assert follower.wait_for(rev, 10)
        assert loads == []
        assert worker.snapshot().read_bytes("s", "big.bin") == big
        assert loads == ["get_chunks"]  # read when asked
        assert server.backend.watches.open == 1
        worker.close()
        store.close()
        writer.close()


def test_a_grpc_workers_first_load_is_warmed_by_its_watch_before_any_publish(
    tmp_path: Path,
) -> None:
    """A worker's watch begins (from nothing) just before its first load, and its first pass
    usually ends first. That pass loads the scopes the worker tracks and warms their files:
    before, it loaded nothing, and the first load's files were read at whichever event came
    next, so a fleet's first publish after start came with a ReadFile call per worker."""
    from support.grpc_servers import ADMIN, running

    with running("memory://fleet-warm", tmp_path) as server:
        address = f"grpc://127.0.0.1:{server.grpc_port}"
        writer = skillfs.open_store(address, token=ADMIN)
        notes = b"notes\n" * 50
        writer.publish(Scope.shared("warm"), "s", {"SKILL.md": md("s", 1), "notes.md": notes})
        for n in range(5):  # the race each time: a new store object, so a new watch
            store = skillfs.open_store(address, token=ADMIN)
            reads: list[int] = []
            get_chunks = store.engine.get_chunks

            def counted(keys: Any, _reads: list[int] = reads, _fn: Any = get_chunks) -> Any:
                _reads.append(len(keys))
                return _fn(keys)

            store.engine.get_chunks = counted  # type: ignore[method-assign]
            worker = Skills(store, "warm", f"u{n}")
            snap = worker.snapshot()
            rev = snap.revisions["agents/warm"]
            assert rev is not None and worker.followers[0].wait_for(rev, 10)  # and files warm
            warmed = len(reads)
            assert snap.read_bytes("s", "notes.md") == notes
            assert len(reads) == warmed, n  # read before it was asked for
            worker.close()
            store.close()
        writer.close()


def _wakeups(thread: threading.Thread) -> int:
    """Times the thread went to sleep and woke (its voluntary context switches)."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


def test_a_grpc_workers_idle_watch_is_one_thread_that_sleeps(tmp_path: Path) -> None:
    """An idle grpc:// worker's watch is its one thread, waiting in grpc's core: no channel
    spin thread beside it, and about 5 wake-ups a second (grpc's check for signals), where
    the iterator's wait woke 10 times a second and its spin thread 5 more (measured before
    this change: 20 and 10 in 2 s). A process holding many workers' streams idles."""
    from support.grpc_servers import ADMIN, running

    with running("memory://fleet-idle", tmp_path) as server:
        address = f"grpc://127.0.0.1:{server.grpc_port}"
        writer = skillfs.open_store(address, token=ADMIN)
        writer.publish(Scope.shared("idle"), "s", {"SKILL.md": md("s", 1)})
        store = skillfs.open_store(address, token=ADMIN)
        before = set(threading.enumerate())
        worker = Skills(store, "idle", "alice")
        rev = worker.snapshot().revisions["agents/idle"]
        assert rev is not None and worker.followers[0].wait_for(rev, 10)
        time.sleep(0.5)  # the watch back in its wait
        assert server.backend.watches.open == 1
        # the server runs in this process too: its executor's threads start as it needs them
        started = sorted(
            (
                t
                for t in set(threading.enumerate()) - before
                if t.is_alive() and t.name.endswith(store.url)
            ),
            key=lambda t: t.name,
        )
        assert [t.name for t in started] == [
            f"skillfs-feed {store.url}", f"skillfs-feed-wait {store.url}"
        ]  # fmt: skip
        woke = sum(map(_wakeups, started))
        time.sleep(2)
        assert sum(map(_wakeups, started)) - woke <= 12
        worker.close()
        store.close()
        writer.close()


@pytest.mark.parametrize("engine", ["sqlite", "redis", "grpc"])
def test_closing_the_store_ends_its_watch(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """Outside testing: a worker that closed its store without closing its `Skills` left
    the watch thread retrying on the closed connection for as long as the process lived."""
    store = skillfs.open_store(url_for(request, engine, tmp_path))
    store.publish(Scope.shared("bot"), "s", {"SKILL.md": md("s", 1)})
    skills = Skills(store, "bot", "alice")
    skills.snapshot()
    threads = [
        t
        for t in threading.enumerate()
        if t.name.startswith("skillfs-feed") and t.name.endswith(store.url)
    ]
    assert any(t.is_alive() for t in threads)
    store.close()  # and not skills.close()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
