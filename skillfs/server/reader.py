"""The `SkillReader` service: what agent workers call. Views (snapshot, listing, prompt, load
through a path) come from the runtime's `Skills` of each (agent, user, markets); the engine
primitives (manifests, revisions, file ranges, watch, history) are served to grpc:// stores.
Every call is authorized by the token's grants (docs/server.md)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import Any

import grpc

from skillfs.auth import Level, Principal
from skillfs.engines import grpc_wire as wire
from skillfs.engines.base import EMPTY
from skillfs.errors import InvalidPath, PermissionDenied
from skillfs.model import FileEntry, Revision, Scope, error_findings
from skillfs.names import check_domain, check_id, check_skill_name
from skillfs.proto import skillfs_pb2 as pb
from skillfs.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.runtime import Snapshot
from skillfs.server.backend import Backend, view_scopes
from skillfs.server.rpc import allowed, bearer, check_sha, streaming, unary
from skillfs.skill_md import SKILL_MD

#: A Watch stream re-checks for cancellation and shutdown at least this often (seconds).
WATCH_POLL = 1.0
#: A Watch asking to wait at most this long is a catch-up read (the runtime's per-step
#: `changes(..., 0)`), as short as any unary call: it does not count against the limits.
SHORT_WATCH = 0.25


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
    )


class Reader(pb_grpc.SkillReaderServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.store = backend.store
        self.engine = backend.engine

    def _snapshot(self, principal: Principal, view: pb.View) -> Snapshot:
        for scope in view_scopes(view):
            principal.require(Level.read, scope)
        return self.backend.skills.snapshot(view)

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
            found = self.engine.load_skills(scope, [check_skill_name(s) for s in request.skills])
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
    def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.ServicerContext, principal: Principal
    ) -> Iterator[pb.FileChunk]:
        for i, r in enumerate(request.ranges):
            data = self._read(principal, r)
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
    def Watch(
        self, request: pb.WatchRequest, context: grpc.ServicerContext, principal: Principal
    ) -> Iterator[pb.WatchEvent]:
        domain = check_domain(request.domain)
        principal.require_domain(domain)
        if request.HasField("since"):
            since = wire.rev_from_pb(request.since)
        else:
            since = self.engine.revisions([domain])[domain] or EMPTY
        wait = request.max_wait_seconds
        short = 0 < wait <= SHORT_WATCH
        with contextlib.nullcontext() if short else self.backend.watches.hold(principal):
            yield from self._watch(request, context, principal, domain, since)

    def _watch(
        self,
        request: pb.WatchRequest,
        context: grpc.ServicerContext,
        principal: Principal,
        domain: str,
        since: Revision,
    ) -> Iterator[pb.WatchEvent]:
        wait = request.max_wait_seconds
        quiet_until = time.monotonic() + wait if wait > 0 else None
        while context.is_active() and not self.backend.stopping.is_set():
            timeout = WATCH_POLL
            if quiet_until is not None:
                timeout = min(timeout, quiet_until - time.monotonic())
                if timeout <= 0:
                    return
            batch = self.engine.changes(domain, since, timeout)
            # The token again, at every poll: a revoked token ends the stream
            # (UNAUTHENTICATED), narrowed grants apply to what is shown from now on.
            principal = self.backend.tokens.authenticate(bearer(context))
            principal.require_domain(domain)
            if not batch:
                continue
            since = batch[-1].revision
            shown = [
                c
                for c in batch
                if c.op == "reset" or (c.scope is not None and principal.may(Level.read, c.scope))
            ]
            # Sent even when nothing is shown: `through` lets the follower move on without
            # reloading (C3), and reveals nothing `Revisions` would not.
            event = pb.WatchEvent(
                changes=[wire.change_to_pb(c) for c in shown], through=wire.rev_to_pb(since)
            )
            if request.with_manifests:
                event.manifests.extend(self._manifests_of(shown))
            yield event
            if quiet_until is not None:
                quiet_until = time.monotonic() + wait

    def _manifests_of(self, changes: Iterable[Any]) -> list[pb.ScopedManifest]:
        """The manifest each put wrote, while it is still live: one load per scope."""
        puts = [c for c in changes if c.op == "put" and c.scope is not None]
        wanted: dict[Scope, dict[str, None]] = {}
        for c in puts:
            wanted.setdefault(c.scope, {})[c.skill] = None
        live = {scope: self.engine.load_skills(scope, list(s)) for scope, s in wanted.items()}
        out = []
        for c in puts:
            m = live[c.scope].get(c.skill)
            if m is not None and m.version == c.version:
                out.append(
                    pb.ScopedManifest(scope=str(c.scope), manifest_json=wire.manifest_bytes(m))
                )
        return out

    @unary
    def History(
        self, request: pb.HistoryRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.HistoryResponse:
        scope = allowed(principal, Level.read, request.scope)
        skill = check_skill_name(request.skill)
        return pb.HistoryResponse(
            history_json=[wire.manifest_bytes(m) for m in self.engine.history(scope, skill)]
        )

    @unary
    def RecordUsage(
        self, request: pb.RecordUsageRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.Empty:
        agent = check_id("agent", request.agent_id)
        counts: dict[tuple[str, str], int] = {}
        for c in request.counts:
            scope = Scope.user(agent, c.user_id) if c.user_id else Scope.shared(agent)
            principal.require(Level.read, scope)
            if c.count <= 0:
                raise InvalidPath(f"usage count {c.count} of {c.skill!r} must be positive")
            key = (c.user_id, check_skill_name(c.skill))
            counts[key] = counts.get(key, 0) + c.count
        self.store.record_usage(agent, counts)
        return pb.Empty()

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
