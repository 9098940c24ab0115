"""A worker whose store is down logs one warning, not one line per retry, and one more when it
recovers (the store's change feed, which the runtime and a server's hub follow through, and
`store.changes.follow`)."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import skillfs
from skillfs.errors import StoreFailed, StoreUnavailable
from skillfs.server.hub import Hub
from skillfs.store.feed import ChangeFeed
from tests.cli_helpers import skill_md

DOWN = "store grpc://10.0.0.1:7070 is unavailable (connection refused)"
RECOVERED = r"follow agents/bot: recovered after [0-9.]+s and [0-9]+ failed attempts"


def _break(
    store: skillfs.Store,
    down: threading.Event,
    names: tuple[str, ...] = ("changes", "changes_many"),
) -> None:
    """The engine's change log (or `names`) fails while `down` is set, as over grpc:// with
    no server."""
    for name in names:
        original = getattr(store.engine, name)

        def failing(*args: Any, original: Any = original, **kwargs: Any) -> Any:
            if down.is_set():
                raise StoreUnavailable(DOWN)
            return original(*args, **kwargs)

        setattr(store.engine, name, failing)


def _retries(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.DEBUG and DOWN in r.getMessage()]


def _messages(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno >= 30]


def test_a_worker_logs_an_outage_once_and_its_end(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="skillfs.store.feed")
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(skillfs.Scope.shared("bot"), "a", {"SKILL.md": skill_md("a")})
    down = threading.Event()
    _break(store, down)
    with skillfs.Skills(store, "bot", "alice") as skills:
        skills.snapshot()
        down.set()
        deadline = time.monotonic() + 10  # retries after 0.05, 0.1, 0.2, 0.4, 0.8 s ...
        while len(_retries(caplog)) < 3:  # they happen, at DEBUG
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        assert _messages(caplog, "skillfs.store.feed") == [
            f"change feed of {store.url}: {DOWN}; retrying in the background (one more line "
            "when it recovers)"
        ]
        down.clear()
        deadline = time.monotonic() + 10
        while len(_messages(caplog, "skillfs.store.feed")) < 2:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
    _, recovered = _messages(caplog, "skillfs.store.feed")
    assert re.fullmatch(
        RECOVERED.replace("follow agents/bot", f"change feed of {store.url}"), recovered
    )


def test_store_follow_logs_an_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(skillfs.Scope.shared("bot"), "a", {"SKILL.md": skill_md("a")})
    down = threading.Event()
    _break(store, down, ("revisions", "changes", "changes_many"))  # down from the start
    down.set()
    # retries every 0.5 s: down for the first two, then 2 s of margin for a loaded machine
    # to make the one that succeeds (and logs the recovery) before the follow ends
    threading.Timer(1.0, down.clear).start()
    list(store.changes.follow("bot", timeout=3.5))
    outage, recovered = _messages(caplog, "skillfs.store.changes")
    assert outage == (
        f"follow agents/bot: {DOWN}; retrying in the background (one more line when it recovers)"
    )
    assert re.fullmatch(RECOVERED, recovered), recovered


def test_a_servers_hub_backs_off_and_logs_an_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    """Outside testing: with the store down the hub retried every 22 ms, a connect attempt and
    a warning each time (253 lines in 5.5 s): its back-off was reset by every loop turn. It
    now waits twice as long each time, up to 2 s, and logs the outage once and its end."""
    caplog.set_level(logging.DEBUG, logger="skillfs.store.feed")
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(skillfs.Scope.shared("bot"), "a", {"SKILL.md": skill_md("a")})
    down = threading.Event()
    _break(store, down)
    calls: list[float] = []
    failing = store.engine.changes_many

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        return failing(*args, **kwargs)

    store.engine.changes_many = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def run(fn: Callable[..., object], *args: object) -> object:
            return await loop.run_in_executor(None, functools.partial(fn, *args))

        hub = Hub(ChangeFeed(store.engine), store.engine, run, wait=0.5)
        hub.start()
        hub.subscribe("agents/bot", False, "peer")
        try:
            await asyncio.sleep(0.3)
            down.set()
            await asyncio.sleep(3.0)
            during = [t for t in calls if t > calls[-1] - 3.0]
            down.clear()
            deadline = loop.time() + 10
            while len(_messages(caplog, "skillfs.store.feed")) < 2 and loop.time() < deadline:
                await asyncio.sleep(0.05)
        finally:
            await hub.close()
        assert len(during) <= 10, f"{len(during)} store calls in 3 s while it was down"

    asyncio.run(scenario())
    outage, recovered = _messages(caplog, "skillfs.store.feed")
    what = f"change feed of {store.url}"
    assert outage == f"{what}: {DOWN}; retrying in the background (one more line when it recovers)"
    assert re.fullmatch(RECOVERED.replace("follow agents/bot", what), recovered)


def test_a_failing_store_is_an_outage_to_a_worker_that_accepts_a_stale_view(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that answers but cannot serve (StoreFailed: a corrupt SQLite file) is said at
    once; a worker that asked for `allow_stale` goes on with its last snapshot meanwhile."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(skillfs.Scope.shared("bot"), "a", {"SKILL.md": skill_md("a")})
    with skillfs.Skills(store, "bot", "alice") as skills:
        last = skills.snapshot()
        broken = StoreFailed("store memory://x: x.db is corrupt: restore it from a backup")

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise broken

        monkeypatch.setattr(store.engine, "revisions", failing)
        started = time.monotonic()
        with pytest.raises(StoreFailed):
            skills.snapshot()
        stale = skills.snapshot(allow_stale=True)
        assert time.monotonic() - started < 1  # neither waited out a retry budget
        assert stale.stale and stale.token == last.token
        assert "is corrupt" in caplog.text
