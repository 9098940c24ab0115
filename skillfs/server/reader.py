"""The `SkillReader` service: what agent workers call. Views (snapshot, listing, prompt, load
through a path) come from the runtime's `Skills` of each (agent, user, markets); the engine
primitives (manifests, revisions, file ranges, watch, history) are served to grpc:// stores.
Every call is authorized by the token's grants (docs/server.md)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from skillfs.auth import Level, Principal
from skillfs.errors import InvalidArgument, PermissionDenied
from skillfs.model import FileEntry, Scope, error_findings
from skillfs.model.manifest import shortened
from skillfs.model.names import check_domain, check_entry, check_id, check_skill_name
from skillfs.remote import wire
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.runtime import Snapshot
from skillfs.server.backend import Backend
from skillfs.server.rpc import (
    allowed,
    budget,
    check_sha,
    on_loop,
    streaming,
    unary,
)
from skillfs.server.views import view_key, view_scopes
from skillfs.server.watching import Watching
from skillfs.spec.skill_md import SKILL_MD
from skillfs.store.limits import check_usage

#: The most entries one Audit call returns.
AUDIT_MAX = 10_000
T = TypeVar("T")


def _names(items: Sequence[T], what: str) -> Sequence[T]:
    """A request's list of names, refused past `remote.wire.NAMES_MAX` (a client sends more in
    several calls), so that no request grows without bound."""
    if len(items) > wire.NAMES_MAX:
        raise InvalidArgument(
            f"a request names {len(items)} {what}: at most {wire.NAMES_MAX}; send them in "
            "several calls"
        )
    return items


def _view_batches(skills: Sequence[Any], size: int) -> Iterator[tuple[list[pb.ViewSkill], bool]]:
    """A view's skills in messages of at most `size` bytes, a skill with more files than one
    message holds continued in the next (its head again, with the rest of its files)."""
    batch: list[pb.ViewSkill] = []
    used = 0
    sent = False
    for s in skills:
        head = _view_skill(s)
        files = [
            pb.FileEntry(path=p, sha256=e.sha256, size=e.size, mode=e.mode, mtime=e.mtime)
            for p, e in sorted(s.files.items())
        ]
        n = head.ByteSize() + 8 + sum(f.ByteSize() + 8 for f in files)
        if batch and used + n > size:
            yield batch, False
            batch, used, sent = [], 0, True
        taken: list[pb.FileEntry] = []
        part = head.ByteSize() + 8
        for f in files:
            if taken and used + part + f.ByteSize() + 8 > size:
                batch.append(_with_files(head, taken))
                yield batch, True
                batch, used, sent, taken, part = [], 0, True, [], head.ByteSize() + 8
            taken.append(f)
            part += f.ByteSize() + 8
        batch.append(_with_files(head, taken))
        used += part
    if batch or not sent:
        yield batch, False


def _with_files(head: pb.ViewSkill, files: list[pb.FileEntry]) -> pb.ViewSkill:
    out = pb.ViewSkill()
    out.CopyFrom(head)
    out.files.extend(files)
    return out


def _view_skill(s: Any) -> pb.ViewSkill:
    return pb.ViewSkill(
        id=s.id,
        name=s.name,
        description=shortened(s.description),
        scope=str(s.scope) if s.scope else "",
        version=s.version or 0,
        commit_id=s.digest,
        shadows=list(s.shadows),
        candidate=s.candidate,
        pinned=s.pinned or "",
    )


class Reader(Watching, pb_grpc.SkillReaderServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.store = backend.store
        self.engine = backend.engine

    def _snapshot(self, principal: Principal, view: pb.View) -> Snapshot:
        key = view_key(view)
        for scope in view_scopes(key):
            principal.require(Level.read, scope)
        return self.backend.views.snapshot(key)

    @streaming
    async def Snapshot(
        self, request: pb.SnapshotRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.SnapshotResponse]:
        """The view's skills from one snapshot, in bounded messages: revisions and token in
        the first, a skill whose file table passes a message continued in the next."""
        snap = await self.backend.run(self._snapshot, principal, request.view)
        revisions = wire.revs_to_pb(snap.revisions)
        known = {d: wire.rev_from_pb(r) for d, r in request.known.items()}
        if known and known == {d: r for d, r in snap.revisions.items() if r is not None}:
            yield pb.SnapshotResponse(revisions=revisions, unchanged=True, token=snap.token)
            return
        first = True
        for skills, continued in _view_batches(snap.skills, budget(context)):
            message = pb.SnapshotResponse(skills=skills, continued=continued)
            if first:
                for domain, rev in revisions.items():
                    message.revisions[domain].CopyFrom(rev)
                message.token = snap.token
                first = False
            yield message

    @streaming
    async def ListSkills(
        self, request: pb.ListSkillsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.ListSkillsResponse]:
        infos = await self.backend.run(self._skill_infos, principal, request)
        for batch in wire.by_size(infos, pb.SkillInfo.ByteSize, budget(context)):
            yield pb.ListSkillsResponse(skills=batch)

    def _skill_infos(self, principal: Principal, request: pb.ListSkillsRequest) -> list[Any]:
        if request.WhichOneof("target") == "view":
            snap = self._snapshot(principal, request.view)
            return [
                pb.SkillInfo(
                    scope=str(s.scope) if s.scope else "",
                    skill=s.id,
                    version=s.version or 0,
                    description=shortened(s.description),
                    usable=True,
                    errors=len(error_findings(s.findings)),
                )
                for s in snap.skills
            ]
        scope = allowed(principal, Level.read, request.scope)
        return [
            pb.SkillInfo(
                scope=str(scope),
                skill=name,
                version=m.version,
                description=shortened(str((m.frontmatter or {}).get("description", ""))),
                usable=m.usable,
                errors=len(m.errors),
            )
            for name, m in sorted(self.store.manifests(scope).items())
        ]

    @streaming
    async def GetManifests(
        self, request: pb.GetManifestsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.GetManifestsResponse]:
        """One read of the store (a scope is one consistent read: C1, C4), streamed in
        bounded messages."""
        scope = allowed(principal, Level.read, request.scope)
        if request.whole_scope:
            found = await self.backend.run(self.engine.load_scope, scope)
        else:
            names = [check_entry(s) for s in _names(request.skills, "skills")]
            found = await self.backend.run(self.engine.load_skills, scope, names)
        blobs = (wire.manifest_bytes(m) for m in found.values())
        for batch, continued in wire.packed(blobs, budget(context)):
            yield pb.GetManifestsResponse(manifests_json=batch, continued=continued)

    @on_loop
    async def Revisions(
        self, request: pb.RevisionsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.RevisionsResponse:
        """The per-step check (C3): read from the store after the call arrived, in one read
        shared with the calls that arrived with it (`skillfs/server/revisions.py`)."""
        domains = [check_domain(d) for d in _names(request.domains, "domains")]
        for d in domains:
            principal.require_domain(d)
        found = await self.backend.shared_reads.revisions(domains)
        return pb.RevisionsResponse(revisions=wire.revs_to_pb(found))

    @streaming
    async def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.FileChunk]:
        """One range at a time: from the blob cache on the event loop when the manifest and
        the blob are in memory (a fleet prefetching a publish's files), else read in the
        executor; a client that stops reading leaves the stream waiting on the event loop,
        holding no thread (capped per token)."""
        with self.backend.streams.hold(principal):
            for i, r in enumerate(_names(request.ranges, "ranges")):
                data = self._read(principal, r, True)
                if data is None:
                    data = await self.backend.run(self._read, principal, r)
                assert data is not None  # only a cached_only read may miss
                yield pb.FileChunk(range=i, data=data[: wire.PIECE])
                for off in range(wire.PIECE, len(data), wire.PIECE):
                    yield pb.FileChunk(range=i, data=data[off : off + wire.PIECE])

    def _read(
        self, principal: Principal, r: pb.BlobRange, cached_only: bool = False
    ) -> bytes | None:
        """A range's bytes; with `cached_only`, None unless memory holds all it needs."""
        sha = check_sha(r.sha256)
        if r.offset < 0 or r.length < 0:
            raise InvalidArgument(f"invalid range of {sha}: offset and length must not be negative")
        end = r.offset + r.length if r.length else None
        if r.HasField("source") and r.source.scope:
            size = self.backend.proofs.readable_size(principal, r.source, sha, cached_only)
            if size is None:
                return None
            entry = FileEntry(sha256=sha, size=size, mode=0, mtime=0.0)
            if cached_only:
                return self.store.blobs.read_cached(entry, r.offset, end)
            return self.store.read_entry(entry, r.offset, end)
        if cached_only:
            return None
        if not principal.reads_everything:
            raise PermissionDenied(
                f"token {principal.name!r} must name the manifest a hash comes from "
                "(source: scope, skill, version); only tokens that read every scope ('*:read') "
                "may read by hash alone"
            )
        return self.store.blobs.read_unsized(sha, r.offset, end)

    @unary
    def LoadSkillThroughPath(
        self, request: pb.LoadRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.LoadResponse:
        snap = self._snapshot(principal, request.view)
        return pb.LoadResponse(text=snap.load(request.skill_id, request.path or SKILL_MD))

    @streaming
    async def Prompt(
        self, request: pb.PromptRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.PromptResponse]:
        """The prompt block of one snapshot, its text in bounded pieces (revisions first)."""
        snap = await self.backend.run(self._snapshot, principal, request.view)
        text = await self.backend.run(snap.prompt)
        step = max(budget(context) // 4, 1)  # characters: at most 4 bytes each in UTF-8
        for i in range(0, max(len(text), 1), step):
            message = pb.PromptResponse(prompt=text[i : i + step])
            if i == 0:
                for domain, rev in wire.revs_to_pb(snap.revisions).items():
                    message.revisions[domain].CopyFrom(rev)
            yield message

    @streaming
    async def History(
        self, request: pb.HistoryRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.HistoryResponse]:
        """A skill's replaced versions from one read: whole manifests, their summaries, or one
        version, in bounded messages."""
        scope = allowed(principal, Level.read, request.scope)
        skill = check_entry(request.skill)
        size = budget(context)
        if request.summaries:
            found = await self.backend.run(self.engine.history_summaries, scope, skill)
            rows = [m.model_dump_json().encode() for m in found]
            for batch in wire.by_size(rows, len, size):  # a summary is small: never cut
                yield pb.HistoryResponse(summaries_json=batch)
            return
        if request.HasField("version"):
            one = await self.backend.run(self.engine.history_version, scope, skill, request.version)
            versions = [] if one is None else [one]
        else:
            versions = await self.backend.run(self.engine.history, scope, skill)
        blobs = (wire.manifest_bytes(m) for m in versions)
        for batch, continued in wire.packed(blobs, size):
            yield pb.HistoryResponse(history_json=batch, continued=continued)

    @unary
    def RecordUsage(
        self, request: pb.RecordUsageRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.Empty:
        agent = check_id("agent", request.agent_id)
        counts: dict[tuple[str, str], int] = {}
        times: dict[tuple[str, str], float] = {}
        now = time.time()
        for c in _names(request.counts, "usage counts"):
            scope = Scope.user(agent, c.user_id) if c.user_id else Scope.shared(agent)
            principal.require(Level.read, scope)
            key = (c.user_id, check_skill_name(c.skill))
            check_usage({key: c.count})  # each as sent, before a key's counts are summed
            if c.count == 0:  # as `Store.record_usage`: no load, nothing to record
                continue
            counts[key] = counts.get(key, 0) + c.count
            # a client's clock may be ahead: a time never passes the server's (kept forward)
            times[key] = max(times.get(key, 0.0), min(c.last_used, now) if c.last_used > 0 else now)
        if not principal.administers_agent(agent):  # only what a view of it shows counts
            seen = self.store.usage.seen(agent, counts, lambda s: principal.may(Level.read, s))
            counts = {key: n for key, n in counts.items() if key in seen}
        self.store.usage.record(agent, counts, times)
        return pb.Empty()

    @streaming
    async def Audit(
        self, request: pb.AuditRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.AuditResponse]:
        if not 0 <= request.limit <= AUDIT_MAX:
            raise InvalidArgument(f"audit limit {request.limit}: give 1 to {AUDIT_MAX} (0: 1000)")
        entries = await self.backend.run(self._audit, principal, request)
        records = [wire.audit_to_pb(e) for e in entries]
        for batch in wire.by_size(records, pb.AuditRecord.ByteSize, budget(context)):
            yield pb.AuditResponse(entries=batch)

    def _audit(self, principal: Principal, request: pb.AuditRequest) -> list[Any]:
        return self.store.governance.audit_scopes(
            self._audit_scopes(principal, request.target),
            since=request.since if request.HasField("since") else None,
            until=request.until if request.HasField("until") else None,
            actor=request.actor if request.HasField("actor") else None,
            skill=check_entry(request.skill) if request.HasField("skill") else None,
            limit=request.limit or 1000,
        )

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
    ) -> pb.PingResponse:
        self.engine.ping()
        return pb.PingResponse(max_ops=self.engine.max_ops or 0, protocol=wire.PROTOCOL)
