"""A worker whose store is down logs one warning, not one line per retry, and one more when it
recovers (the runtime's background watch, and `Store.follow`)."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from typing import Any

import pytest

import skillfs
from skillfs.errors import StoreUnavailable
from tests.cli_helpers import skill_md

DOWN = "store grpc://10.0.0.1:7070 is unavailable (connection refused)"
RECOVERED = r"follow agents/bot: recovered after [0-9.]+s and [0-9]+ failed attempts"


def _break(store: skillfs.Store, down: threading.Event) -> None:
    """The engine's change log fails while `down` is set, as over grpc:// with no server."""
    for name in ("changes", "changes_many"):
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
    caplog.set_level(logging.DEBUG, logger="skillfs.runtime.follower")
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
        assert _messages(caplog, "skillfs.runtime.follower") == [
            f"watch {store.url}: {DOWN}; retrying in the background (one more line when it "
            "recovers)"
        ]
        down.clear()
        deadline = time.monotonic() + 10
        while len(_messages(caplog, "skillfs.runtime.follower")) < 2:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
    _, recovered = _messages(caplog, "skillfs.runtime.follower")
    assert re.fullmatch(RECOVERED.replace("follow agents/bot", f"watch {store.url}"), recovered)


def test_store_follow_logs_an_outage_once(caplog: pytest.LogCaptureFixture) -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(skillfs.Scope.shared("bot"), "a", {"SKILL.md": skill_md("a")})
    down = threading.Event()
    _break(store, down)
    down.set()
    # retries every 0.5 s: down for the first two, then 2 s of margin for a loaded machine
    # to make the one that succeeds (and logs the recovery) before the follow ends
    threading.Timer(1.0, down.clear).start()
    list(store.follow("bot", timeout=3.5))
    outage, recovered = _messages(caplog, "skillfs.store_watch")
    assert outage == (
        f"follow agents/bot: {DOWN}; retrying in the background (one more line when it recovers)"
    )
    assert re.fullmatch(RECOVERED, recovered), recovered
