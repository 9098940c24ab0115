"""Closing a worker (docs/runtime.md, "Closing a worker"), on a real Redis, counting its
connections with CLIENT LIST: a `Skills` made from a URL closes the store it opened, when it
is closed or else when it and its snapshots are collected (issue 28: 300 never closed held
600 connections and 600 threads for as long as the process lived)."""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import skillfs
from skillfs import Scope, Skills
from skillfs.errors import SkillfsError
from tests.runtime_helpers import md

WORKERS = 100  # the report had 300 (600 Redis connections); each is released alike


@pytest.fixture
def admin(redis_server: Any, redis_url: str) -> Iterator[Any]:
    client = redis_server.client()
    writer = skillfs.open_store(redis_url)
    writer.publish(Scope.shared("bot"), "s", {"SKILL.md": md("s"), "notes.md": b"notes\n"})
    writer.close()
    yield client
    client.close()


def clients(admin: Any, name: str) -> int:
    return sum(1 for c in admin.client_list() if c.get("name") == name)


def settles(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_workers_never_closed_release_their_store_when_collected(
    admin: Any, redis_url: str
) -> None:
    url = f"{redis_url}?client_name=skillfs-unclosed"
    threads = set(threading.enumerate())
    workers = [Skills(url, "bot", f"u{i}") for i in range(WORKERS)]
    for w in workers:
        assert w.snapshot().load("s", "notes.md") == "notes\n"  # a watch, a usage count
    assert clients(admin, "skillfs-unclosed") >= WORKERS  # measured: 2 each
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.disable()  # collected by reference counting alone: no cycle keeps a worker
        try:
            del workers, w
        finally:
            gc.enable()
        released = settles(lambda: clients(admin, "skillfs-unclosed") == 0)
        assert released, clients(admin, "skillfs-unclosed")
        assert settles(lambda: not set(threading.enumerate()) - threads)
    unclosed = [str(c.message) for c in caught if c.category is ResourceWarning]
    assert len(unclosed) == WORKERS  # one each, as an unclosed file gives
    assert "unclosed Skills(redis://" in unclosed[0] and "close()" in unclosed[0]


def test_a_snapshot_keeps_its_workers_store_open_while_it_is_used(
    admin: Any, redis_url: str
) -> None:
    url = f"{redis_url}?client_name=skillfs-snapshot"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        snap = Skills(url, "bot", "alice").snapshot()  # the worker is gone at once
        snap.read_bytes("s", "notes.md")
        assert clients(admin, "skillfs-snapshot") > 0
        del snap
        assert settles(lambda: clients(admin, "skillfs-snapshot") == 0)


def test_with_closes_the_store_it_opened_and_not_a_store_passed_in(
    admin: Any, redis_url: str
) -> None:
    threads = set(threading.enumerate())
    gc.collect()  # what earlier tests left behind is theirs, not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Skills(f"{redis_url}?client_name=skillfs-with", "bot", "alice") as opened:
            opened.snapshot().load("s", "notes.md")
        assert clients(admin, "skillfs-with") == 0  # at once, not when collected
        assert not set(threading.enumerate()) - threads
        time.sleep(1.5)  # past the watch's wait: one in flight at close once reconnected
        assert clients(admin, "skillfs-with") == 0
        with pytest.raises(SkillfsError, match="is closed"):
            opened.snapshot()
        del opened

        store = skillfs.open_store(f"{redis_url}?client_name=skillfs-passed")
        with Skills(store, "bot", "alice") as passed:
            passed.snapshot().load("s", "notes.md")
        assert store.manifest(Scope.shared("bot"), "s").version == 1  # still open: ours
        assert passed.snapshot().skill("s")  # and its worker may step again
        passed.close()
        del passed
        gc.collect()
        leaked = [str(c.message) for c in caught if c.category is ResourceWarning]
        assert not leaked, leaked
        assert clients(admin, "skillfs-passed") > 0
        store.close()
        assert clients(admin, "skillfs-passed") == 0
