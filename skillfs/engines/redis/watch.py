"""Following many domains of a Redis store over one connection (docs/engine-redis.md,
"Following many domains"): `RedisEngine.changes_many`.

Each look at the domains is one pipeline of the read-only CHANGES script, one per domain
(one round trip per node in Cluster). When none has news, the wait is one blocking call:

- standalone and Sentinel: one `XREAD BLOCK` over every domain's stream, each from the
  last entry of its `since`, so a commit between the look and the wait is not missed;
- Cluster: `XREAD` cannot span slots, and every agent has a slot of its own, so the commit
  script also `PUBLISH`es the domain on one channel (`P changes`) and one subscriber thread
  per engine wakes the waiters. A notice only wakes; the script look decides, so a lost
  notice costs at most one slice of the wait (never longer than the socket timeout).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

import redis.exceptions as rx

from skillfs.engines.redis import scripts
from skillfs.model import Change, Revision
from skillfs.util.outage import Outage

#: The engine (`skillfs.engines.redis.engine.RedisEngine`, which imports this module: no cycle).
RedisEngine = Any
log = logging.getLogger(__name__)

MAX_SEQ = 18446744073709551615  # the largest sequence part of a stream entry ID
#: Commits a `changes()` call returns at most per domain; the caller asks again from there.
CHANGES_BATCH = 100


def look(engine: RedisEngine, since: Mapping[str, Revision]) -> dict[str, list[Change]]:
    """One pipeline of the CHANGES script over `since`'s domains: those with news."""
    domains = list(since)
    if not domains:
        return {}
    conn = engine._c
    for _ in range(2):
        with engine._guard:
            pipe = conn.client.pipeline(transaction=False)
            for d in domains:
                base = engine._domain_key(d)
                rev = since[d]
                pipe.execute_command("EVALSHA", conn.changes.sha, 2, f"{base}/rev", f"{base}/log",
                             rev.epoch, rev.counter, CHANGES_BATCH)  # fmt: skip
            results = pipe.execute(raise_on_error=False)
            if any(isinstance(r, rx.NoScriptError) for r in results):
                conn.client.script_load(scripts.CHANGES)  # a restart or failover lost it
                continue
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        out = {}
        for d, r in zip(domains, results, strict=True):
            found = engine._parse_changes(cast(list[Any], r))
            if found:
                out[d] = found
        return out
    raise rx.NoScriptError("the changes script could not be loaded")


def changes_many(
    engine: RedisEngine, since: Mapping[str, Revision], timeout: float
) -> dict[str, list[Change]]:
    """See `Engine.changes_many`."""
    deadline = time.monotonic() + timeout
    wake = engine._wake if engine.cluster else None
    wakes = engine.wakes
    while True:
        seen = wake.generation if wake is not None else 0
        if wake is not None:
            wake.start()
        found = look(engine, since)
        remaining = deadline - time.monotonic()
        if found or remaining <= 0 or not since or engine.wakes != wakes:
            return found
        block = min(remaining, engine.socket_timeout * 0.8)
        if wake is not None:
            wake.wait(seen, block)
            continue
        streams = {
            f"{engine._domain_key(d)}/log": f"{r.counter}-{MAX_SEQ}" for d, r in since.items()
        }
        with engine._guard:
            engine._client.xread(streams, count=1, block=max(1, int(block * 1000)))


class Wake:
    """Cluster only: one subscriber of the engine's change channel, on its own thread, that
    counts the notices the commit script publishes and wakes whoever waits for one."""

    def __init__(self, engine: RedisEngine) -> None:
        self.engine = engine
        self.channel = f"{engine.prefix}changes"
        self.generation = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._subscribed = threading.Event()

    def start(self) -> None:
        """Start the subscriber once; wait (briefly) until it listens, so a notice sent after
        the caller's next look cannot be missed."""
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._subscribed.clear()
                self._thread = threading.Thread(
                    target=self._run, name=f"skillfs-redis-wake {self.engine.url}", daemon=True
                )
                self._thread.start()
        self._subscribed.wait(self.engine.socket_timeout)

    def wait(self, seen: int, timeout: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self.generation != seen, timeout)

    def bump(self) -> None:
        """Whoever waits looks again."""
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def _run(self) -> None:
        outage = Outage(log, f"change notices of {self.engine.url}")
        while not self._closed.is_set():
            pubsub = None
            try:
                pubsub = self.engine._client.pubsub()
                pubsub.subscribe(self.channel)
                while not self._closed.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self._subscribed.set()
                    self.bump()  # a notice, or (re)subscribed: look again
                    outage.recovered()
            except Exception as exc:  # the connection dropped: subscribe again, look again
                if self._closed.is_set():
                    return
                wait = outage.failed(exc)
                self.bump()
                self._closed.wait(wait)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):  # closing a broken connection
                        pubsub.close()

    def close(self) -> None:
        self._closed.set()
        self.bump()
