"""The hub: one follower of the store's change log per domain per server, whatever the number
of Watch streams and views that want the domain (docs/server.md, "The serving model").

One asyncio task follows every domain that has a subscriber: each round it reads the
revisions of all of them in one store call and the change log of those that moved, in the
server's executor. Each batch becomes one `Event`, with the manifests its puts wrote loaded
once (when any subscriber wants them), offered to every subscribed stream's bounded queue —
a full queue is dropped and its stream told to reload, so the hub never waits — and handed
to every sink (the views' followers, docs/design.md §6.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from skillfs.engines import grpc_wire as wire
from skillfs.engines.base import EMPTY, Engine
from skillfs.errors import SkillfsError
from skillfs.model import Change, Revision, Scope
from skillfs.proto import skillfs_pb2 as pb

log = logging.getLogger("skillfs.server")

#: Seconds between two reads of the followed domains' revisions.
POLL = 0.02
#: Events a stream may have waiting; one more drops them and tells the stream to reload.
QUEUE = 64

Run = Callable[..., Awaitable[object]]
Sink = Callable[[Revision, Sequence[Change]], None]


@dataclass(frozen=True, eq=False)
class Event:
    """One batch of a domain's log: `changes` follow `before` in order (the last may be a
    reset); `manifests` holds what each put wrote, when still live (key: scope, skill,
    version)."""

    before: Revision
    changes: tuple[Change, ...]
    manifests: dict[tuple[Scope, str, int], pb.ScopedManifest]

    @property
    def through(self) -> Revision:
        return self.changes[-1].revision if self.changes else self.before


class Stream:
    """One subscriber's bounded queue of events. `offer` never waits: on overflow the queue
    is dropped and `overflowed` set, and the stream answers a reset (reload) next."""

    def __init__(self, domain: str, manifests: bool, size: int) -> None:
        self.domain = domain
        self.manifests = manifests
        self.size = size
        self.events: deque[Event] = deque()
        self.overflowed = False
        self.closed = False
        self.wake = asyncio.Event()

    def offer(self, event: Event) -> None:
        if len(self.events) >= self.size:
            self.events.clear()
            self.overflowed = True
        else:
            self.events.append(event)
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    async def next(self, timeout: float) -> Event | None:
        """The next event, or None after `timeout` seconds, on overflow or once closed."""
        if not self.events and not self.overflowed and not self.closed:
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                return None
        return self.events.popleft() if self.events and not self.overflowed else None


@dataclass(eq=False)
class _Domain:
    since: Revision | None = None
    streams: set[Stream] = field(default_factory=set)
    sinks: list[Sink] = field(default_factory=list)


class Hub:
    """The followed domains and their subscribers; every method runs on the event loop
    except `add_sink`/`remove_sink`, which any thread may call."""

    def __init__(self, engine: Engine, run: Run, queue: int = QUEUE, poll: float = POLL) -> None:
        self.engine = engine
        self.run = run
        self.queue = queue
        self.poll = poll
        self._domains: dict[str, _Domain] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._feeding: set[asyncio.Future[None]] = set()
        self.follow_calls = 0  # store reads of the log, for tests and /metrics

    @property
    def domains(self) -> list[str]:
        return list(self._domains)

    def start(self) -> None:
        """Start following (on the running loop)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._follow(), name="skillfs-hub")

    async def close(self) -> None:
        """End every stream (they end cleanly, clients resume elsewhere) and stop following."""
        for d in self._domains.values():
            for s in d.streams:
                s.close()
        self._domains.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def subscribe(self, domain: str, manifests: bool) -> Stream:
        stream = Stream(domain, manifests, self.queue)
        self._domains.setdefault(domain, _Domain()).streams.add(stream)
        self._poke()
        return stream

    def unsubscribe(self, stream: Stream) -> None:
        d = self._domains.get(stream.domain)
        if d is not None:
            d.streams.discard(stream)
            self._drop_if_idle(stream.domain, d)

    def add_sink(self, domain: str, sink: Sink) -> None:
        """Hand every event of `domain` to `sink` (run in the executor); thread-safe."""
        self._call(lambda: self._add_sink(domain, sink))

    def remove_sink(self, domain: str, sink: Sink) -> None:
        self._call(lambda: self._remove_sink(domain, sink))

    def _add_sink(self, domain: str, sink: Sink) -> None:
        self._domains.setdefault(domain, _Domain()).sinks.append(sink)
        self._poke()

    def _remove_sink(self, domain: str, sink: Sink) -> None:
        d = self._domains.get(domain)
        if d is not None and sink in d.sinks:
            d.sinks.remove(sink)
            self._drop_if_idle(domain, d)

    def _call(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    def _drop_if_idle(self, name: str, d: _Domain) -> None:
        if not d.streams and not d.sinks:
            del self._domains[name]

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ following

    async def _follow(self) -> None:
        """Read every followed domain's log, forever; a store error is logged and retried."""
        assert self._wake is not None
        delay = self.poll
        while True:
            if not self._domains:
                self._wake.clear()
                await self._wake.wait()
            since = {n: d.since for n, d in self._domains.items()}
            try:
                found = await self.run(_read, self.engine, since)
                delay = self.poll
            except SkillfsError as exc:
                log.warning("hub: %s; retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self.follow_calls += 1
            assert isinstance(found, dict)
            for name, (before, changes) in found.items():
                d = self._domains.get(name)
                if d is None or d.since is not since[name]:
                    continue  # dropped, or re-subscribed meanwhile: read again next round
                d.since = changes[-1].revision if changes else before
                await self._publish(d, Event(before, tuple(changes), {}))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)

    async def _publish(self, d: _Domain, event: Event) -> None:
        if event.changes and any(s.manifests for s in d.streams):
            try:
                loaded = await self.run(manifests_of, self.engine, event.changes)
                assert isinstance(loaded, dict)
                event.manifests.update(loaded)
            except SkillfsError as exc:  # the streams' clients read them themselves
                log.warning("hub: manifests of %s: %s", event.through, exc)
        for s in list(d.streams):
            s.offer(event)
        for sink in list(d.sinks):
            if event.changes:
                self._loop_task(self.run(sink, event.before, event.changes))

    def _loop_task(self, work: Awaitable[object]) -> None:
        async def guarded() -> None:
            try:
                await work
            except Exception as exc:  # a view reloads by itself at its next snapshot
                log.warning("hub: feeding a view: %s", exc)

        task = asyncio.ensure_future(guarded())
        self._feeding.add(task)
        task.add_done_callback(self._feeding.discard)


def _read(
    engine: Engine, since: dict[str, Revision | None]
) -> dict[str, tuple[Revision, list[Change]]]:
    """The log of every domain whose revision moved since its `since`, as (before, changes);
    a domain seen for the first time gets (its revision, []). Two store reads at most: the
    revisions of all in one call, then the log of the moved ones."""
    current = engine.revisions(list(since))
    out: dict[str, tuple[Revision, list[Change]]] = {}
    for name, rev in current.items():
        before = since[name]
        now = rev or EMPTY
        if before is None:
            out[name] = (now, [])
        elif now.epoch != before.epoch or now.counter != before.counter:
            changes = engine.changes(name, before, 0)
            if changes:
                out[name] = (before, changes)
    return out


def manifests_of(
    engine: Engine, changes: Sequence[Change]
) -> dict[tuple[Scope, str, int], pb.ScopedManifest]:
    """The manifest each put wrote, while it is still live: one load per scope."""
    wanted: dict[Scope, dict[str, int]] = {}
    for c in changes:
        if c.op == "put" and c.scope is not None and c.skill is not None:
            wanted.setdefault(c.scope, {})[c.skill] = c.version or 0
    out: dict[tuple[Scope, str, int], pb.ScopedManifest] = {}
    for scope, skills in wanted.items():
        for name, m in engine.load_skills(scope, list(skills)).items():
            if m is not None and m.version == skills[name]:
                out[(scope, name, m.version)] = pb.ScopedManifest(
                    scope=str(scope), manifest_json=wire.manifest_bytes(m)
                )
    return out
