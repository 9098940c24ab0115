"""The `SkillAdmin` service: writes (blob upload and touch, commits of client-built manifests,
publish, delete, rollback), history retention, listings, usage and GC, over the `Store`, each
authorized by the token's grants. Commits are held to the Store's rules and to the blob
proofs of `skillfs.server.proofs` (docs/server.md)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import AsyncIterator, Sequence

import grpc

from skillfs.auth import Level, Principal, write_level
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument, NotFound, TooLarge
from skillfs.model import CommitResult, File, Manifest, Scope
from skillfs.model.names import check_domain, check_entry, check_id, normalize_path
from skillfs.model.ops import WriteOptions
from skillfs.remote import wire
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.backend import Backend
from skillfs.server.rpc import (
    allowed,
    bearer,
    budget,
    check_sha,
    expected,
    messages,
    on_loop,
    streaming,
    unary,
)
from skillfs.server.uploads import Uploads, may_upload
from skillfs.server.vouching import Vouching
from skillfs.store.quotas import prepaid
from skillfs.store.rules import check_shape, storable
from skillfs.store.who import check_commit_id, check_message

#: Hashes per ListBlobs message (66 bytes each with their framing: about 260 KiB).
BLOBS_BATCH = 4000
MiB = 1024 * 1024
#: The most manifest bytes one Commit stream may carry (a hundred skills at the limit of
#: files, ~2 MiB of manifest each, fit): what the server holds of one commit at a time.
COMMIT_BYTES = 256 * MiB


class Admin(pb_grpc.SkillAdminServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.store = backend.store
        self.engine = backend.engine
        self.vouching = Vouching(backend.store)
        self.uploads = Uploads(backend)

    @unary
    def TouchBlobs(
        self, request: pb.TouchBlobsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.TouchBlobsResponse:
        now = self.backend.now(principal, request.now)
        if len(request.blobs) > wire.NAMES_MAX:
            raise InvalidArgument(
                f"TouchBlobs names {len(request.blobs)} blobs: at most {wire.NAMES_MAX}; send "
                "them in several calls"
            )
        if principal.reads_everything:
            present = self.engine.touch_blobs([check_sha(b.sha256) for b in request.blobs], now)
            return pb.TouchBlobsResponse(present=[pb.BlobProof(sha256=s) for s in sorted(present)])
        proven = {
            p.sha256: p for b in request.blobs if (p := self.backend.proofs.proven(principal, b))
        }
        present = self.engine.touch_blobs(list(proven), now) if proven else set()
        return pb.TouchBlobsResponse(present=[proven[s] for s in sorted(present)])

    @on_loop
    async def UploadBlob(
        self,
        request: AsyncIterator[pb.UploadBlobRequest],
        context: grpc.ServicerContext,
        principal: Principal,
    ) -> pb.UploadBlobResponse:
        """One blob: its header, then its data (`server.uploads` holds it to the rules)."""
        may_upload(principal)
        with self.backend.streams.hold(principal):
            incoming = messages(request)
            header = await anext(incoming, None)
            if header is None or header.WhichOneof("part") != "header":
                raise InvalidArgument(
                    "UploadBlob: send the header (sha256, size) first, then the data"
                )
            h = header.header
            blobs = self.uploads.named("UploadBlob", [(h.sha256, h.size)])
            async with self.uploads.charged(principal, h.domain, blobs) as charged_in:
                data = await self.uploads.gathered("UploadBlob", _blob_data(incoming), h.size)
                receipts = await self.uploads.store_all(
                    "UploadBlob", principal, blobs, data, h.now, charged_in
                )
        return pb.UploadBlobResponse(receipt=receipts[0])

    @on_loop
    async def UploadBlobs(
        self,
        request: AsyncIterator[pb.UploadBlobsRequest],
        context: grpc.ServicerContext,
        principal: Principal,
    ) -> pb.UploadBlobsResponse:
        """Many small blobs in one call (a call each cost more than their bytes): named in
        the first message, charged as one, their bytes concatenated in the data that follows,
        all checked before any is stored."""
        may_upload(principal)
        with self.backend.streams.hold(principal):
            incoming = messages(request)
            first = await anext(incoming, None)
            if first is None or not first.blobs:
                raise InvalidArgument(
                    "UploadBlobs: name the blobs (sha256, size) in the first message, then "
                    "send their bytes in that order"
                )
            named = [(b.sha256, b.size) for b in first.blobs]
            blobs = self.uploads.named("UploadBlobs", named)
            total = sum(size for _, size in blobs)
            async with self.uploads.charged(principal, first.domain, blobs) as charged_in:
                pieces = _batch_data(first.data, incoming)
                data = await self.uploads.gathered("UploadBlobs", pieces, total)
                receipts = await self.uploads.store_all(
                    "UploadBlobs", principal, blobs, data, first.now, charged_in
                )
        return pb.UploadBlobsResponse(receipts=receipts)

    @on_loop
    async def Commit(
        self,
        request: AsyncIterator[pb.CommitRequest],
        context: grpc.ServicerContext,
        principal: Principal,
    ) -> pb.CommitResponse:
        """The messages of the stream gathered on the event loop as they arrive (each op's
        manifest put back together from its pieces, bounded by the store's limits), then one
        atomic commit in the executor; the token is checked again before it."""
        with self.backend.streams.hold(principal):
            domain, ops, proofs = await self._gathered(messages(request))
        principal = self.backend.tokens.authenticate(bearer(context))
        return await self.backend.run(self._commit, principal, domain, ops, proofs)

    async def _gathered(
        self, incoming: AsyncIterator[pb.CommitRequest]
    ) -> tuple[str, list[tuple[str, bytes, int]], dict[str, pb.BlobProof]]:
        domain = ""
        ops: list[tuple[str, bytes, int]] = []
        proofs: dict[str, pb.BlobProof] = {}
        piece: list[bytes] = []
        size = 0
        limit = COMMIT_BYTES
        async for message in incoming:
            domain = domain or message.domain
            for op in message.ops:
                piece.append(op.manifest_json)
                size += len(op.manifest_json)
                if size > limit:
                    raise TooLarge(
                        f"a commit of more than {limit} bytes of manifests: split it into "
                        "several commits"
                    )
                if not op.continued:
                    ops.append((op.scope, b"".join(piece), op.expect))
                    piece = []
            if len(ops) > wire.NAMES_MAX or len(proofs) + len(message.proofs) > 4 * wire.NAMES_MAX:
                raise TooLarge(
                    f"a commit of more than {wire.NAMES_MAX} skills: split it into several commits"
                )
            proofs.update((p.sha256, p) for p in message.proofs)
        if piece:
            raise InvalidArgument("Commit: the stream ended inside a manifest; nothing was written")
        return domain, ops, proofs

    def _commit(
        self,
        principal: Principal,
        domain_name: str,
        sent: list[tuple[str, bytes, int]],
        proofs: dict[str, pb.BlobProof],
    ) -> pb.CommitResponse:
        domain = check_domain(domain_name)
        checked: list[tuple[Scope, Manifest, int]] = []
        for scope_text, manifest_json, expect in sent:
            m = wire.manifest_request(manifest_json)
            scope = allowed(principal, write_level(check_entry(m.skill)), scope_text)
            checked.append((scope, self.vouching.checked(scope, m, expect), expect))
        check_shape([(scope, m.skill) for scope, m, _ in checked], domain, self.store.max_ops)
        for _, m, _ in checked:
            self.backend.proofs.require_proven(principal, m, proofs)
        self._touch(checked, principal)
        moved = [(scope, m.skill, expect) for scope, m, expect in checked if m.deleted]  # sources
        committer = self.store.committer
        current = committer.read_built([(scope, m.skill) for scope, m, _ in checked])
        ops = [
            CommitOp(
                scope=scope,
                manifest=storable(
                    scope,
                    self.vouching.derived(m, principal, scope, expect, moved, current),
                ),
                expect=expect,
            )
            for scope, m, expect in checked
        ]
        with prepaid(self.backend.proofs.prepaid(principal, domain, proofs)):
            revision = committer.commit_built(domain, ops, current)
        for op_ in ops:
            self.backend.proofs.index.remember(op_.scope, op_.manifest)
        return pb.CommitResponse(revision=wire.rev_to_pb(revision))

    def _touch(self, checked: Sequence[tuple[Scope, Manifest, int]], principal: Principal) -> None:
        """Refresh the last-use time of every blob the commit names and refuse the commit if
        one is gone: a client may commit without touching first (or long after), and GC may
        have swept a blob nothing referenced. Once touched, GC's sweep leaves it alone for its
        grace period, longer than the commit takes (docs/design.md §2)."""
        shas = sorted({e.sha256 for _, m, _ in checked for _, e in m.all_files()})
        if not shas:
            return
        given = max(m.committed_at for _, m, _ in checked)
        missing = set(shas) - self.engine.touch_blobs(shas, self.backend.now(principal, given))
        if missing:
            sha = min(missing)
            where = next(
                f"{scope}/{m.skill}/{path}"
                for scope, m, _ in checked
                for path, e in m.all_files()
                if e.sha256 == sha
            )
            raise NotFound(
                f"{where} names blob {sha}, which the store does not hold (never uploaded, or "
                "garbage-collected since): upload it again, then commit"
            )

    @on_loop
    async def Publish(
        self,
        request: AsyncIterator[pb.PublishRequest],
        context: grpc.ServicerContext,
        principal: Principal,
    ) -> pb.CommitResult:
        """Files gathered on the event loop as they arrive, each message held to the limits
        before the next is read (path, number of files, bytes, paths included); the token is
        checked again before the commit, so a stream opened before a revocation cannot
        commit after it."""
        with self.backend.streams.hold(principal):
            incoming = messages(request)
            first = await anext(incoming, None)
            if first is None or first.WhichOneof("part") != "header":
                raise InvalidArgument(
                    "Publish: send the header (scope, skill) first, then the files"
                )
            h = first.header
            skill = check_entry(h.skill)
            allowed(principal, write_level(skill), h.scope)
            parts = await self._gather(skill, incoming, principal)
        principal = self.backend.tokens.authenticate(bearer(context))
        scope = allowed(principal, write_level(skill), h.scope)
        files = {p: File(bytes(d), mode=m) for p, (d, m) in parts.items()}
        result = await self.backend.run(
            functools.partial(
                self.store.publish,
                scope,
                skill,
                files,
                expected(h),
                commit_id=h.commit_id or None,
                strict=not h.force,
                actor=principal.name,
                message=check_message(h.message),
            )
        )
        return _result(result)

    async def _gather(
        self, skill: str, incoming: AsyncIterator[pb.PublishRequest], principal: Principal
    ) -> dict[str, tuple[bytearray, int | None]]:
        limits = self.store.limits
        parts: dict[str, tuple[bytearray, int | None]] = {}
        total = 0
        last = None
        async for msg in incoming:
            if msg.WhichOneof("part") != "file":
                raise InvalidArgument("Publish: only files may follow the header")
            f = msg.file
            if f.path != last:
                if f.path in parts:
                    raise InvalidArgument(
                        f"Publish: the data of {f.path!r} must come in consecutive messages"
                    )
                normalize_path(f.path)  # a bad path is refused before more is read
                if len(parts) >= limits.max_files:
                    raise TooLarge(
                        f"{skill} has more than {limits.max_files} files (Limits.max_files)"
                    )
                parts[f.path] = (bytearray(), None)
                total += len(f.path)
                last = f.path
            buf = parts[f.path][0]
            self.backend.proofs.uploads.spend(principal, len(f.data))
            buf += f.data
            total += len(f.data)
            if f.mode:
                parts[f.path] = (buf, f.mode)
            if len(buf) > limits.max_file_size:
                raise TooLarge(
                    f"{skill}/{f.path} is over the limit of {limits.max_file_size} bytes per file "
                    "(Limits.max_file_size)"
                )
            if total > limits.max_skill_size:
                raise TooLarge(
                    f"{skill} is over the limit of {limits.max_skill_size} bytes per skill, "
                    "paths included (Limits.max_skill_size)"
                )
        return parts

    @unary
    def Delete(
        self, request: pb.DeleteRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.CommitResult:
        scope = allowed(principal, write_level(check_entry(request.skill)), request.scope)
        return _result(
            self.store.edits.delete(scope, request.skill, options=_options(request, principal))
        )

    @unary
    def Rollback(
        self, request: pb.RollbackRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.CommitResult:
        scope = allowed(principal, write_level(check_entry(request.skill)), request.scope)
        return _result(
            self.store.edits.rollback(
                scope, request.skill, request.version, options=_options(request, principal)
            )
        )

    @unary
    def DropHistory(
        self, request: pb.DropHistoryRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.Empty:
        scope = wire.scope_from(request.scope)
        skill = check_entry(request.skill)
        if principal.may(Level.admin, scope):
            self.engine.drop_history(scope, skill, list(request.versions))
        else:
            principal.require(write_level(skill), scope)
            self.store.prune(scope, skill)  # the server's retention policy, not the caller's
        return pb.Empty()

    @streaming
    async def ListDomains(
        self, request: pb.ListDomainsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.ListDomainsResponse]:
        read = self.engine.stored_domains if request.stored else self.engine.domains
        domains = [d for d in await self.backend.run(read) if principal.may_see_domain(d)]
        for batch in wire.by_size(domains, len, budget(context)):
            yield pb.ListDomainsResponse(domains=batch)

    @streaming
    async def ListScopes(
        self, request: pb.ListScopesRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.ListScopesResponse]:
        domain = check_domain(request.domain)
        principal.require_domain(domain)
        found = await self.backend.run(self.engine.scopes, domain)
        scopes = [str(s) for s in found if principal.may(Level.read, s)]
        for batch in wire.by_size(scopes, len, budget(context)):
            yield pb.ListScopesResponse(scopes=batch)

    @streaming
    async def Usage(
        self, request: pb.UsageRequest, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.UsageResponse]:
        agent = check_id("agent", request.agent_id)
        principal.require_agent_admin(agent)
        # the engine's counters as held, drops' records included (`store.usage.drops`)
        detail = await self.backend.run(self.engine.usage_detail, agent)
        counts = [
            pb.UsageCount(user_id=u, skill=s, count=n.count, last_used=n.last_used)
            for (u, s), n in sorted(detail.items())
        ]
        for batch in wire.by_size(counts, pb.UsageCount.ByteSize, budget(context)):
            yield pb.UsageResponse(counts=batch)

    @unary
    def DropUsage(
        self, request: pb.DropUsageRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.DropUsageResponse:
        agent = check_id("agent", request.agent_id)
        principal.require_agent_admin(agent)
        drop = self.store.usage.drop(
            agent,
            users=list(request.users) if request.some_users else None,
            skills=list(request.skills) if request.some_skills else None,
            reason=request.reason,
            actor=principal.name,
        )
        return pb.DropUsageResponse(drop_json=drop.model_dump_json().encode())

    @streaming
    async def ListBlobs(
        self, request: pb.Empty, context: grpc.ServicerContext, principal: Principal
    ) -> AsyncIterator[pb.ListBlobsResponse]:
        principal.require_global_admin("listing blobs")
        with self.backend.streams.hold(principal):
            shas = iter(await self.backend.run(self.engine.blob_shas))
            while True:
                batch = await self.backend.run(lambda: list(itertools.islice(shas, BLOBS_BATCH)))
                yield pb.ListBlobsResponse(sha256=batch)
                if len(batch) < BLOBS_BATCH:
                    return

    @unary
    def DeleteBlobIfIdle(
        self, request: pb.DeleteBlobRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.DeleteBlobResponse:
        principal.require_global_admin("deleting blobs")
        sha = check_sha(request.sha256)
        return pb.DeleteBlobResponse(deleted=self.engine.delete_blob_if_idle(sha, request.cutoff))

    @unary
    def Gc(
        self, request: pb.GcRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.GcResponse:
        principal.require_global_admin("gc")
        report = self.store.gc(grace=request.grace or None)
        return pb.GcResponse(**report.model_dump())


def _options(request: pb.DeleteRequest | pb.RollbackRequest, principal: Principal) -> WriteOptions:
    return WriteOptions(
        actor=principal.name,
        message=check_message(request.message),
        expected_version=expected(request),
        commit_id=check_commit_id(request.commit_id) if request.commit_id else None,
    )


def _result(result: CommitResult) -> pb.CommitResult:
    return pb.CommitResult(
        revision=wire.rev_to_pb(result.revision),
        commit_id=result.commit_id,
        versions=dict(result.versions),
    )


async def _blob_data(incoming: AsyncIterator[pb.UploadBlobRequest]) -> AsyncIterator[bytes]:
    """An UploadBlob's data after its header."""
    async for msg in incoming:
        if msg.WhichOneof("part") != "data":
            raise InvalidArgument("UploadBlob: only data may follow the header")
        yield msg.data


async def _batch_data(
    first: bytes, incoming: AsyncIterator[pb.UploadBlobsRequest]
) -> AsyncIterator[bytes]:
    """An UploadBlobs' data: the first message's, then the others'."""
    yield first
    async for msg in incoming:
        if msg.blobs:
            raise InvalidArgument("UploadBlobs: only the first message names blobs")
        yield msg.data
