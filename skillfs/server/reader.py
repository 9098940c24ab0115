"""The `SkillReader` service: what agent workers call. Views (snapshot, listing, prompt, load
through a path) come from the runtime's `Skills` of each (agent, user, markets); the engine
primitives (manifests, revisions, file ranges, watch, history) are served to grpc:// stores.
Every call is authorized by the token's grants (docs/server.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from skillfs.auth import Level, Principal
from skillfs.engines import grpc_wire as wire
from skillfs.engines.base import EMPTY
from skillfs.errors import InvalidPath, PermissionDenied
from skillfs.model import Change, FileEntry, Revision, Scope, error_findings
from skillfs.names import check_domain, check_entry, check_id, check_skill_name
from skillfs.proto import skillfs_pb2 as pb
from skillfs.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.runtime import Snapshot
from skillfs.server.backend import Backend
from skillfs.server.hub import Event, Stream, manifests_of
from skillfs.server.rpc import (
    allowed,
    asynchronous,
    bearer,
    check_sha,
    streaming,
    unary,
    well_formed,
)
from skillfs.server.views import view_key, view_scopes
from skillfs.skill_md import SKILL_MD

#: A Watch stream re-checks its token at least this often (seconds).
WATCH_POLL = 1.0
#: Reads of the log a Watch stream makes by itself to catch up to the hub, at most.
CATCH_UP_ROUNDS = 16
#: A Watch asking to wait at most this long is a catch-up read (the runtime's per-step
#: `changes(..., 0)`), as short as any unary call: it does not count against the limits.
SHORT_WATCH = 0.25
#: Domains one WatchMany call may name, and the longest it waits (the client asks again).
MAX_WATCH_MANY = 10_000
MANY_WAIT = 30.0


def _same(a: Revision | None, b: Revision) -> bool:
    return a is not None and a.epoch == b.epoch and a.counter == b.counter


#: The most entries one Audit call returns.
AUDIT_MAX = 10_000


def _view_skill(s: Any) -> pb.ViewSkill:
    return pb.ViewSkill(
        id=s.id,
        name=s.name,
        description=s.description,
        scope=str(s.scope) if s.scope else "",
        version=s.version or 0,
        commit_id=s.digest,
        files=[
            pb.FileEntry(path=p, sha256=e.sha256, size=e.size, mode=e.mode, mtime=e.mtime)
            for p, e in sorted(s.files.items())
        ],
        shadows=list(s.shadows),
        candidate=s.candidate,
    )


class Reader(pb_grpc.SkillReaderServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.store = backend.store
        self.engine = backend.engine

    def _snapshot(self, principal: Principal, view: pb.View) -> Snapshot:
        key = view_key(view)
        for scope in view_scopes(key):
            principal.require(Level.read, scope)
        return self.backend.views.snapshot(key)

    @unary
    def Snapshot(
        self, request: pb.SnapshotRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.SnapshotResponse:
        snap = self._snapshot(principal, request.view)
        revisions = wire.revs_to_pb(snap.revisions)
        known = {d: wire.rev_from_pb(r) for d, r in request.known.items()}
        if known and known == {d: r for d, r in snap.revisions.items() if r is not None}:
            return pb.SnapshotResponse(revisions=revisions, unchanged=True, token=snap.token)
        return pb.SnapshotResponse(
            revisions=revisions, skills=[_view_skill(s) for s in snap.skills], token=snap.token
        )

    @unary
    def ListSkills(
        self, request: pb.ListSkillsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.ListSkillsResponse:
        if request.WhichOneof("target") == "view":
            snap = self._snapshot(principal, request.view)
            return pb.ListSkillsResponse(
                skills=[
                    pb.SkillInfo(
                        scope=str(s.scope) if s.scope else "",
                        skill=s.id,
                        version=s.version or 0,
                        description=s.description,
                        usable=True,
                        errors=len(error_findings(s.findings)),
                    )
                    for s in snap.skills
                ]
            )
        scope = allowed(principal, Level.read, request.scope)
        return pb.ListSkillsResponse(
            skills=[
                pb.SkillInfo(
                    scope=str(scope),
                    skill=name,
                    version=m.version,
                    description=str((m.frontmatter or {}).get("description", "")),
                    usable=m.usable,
                    errors=len(m.errors),
                )
                for name, m in sorted(self.store.manifests(scope).items())
            ]
        )

    @unary
    def GetManifests(
        self, request: pb.GetManifestsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.GetManifestsResponse:
        scope = allowed(principal, Level.read, request.scope)
        if request.whole_scope:
            found = self.engine.load_scope(scope)
        else:
            found = self.engine.load_skills(scope, [check_entry(s) for s in request.skills])
        return pb.GetManifestsResponse(
            manifests_json=[wire.manifest_bytes(m) for m in found.values()]
        )

    @unary
    def Revisions(
        self, request: pb.RevisionsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.RevisionsResponse:
        domains = [check_domain(d) for d in request.domains]
        for d in domains:
            principal.require_domain(d)
        return pb.RevisionsResponse(revisions=wire.revs_to_pb(self.engine.revisions(domains)))

    @streaming
    async def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.FileChunk]:
        """One range at a time, read in the executor; a client that stops reading leaves the
        stream waiting on the event loop, holding no thread (capped per token)."""
        with self.backend.streams.hold(principal):
            for i, r in enumerate(request.ranges):
                data = await self.backend.run(self._read, principal, r)
                yield pb.FileChunk(range=i, data=data[: wire.PIECE])
                for off in range(wire.PIECE, len(data), wire.PIECE):
                    yield pb.FileChunk(range=i, data=data[off : off + wire.PIECE])

    def _read(self, principal: Principal, r: pb.BlobRange) -> bytes:
        sha = check_sha(r.sha256)
        if r.offset < 0 or r.length < 0:
            raise InvalidPath(f"invalid range of {sha}: offset and length must not be negative")
        end = r.offset + r.length if r.length else None
        if r.HasField("source") and r.source.scope:
            size = self.backend.proofs.readable_size(principal, r.source, sha)
            entry = FileEntry.model_construct(sha256=sha, size=size, mode=0, mtime=0.0)
            return self.store.read_entry(entry, r.offset, end)
        if not principal.reads_everything:
            raise PermissionDenied(
                f"token {principal.name!r} must name the manifest a hash comes from "
                "(source: scope, skill, version); only tokens that read every scope ('*:read') "
                "may read by hash alone"
            )
        return self.store.read_blob(sha, r.offset, end)

    @unary
    def LoadSkillThroughPath(
        self, request: pb.LoadRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.LoadResponse:
        snap = self._snapshot(principal, request.view)
        return pb.LoadResponse(text=snap.load(request.skill_id, request.path or SKILL_MD))

    @unary
    def Prompt(
        self, request: pb.PromptRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.PromptResponse:
        snap = self._snapshot(principal, request.view)
        return pb.PromptResponse(prompt=snap.prompt(), revisions=wire.revs_to_pb(snap.revisions))

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
                yield self._event(principal, batch, {}, False)
            return
        with self.backend.watches.hold(principal):
            stream = self.backend.hub.subscribe(domain, request.with_manifests)
            try:
                async for event in self._follow(stream, context, principal, since, wait):
                    yield event
            finally:
                self.backend.hub.unsubscribe(stream)

    @asynchronous
    async def WatchMany(
        self, request: pb.WatchManyRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.WatchManyResponse:
        """`Engine.changes_many` for grpc:// clients: one call, one watch slot, however many
        domains. It waits on the hub's events (subscribed for the call), reading the store
        only for domains the hub is not at: an idle call costs no store call."""
        request = well_formed(request)
        if len(request.domains) > MAX_WATCH_MANY:
            raise InvalidPath(
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
        if wait <= SHORT_WATCH:  # a look, as short as any unary call: not held
            return self._many(principal, await run(self.engine.changes_many, since, wait))
        with self.backend.watches.hold(principal):
            wake = asyncio.Event()
            streams = {d: hub.subscribe(d, False) for d in since}
            for stream in streams.values():
                stream.wake = wake  # one wake for all of them
            try:
                found = await self._many_wait(streams, since, wake, wait)
            finally:
                for stream in streams.values():
                    hub.unsubscribe(stream)
        principal = self.backend.tokens.authenticate(bearer(context))
        for domain in found:
            principal.require_domain(domain)
        return self._many(principal, found)

    async def _many_wait(
        self,
        streams: dict[str, Stream],
        since: dict[str, Revision],
        wake: asyncio.Event,
        wait: float,
    ) -> dict[str, list[Change]]:
        hub, run = self.backend.hub, self.backend.run
        behind = {d: r for d, r in since.items() if not _same(hub.position(d), r)}
        found = await run(self.engine.changes_many, behind, 0) if behind else {}
        deadline = time.monotonic() + wait
        while not found and not self.backend.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wake.clear()
            if not any(s.events or s.overflowed or s.closed for s in streams.values()):
                try:
                    await asyncio.wait_for(wake.wait(), left)
                except TimeoutError:
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
                    got, _, late = self._after(stream.events.popleft(), at)
                    if late is not None:
                        behind[domain] = since[domain]
                        break
                    changes += got
                    at = changes[-1].revision if changes else at
                if changes and domain not in behind:
                    found[domain] = changes
            if behind:
                found.update(await run(self.engine.changes_many, behind, 0))
        return found

    def _many(self, principal: Principal, found: dict[str, list[Change]]) -> pb.WatchManyResponse:
        return pb.WatchManyResponse(
            events=[
                pb.DomainEvent(domain=d, event=self._event(principal, changes, {}, False))
                for d, changes in found.items()
                if changes
            ]
        )

    async def _follow(
        self,
        stream: Stream,
        context: grpc.ServicerContext,
        principal: Principal,
        since: Revision,
        wait: float,
    ) -> AsyncIterator[pb.WatchEvent]:
        """The stream's events: what the log holds after `since` (read here until the hub's
        events take over), then the hub's, each cut to what follows `since`; a stream the hub
        had to drop events of is told to reload (a reset at the domain's revision)."""
        domain = stream.domain
        quiet_until = time.monotonic() + wait if wait > 0 else None
        behind: Revision | None = since
        while not stream.closed and not self.backend.stopping.is_set():
            timeout = WATCH_POLL
            if quiet_until is not None:
                timeout = min(timeout, quiet_until - time.monotonic())
                if timeout <= 0:
                    return
            changes: Sequence[Change] = ()
            manifests: dict[tuple[Scope, str, int], pb.ScopedManifest] = {}
            if behind is not None:  # read the log up to the hub's position ourselves
                changes = await self._catch_up(domain, behind)
                behind = None
                if changes and stream.manifests:
                    manifests = await self.backend.run(manifests_of, self.engine, changes)
            else:
                event = await stream.next(timeout)
                if stream.overflowed:
                    stream.overflowed = False
                    changes = await self._reset(domain)
                elif event is not None:
                    changes, manifests, behind = self._after(event, since)
            # The token again, at every event and poll: a revoked token ends the stream
            # (UNAUTHENTICATED), narrowed grants apply to what is shown from now on.
            principal = self.backend.tokens.authenticate(bearer(context))
            principal.require_domain(domain)
            if not changes:
                continue
            since = changes[-1].revision
            yield self._event(principal, changes, manifests, stream.manifests)
            if quiet_until is not None:
                quiet_until = time.monotonic() + wait

    @staticmethod
    def _after(
        event: Event, since: Revision
    ) -> tuple[Sequence[Change], dict[tuple[Scope, str, int], pb.ScopedManifest], Revision | None]:
        """What of `event` follows `since`: (changes, manifests, None), or ((), {}, since)
        when the stream is behind the event's start and must read the log itself."""
        b = event.before
        if since.epoch == b.epoch and since.counter >= b.counter:
            return [c for c in event.changes if c.revision.counter > since.counter or (
                c.revision.epoch != since.epoch)], event.manifests, None  # fmt: skip
        last = event.through
        if since.epoch == last.epoch and since.counter >= last.counter:
            return (), {}, None  # already there
        return (), {}, since

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

    @staticmethod
    def _event(
        principal: Principal,
        changes: Sequence[Change],
        manifests: dict[tuple[Scope, str, int], pb.ScopedManifest],
        with_manifests: bool,
    ) -> pb.WatchEvent:
        shown = [
            c
            for c in changes
            if c.op == "reset" or (c.scope is not None and principal.may(Level.read, c.scope))
        ]
        # Sent even when nothing is shown: `through` lets the follower move on without
        # reloading (C3), and reveals nothing `Revisions` would not.
        event = pb.WatchEvent(
            changes=[wire.change_to_pb(c) for c in shown],
            through=wire.rev_to_pb(changes[-1].revision),
        )
        if with_manifests:
            event.manifests.extend(
                manifests[key]
                for c in shown
                if c.op == "put"
                and c.scope is not None
                and (key := (c.scope, c.skill or "", c.version or 0)) in manifests
            )
        return event

    @unary
    def History(
        self, request: pb.HistoryRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.HistoryResponse:
        scope = allowed(principal, Level.read, request.scope)
        skill = check_entry(request.skill)
        return pb.HistoryResponse(
            history_json=[wire.manifest_bytes(m) for m in self.engine.history(scope, skill)]
        )

    @unary
    def RecordUsage(
        self, request: pb.RecordUsageRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.Empty:
        agent = check_id("agent", request.agent_id)
        counts: dict[tuple[str, str], int] = {}
        times: dict[tuple[str, str], float] = {}
        now = time.time()
        for c in request.counts:
            scope = Scope.user(agent, c.user_id) if c.user_id else Scope.shared(agent)
            principal.require(Level.read, scope)
            if c.count <= 0:
                raise InvalidPath(f"usage count {c.count} of {c.skill!r} must be positive")
            key = (c.user_id, check_skill_name(c.skill))
            counts[key] = counts.get(key, 0) + c.count
            # a client's clock may be ahead: a time never passes the server's (kept forward)
            times[key] = max(times.get(key, 0.0), min(c.last_used, now) if c.last_used > 0 else now)
        self.store.record_usage(agent, counts, times)
        return pb.Empty()

    @unary
    def Audit(
        self, request: pb.AuditRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.AuditResponse:
        if not 0 <= request.limit <= AUDIT_MAX:
            raise InvalidPath(f"audit limit {request.limit}: give 1 to {AUDIT_MAX} (0: 1000)")
        entries = self.store.audit_scopes(
            self._audit_scopes(principal, request.target),
            since=request.since if request.HasField("since") else None,
            until=request.until if request.HasField("until") else None,
            actor=request.actor if request.HasField("actor") else None,
            skill=check_entry(request.skill) if request.HasField("skill") else None,
            limit=request.limit or 1000,
        )
        return pb.AuditResponse(entries=[wire.audit_to_pb(e) for e in entries])

    def _audit_scopes(self, principal: Principal, target: str) -> list[Scope]:
        """The scopes an audit target names that the token may read: one scope or market
        only with read on it; of an agent, those of its scopes the token may read."""
        if ":" in target:
            return [allowed(principal, Level.read, target)]
        if target.startswith("markets/"):
            return [allowed(principal, Level.read, "market:" + target.split("/", 1)[1])]
        domain = check_domain(target if target.startswith("agents/") else f"agents/{target}")
        principal.require_domain(domain)
        return [s for s in self.engine.scopes(domain) if principal.may(Level.read, s)]

    @unary
    def Access(
        self, request: pb.AccessRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.AccessResponse:
        access = principal.access(wire.scope_from(request.scope))
        return pb.AccessResponse(**access.model_dump(exclude={"scope"}))

    @unary
    def Ping(
        self, request: pb.PingRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.Empty:
        self.engine.ping()
        return pb.Empty()
