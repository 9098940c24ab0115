"""The per-step revision check, read from the store for many calls at once.

Every worker confirms its revisions once per step (C3), so a server of a fleet answers
`Revisions` more than anything else. Each call still gets an answer the store gave after the
call arrived — an acknowledged write may have gone through another server or straight to
the store, which only the store knows — but calls that arrive while a read is out, or within
PACE of the last read's start, share the next one: one executor hand-off and one store round
trip (one Redis `HMGET`, one etcd range read) for all of them, whatever their number
(docs/server.md, "The serving model").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from skillfs.model import Revision

Read = Callable[[Sequence[str]], Awaitable[dict[str, Revision | None]]]
Waiting = tuple[Sequence[str], "asyncio.Future[dict[str, Revision | None]]"]
#: Domains one shared read asks for at most; calls beyond wait for the next read.
MAX_DOMAINS = 1000
#: Reads begin at most this often (seconds): a call that finds the last read begun less than
#: this long ago waits out the rest, and the calls arriving meanwhile share its read. An idle
#: server's call reads at once; a busy one's wait at most this long more (docs/server.md,
#: "The serving model").
PACE = 0.002


class SharedReads:
    """At most one read of revisions out at a time, and one begun per `pace`; the calls that
    arrive meanwhile are answered together by the read after it, which starts only once they
    arrived (C3)."""

    def __init__(self, read: Read, pace: float = PACE) -> None:
        self._read = read
        self._pace = pace
        self._waiting: deque[Waiting] = deque()
        self._out = False  # a read is out, or one is due
        self._began = -pace  # loop time the last read began
        self.reads = 0  # store reads made, for tests

    async def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        future: asyncio.Future[dict[str, Revision | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting.append((domains, future))
        if not self._out:
            self._due()
        return await future

    def _due(self) -> None:
        """Start the next read now, or once PACE has passed since the last one began."""
        loop = asyncio.get_running_loop()
        wait = self._began + self._pace - loop.time()
        if wait <= 0:
            self._next()
        else:
            self._out = True
            loop.call_later(wait, self._next)

    def _next(self) -> None:
        """Start one read for the calls waiting now (up to MAX_DOMAINS domains)."""
        self._out = False
        batch: list[Waiting] = []
        names: set[str] = set()
        while self._waiting:
            domains, future = self._waiting[0]
            if batch and len(names) + len(set(domains) - names) > MAX_DOMAINS:
                break
            self._waiting.popleft()
            if not future.done():  # else the call was cancelled meanwhile
                batch.append((domains, future))
                names.update(domains)
        if not batch:
            return
        self._out = True
        self._began = asyncio.get_running_loop().time()
        self.reads += 1
        task = asyncio.ensure_future(self._read(sorted(names)))
        task.add_done_callback(lambda done: self._answer(batch, done))

    def _answer(
        self,
        batch: list[Waiting],
        done: asyncio.Future[dict[str, Revision | None]],
    ) -> None:
        self._out = False
        error = done.exception() if not done.cancelled() else asyncio.CancelledError()
        for domains, future in batch:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                found = done.result()
                future.set_result({d: found[d] for d in domains})
        if self._waiting:
            self._due()
