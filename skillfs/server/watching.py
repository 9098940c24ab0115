"""The watch calls of the `SkillReader` service: `Watch` (one domain, a stream) and
`WatchMany` (many domains, one call) for grpc:// workers' followers, both fed by the hub's
events and filtered by the caller's grants, the changed manifests carried along when asked
(docs/server.md, "The serving model")."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence

import grpc

from skillfs.api import Store
from skillfs.auth import Level, Principal
from skillfs.engines.base import EMPTY, Engine
from skillfs.errors import InvalidArgument
from skillfs.model import Change, FileEntry, Revision, Scope, same_revision
from skillfs.model.manifest import Manifest
from skillfs.model.names import check_domain
from skillfs.remote import wire
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.server.backend import Backend
from skillfs.server.hub import Event, Stream, Wake, manifests_of
from skillfs.server.rpc import bearer, budget, streaming
from skillfs.store.blobs import SMALL_FILE_BYTES, small_files

#: Reads of the log a Watch stream makes by itself to catch up to the hub, at most.
CATCH_UP_ROUNDS = 16
#: A Watch asking to wait at most this long is a catch-up read (the runtime's per-step
#: `changes(..., 0)`), as short as any unary call: it does not count against the limits.
SHORT_WATCH = 0.25
#: Domains one WatchMany call may name, and the longest it waits (the client asks again).
MAX_WATCH_MANY = 10_000
MANY_WAIT = 30.0
#: Bytes of small files (`store.blobs.SMALL_FILE_BYTES` each) an event carries when asked
#: `with_files`, at most (and no more than its message has room for).
EVENT_FILE_BYTES = 1024 * 1024

Manifests = dict[tuple[Scope, str, int], pb.ScopedManifest]


def _key(c: Change) -> tuple[Scope | None, str, int]:
    return (c.scope, c.skill or "", c.version or 0)


class Watching:
    """`Watch` and `WatchMany`, mixed into the reader service."""

    backend: Backend
    engine: Engine
    store: Store

    @streaming
    async def Watch(
        self, request: pb.WatchRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.WatchEvent]:
        domain = check_domain(request.domain)
        principal.require_domain(domain)
        run = self.backend.run
        if request.HasField("since"):
            since = wire.rev_from_pb(request.since)
        else:
            since = (await run(self.engine.revisions, [domain]))[domain] or EMPTY
        wait = request.max_wait_seconds
        if 0 < wait <= SHORT_WATCH:  # a catch-up read, as short as a unary call: not held
            batch = await run(self.engine.changes, domain, since, wait)
            if batch:
                loaded: Manifests = {}
                if request.with_manifests and any(c.op == "put" for c in batch):
                    loaded = await self._manifests(batch, request.with_files)
                for event in self._event(
                    principal,
                    batch,
                    loaded,
                    request.with_manifests,
                    request.with_files,
                    budget(context),
                ):
                    yield event
            return
        with self.backend.watches.hold(principal):
            stream = self.backend.hub.subscribe(domain, request.with_manifests, context.peer())
            stream.files = request.with_manifests and request.with_files
            stream.budget = budget(context)
            # where the hub is already at `since`, its events from now on are all there is
            # to send: no read of the log (a grpc:// worker's watch reopening its stream)
            behind = None if same_revision(self.backend.hub.position(domain), since) else since
            try:
                async for event in self._follow(stream, context, principal, since, behind, wait):
                    yield event
            finally:
                self.backend.hub.unsubscribe(stream)

    @streaming
    async def WatchMany(
        self, request: pb.WatchManyRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.WatchManyResponse]:
        """`Engine.changes_many` for grpc:// clients: one call, one watch slot, however many
        domains. It waits on the hub's events (subscribed for the call), reading the store
        only for domains the hub is not at: an idle call costs no store call. The answer is
        streamed in bounded messages (protocol 2), each domain's events in order."""
        if len(request.domains) > MAX_WATCH_MANY:
            raise InvalidArgument(
                f"WatchMany names {len(request.domains)} domains: at most {MAX_WATCH_MANY}"
            )
        since: dict[str, Revision] = {}
        unset: list[str] = []
        for d in request.domains:
            domain = check_domain(d.domain)
            principal.require_domain(domain)
            if d.HasField("since"):
                since[domain] = wire.rev_from_pb(d.since)
            else:
                unset.append(domain)
        run, hub = self.backend.run, self.backend.hub
        if unset:  # from now, as Watch does
            now = await run(self.engine.revisions, unset)
            since.update({d: now[d] or EMPTY for d in unset})
        wait = min(max(request.max_wait_seconds, 0.0), MANY_WAIT)
        with_manifests = request.with_manifests
        files = with_manifests and request.with_files
        manifests: Manifests = {}
        if wait <= SHORT_WATCH:  # a look, as short as any unary call: not held
            found = await run(self.engine.changes_many, since, wait)
        else:
            with self.backend.watches.hold(principal):
                wake = Wake()
                streams = {d: hub.subscribe(d, with_manifests, context.peer()) for d in since}
                for stream in streams.values():
                    stream.wake = wake  # one wake for all of them
                try:
                    found = await self._many_wait(streams, since, wake, wait, manifests)
                finally:
                    for stream in streams.values():
                        hub.unsubscribe(stream)
            principal = self.backend.tokens.authenticate(bearer(context))
            for domain in found:
                principal.require_domain(domain)
        if with_manifests:  # what the hub's events did not carry (reads of the log)
            missing = [c for changes in found.values() for c in changes if _key(c) not in manifests]
            if any(c.op == "put" for c in missing):
                manifests.update(await self._manifests(missing, files))
        size = budget(context)
        events = [
            pb.DomainEvent(domain=d, event=event)
            for d, changes in found.items()
            if changes
            for event in self._event(principal, changes, manifests, with_manifests, files, size)
        ]
        for batch in wire.by_size(events, pb.DomainEvent.ByteSize, size):
            yield pb.WatchManyResponse(events=batch)

    async def _many_wait(
        self,
        streams: dict[str, Stream],
        since: dict[str, Revision],
        wake: Wake,
        wait: float,
        manifests: Manifests,
    ) -> dict[str, list[Change]]:
        hub, run = self.backend.hub, self.backend.run
        behind = {d: r for d, r in since.items() if not same_revision(hub.position(d), r)}
        found = await run(self.engine.changes_many, behind, 0) if behind else {}
        deadline = time.monotonic() + wait
        while not found and not self.backend.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wake.clear()
            pending = any(s.events or s.overflowed or s.closed for s in streams.values())
            if not pending and not await wake.wait(left):
                break
            behind = {}
            for domain, stream in streams.items():
                if stream.closed:
                    return found
                if stream.overflowed:
                    found[domain] = await self._reset(domain)
                    continue
                at, changes = since[domain], list[Change]()
                while stream.events:
                    got, carried, late = self._after(stream.events.popleft(), at)
                    if late is not None:
                        behind[domain] = since[domain]
                        break
                    changes += got
                    manifests.update(carried)
                    at = changes[-1].revision if changes else at
                if changes and domain not in behind:
                    found[domain] = changes
            if behind:
                found.update(await run(self.engine.changes_many, behind, 0))
        return found

    async def _follow(
        self,
        stream: Stream,
        context: grpc.ServicerContext,
        principal: Principal,
        since: Revision,
        behind: Revision | None,
        wait: float,
    ) -> AsyncIterator[pb.WatchEvent]:
        """The stream's events: what the log holds after `since` (read here until the hub's
        events take over), then the hub's, each cut to what follows `since`; a stream the hub
        had to drop events of is told to reload (a reset at the domain's revision)."""
        domain = stream.domain
        quiet_until = time.monotonic() + wait if wait > 0 else None
        while not stream.closed and not self.backend.stopping.is_set():
            timeout = None  # woken by an event, or when the tokens config changes
            if quiet_until is not None:
                timeout = quiet_until - time.monotonic()
                if timeout <= 0:
                    return
            changes: Sequence[Change] = ()
            manifests: Manifests = {}
            event = None
            if behind is not None:  # read the log up to the hub's position ourselves
                changes = await self._catch_up(domain, behind)
                behind = None
                if changes and stream.manifests:
                    manifests = await self._manifests(changes, stream.files)
            else:
                event = await stream.next(timeout)
                if stream.overflowed:
                    stream.overflowed = False
                    changes = await self._reset(domain)
                elif event is not None:
                    changes, manifests, behind = self._after(event, since)
            # The token again, at every event and whenever the tokens config changed (the
            # backend wakes every stream then): a revoked token ends the stream
            # (UNAUTHENTICATED), narrowed grants apply to what is shown from now on.
            principal = self.backend.tokens.authenticate(bearer(context))
            principal.require_domain(domain)
            if not changes:
                continue
            since = changes[-1].revision
            if event is not None and changes is event.changes:
                shown = self._shown(event, principal, stream)
            else:
                shown = self._event(
                    principal, changes, manifests, stream.manifests, stream.files, stream.budget
                )
            for message in shown:
                yield message
            if quiet_until is not None:
                quiet_until = time.monotonic() + wait

    @staticmethod
    def _after(
        event: Event, since: Revision
    ) -> tuple[Sequence[Change], dict[tuple[Scope, str, int], pb.ScopedManifest], Revision | None]:
        """What of `event` follows `since`: (changes, manifests, None), or ((), {}, since)
        when the stream is behind the event's start and must read the log itself."""
        b = event.before
        if same_revision(since, b):
            return event.changes, event.manifests, None  # all of it (`_shown` may reuse it)
        if since.epoch == b.epoch and since.counter >= b.counter:
            return [c for c in event.changes if c.revision.counter > since.counter or (
                c.revision.epoch != since.epoch)], event.manifests, None  # fmt: skip
        last = event.through
        if since.epoch == last.epoch and since.counter >= last.counter:
            return (), {}, None  # already there
        return (), {}, since

    async def _manifests(self, changes: Sequence[Change], files: bool) -> Manifests:
        """The manifests `changes` put, read by a stream itself (behind the hub); for a stream
        that asked `with_files`, their small files are read into the blob cache too, as the
        hub does for its events, so that the event carries them."""
        seen = self.backend.seen if files else None
        return await self.backend.run(manifests_of, self.engine, changes, seen)

    def _shown(self, event: Event, principal: Principal, stream: Stream) -> list[pb.WatchEvent]:
        """`_event` of a whole hub event, built once per principal and kept on the event: a
        fleet's streams on one token share its messages (their bytes are still sent to each).
        Keyed by the principal object, which a new tokens config replaces."""
        key = (id(principal), stream.manifests, stream.files, stream.budget)
        kept = event.shown.get(key)
        if kept is not None and kept[0] is principal:
            return kept[1]
        messages = self._event(
            principal, event.changes, event.manifests, stream.manifests, stream.files, stream.budget
        )
        event.shown[key] = (principal, messages)
        return messages

    async def _catch_up(self, domain: str, since: Revision) -> list[Change]:
        """The log after `since` up to where it ends now, in a few reads."""
        out: list[Change] = []
        for _ in range(CATCH_UP_ROUNDS):
            batch = await self.backend.run(self.engine.changes, domain, since, 0)
            out += batch
            if not batch or batch[-1].op == "reset":
                break
            since = batch[-1].revision
        return out

    async def _reset(self, domain: str) -> list[Change]:
        """A reset at the domain's revision: the follower reloads from there (C8)."""
        rev = (await self.backend.run(self.engine.revisions, [domain]))[domain] or EMPTY
        return [Change(revision=rev, op="reset")]

    def _event(
        self,
        principal: Principal,
        changes: Sequence[Change],
        manifests: dict[tuple[Scope, str, int], pb.ScopedManifest],
        with_manifests: bool,
        with_files: bool = False,
        size: int = wire.UNBOUNDED,
    ) -> list[pb.WatchEvent]:
        """What a stream of this principal is sent of `changes`: events of at most `size`
        bytes, each ending at a revision (a revision whose changes pass a message alone is
        split, all but its last event `continued`: only callers of protocol 2 are given a
        `size`), the manifests and small files that fit beside the changes (a follower loads
        those left out)."""
        shown = [
            c
            for c in changes
            if c.op == "reset" or (c.scope is not None and principal.may(Level.read, c.scope))
        ]
        through = wire.rev_to_pb(changes[-1].revision)
        # Sent even when nothing is shown: `through` lets the follower move on without
        # reloading (C3), and reveals nothing `Revisions` would not.
        events: list[pb.WatchEvent] = []
        batch: list[pb.Change] = []
        used = 0
        for group in _by_revision(shown):
            rows = [wire.change_to_pb(c) for c in group]
            n = sum(r.ByteSize() + 8 for r in rows)
            if batch and used + n > size:
                events.append(pb.WatchEvent(changes=batch, through=batch[-1].revision))
                batch, used = [], 0
            for row in rows:
                if batch and used + row.ByteSize() + 8 > size:  # one revision, over a message
                    events.append(
                        pb.WatchEvent(changes=batch, through=batch[-1].revision, continued=True)
                    )
                    batch, used = [], 0
                batch.append(row)
                used += row.ByteSize() + 8
        events.append(pb.WatchEvent(changes=batch, through=through))
        if with_manifests:
            for event in events:
                self._carried(event, manifests, with_files, size)
        return events

    def _carried(
        self,
        event: pb.WatchEvent,
        manifests: dict[tuple[Scope, str, int], pb.ScopedManifest],
        with_files: bool,
        size: int,
    ) -> None:
        """Add to `event` the manifests its puts wrote, and with `with_files` their small
        files, as far as they fit in `size` bytes with the changes."""
        room = size - event.ByteSize()
        for c in event.changes:
            if c.op != "put" or not c.scope:
                continue
            found = manifests.get((wire.scope_from(c.scope), c.skill, c.version))
            if found is not None and found.ByteSize() + 8 <= room:
                event.manifests.append(found)
                room -= found.ByteSize() + 8
        if with_files:
            event.files.extend(self._files(event.manifests, min(room, EVENT_FILE_BYTES)))

    def _files(self, shown: Iterable[pb.ScopedManifest], budget: int) -> list[pb.BlobBytes]:
        """The small files of the manifests an event shows (`store.blobs.small_files`, at most
        EVENT_FILE_BYTES), as far as the server's blob cache holds them (the hub warmed it
        with a publish's files): never a store read here, on the event loop. A file left out
        is read by the client with ReadFile."""
        held: dict[str, bytes] = {}
        cached: list[FileEntry] = []
        for scoped in shown:
            for _, e in Manifest.from_json(scoped.manifest_json).all_files():
                data = self.store.blobs.read_cached(e) if e.size <= SMALL_FILE_BYTES else None
                if data is not None:
                    held[e.sha256] = data
                    cached.append(e)
        return [
            pb.BlobBytes(sha256=e.sha256, data=held[e.sha256])
            for e in small_files(cached, max(budget, 0))
        ]


def _by_revision(changes: Sequence[Change]) -> Iterator[list[Change]]:
    """`changes` in runs of one revision each (a commit's changes share its revision)."""
    run: list[Change] = []
    for c in changes:
        if run and not same_revision(run[-1].revision, c.revision):
            yield run
            run = []
        run.append(c)
    if run:
        yield run
