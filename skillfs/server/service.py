"""The gRPC servicers: `SkillReader` (what workers call) and `SkillAdmin` (writes, listings,
GC), over one `Store`, with every call authenticated and authorized by token grants.

Who may touch which blob (docs/server.md, "Blobs and hashes"): a file is read by hash only
when the caller names a manifest it may read that holds the hash; a blob is reported present
only to a caller that proves it may reference it (a receipt from its own upload or touch, or a
readable manifest holding it); a commit names only blobs proven that way. So a token learns
nothing about blobs outside its scopes, not even whether they exist. Tokens that may read
every scope ("*:read" and up) skip these proofs: there is nothing they could learn.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
from pydantic import ValidationError

from skillfs.auth import Level, Principal, Tokens
from skillfs.engines import grpc_wire as wire
from skillfs.engines.base import CommitOp, VersionMismatch
from skillfs.errors import (
    InvalidPath,
    InvalidSkill,
    NotFound,
    PermissionDenied,
    SkillfsError,
    TooLarge,
)
from skillfs.lru import Lru
from skillfs.model import File, FileEntry, Manifest, Revision, Scope
from skillfs.names import check_domain, check_id, check_skill_name, normalize_path
from skillfs.proto import skillfs_pb2 as pb
from skillfs.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.runtime import Market, Skills, Snapshot
from skillfs.server.metrics import Metrics
from skillfs.skill_md import SKILL_MD, inspect_skill
from skillfs.store import Store
from skillfs.store_commit import storable
from skillfs.store_limits import check_file_table

log = logging.getLogger("skillfs.server")
T = TypeVar("T")
_SHA = re.compile(r"[0-9a-f]{64}")
#: A Watch stream re-checks for cancellation and shutdown at least this often (seconds).
WATCH_POLL = 1.0
#: A Watch asking to wait at most this long is a catch-up read (the runtime's per-step
#: `changes(..., 0)`), as short as any unary call: it does not count against the limits.
SHORT_WATCH = 0.25


def check_sha(sha: str) -> str:
    if not _SHA.fullmatch(sha):
        raise InvalidPath(f"invalid SHA-256 {sha!r}: give 64 lowercase hex digits")
    return sha


class ManifestIndex:
    """The file tables (SHA-256 -> size) of manifests by (scope, skill, version): a version
    never changes once written, so a bounded LRU is always right. It is what lets a ReadFile
    that names its manifest skip the store entirely once that manifest was seen."""

    def __init__(self, store: Store, size: int = 20_000) -> None:
        self._engine = store.engine
        self._items: Lru[tuple[Scope, str, int], dict[str, int]] = Lru(size)

    def remember(self, scope: Scope, m: Manifest) -> dict[str, int]:
        files = {e.sha256: e.size for e in m.files.values()}
        self._items.put((scope, m.skill, m.version), files)
        return files

    def files(self, scope: Scope, skill: str, version: int) -> dict[str, int] | None:
        hit = self._items.get((scope, skill, version))
        if hit is not None:
            return hit
        live = self._engine.load_skills(scope, [skill]).get(skill)
        found = live if live is not None and live.version == version else None
        if found is None:
            found = next(
                (m for m in self._engine.history(scope, skill) if m.version == version), None
            )
        return None if found is None else self.remember(scope, found)


class Views:
    """One `Skills` per (agent, user, markets) a caller asked for, shared by every call for it,
    so the runtime's followers keep each view current and a snapshot costs one revision read."""

    def __init__(self, store: Store, size: int = 512) -> None:
        self._store = store
        self._size = size
        self._items: OrderedDict[tuple[str, str, tuple[str, ...]], Skills] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def scopes(view: pb.View) -> list[Scope]:
        """The view's store scopes, lowest layer first."""
        if not view.user_id:
            raise InvalidPath("a view needs agent_id and user_id")
        markets = [Scope.market(m) for m in view.markets]
        return [*markets, Scope.shared(view.agent_id), Scope.user(view.agent_id, view.user_id)]

    def snapshot(self, view: pb.View) -> Snapshot:
        key = (view.agent_id, view.user_id, tuple(view.markets))
        with self._lock:
            skills = self._items.get(key)
            if skills is None:
                skills = Skills(
                    self._store, view.agent_id, view.user_id, [Market(m) for m in view.markets]
                )
                self._items[key] = skills
                evicted = [
                    self._items.popitem(last=False)[1] for _ in range(len(self._items) - self._size)
                ]
            else:
                self._items.move_to_end(key)
                evicted = []
        for old in evicted:
            old.close()
        return skills.snapshot()

    def close(self) -> None:
        with self._lock:
            items, self._items = list(self._items.values()), OrderedDict()
        for skills in items:
            skills.close()


class Busy(Exception):
    """This server sheds the call (UNAVAILABLE without skillfs metadata): the client takes it
    as a transport failure and tries the next server, or retries later."""


class WatchSlots:
    """Open Watch streams, limited in all and per token. The server is a thread pool and each
    open watch holds one of its threads, so without a limit watches could take every thread
    and starve the unary calls (the per-step revision check) until they time out."""

    def __init__(self, total: int, per_token: int) -> None:
        self.total = max(1, total)
        self.per_token = max(1, min(per_token, self.total))
        self._open = 0
        self._by_token: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, principal: Principal) -> Iterator[None]:
        key = principal.token_sha256
        with self._lock:
            if self._open >= self.total:
                raise Busy(
                    f"this server is at its limit of open watches ({self.total}): "
                    "retry later or on another server"
                )
            if self._by_token[key] >= self.per_token:
                raise Busy(
                    f"token {principal.name!r} is at its limit of open watches on this server "
                    f"({self.per_token}): retry later or on another server"
                )
            self._open += 1
            self._by_token[key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                self._by_token[key] -= 1
                if not self._by_token[key]:
                    del self._by_token[key]


def watch_limits(
    max_workers: int, total: int | None = None, per_token: int | None = None
) -> tuple[int, int]:
    """The Watch limits (all, per token) for a pool of `max_workers` threads: by default half
    the threads for watches, a quarter for one token's, so unary calls always have threads."""
    total = total if total is not None else max(1, max_workers // 2)
    per_token = per_token if per_token is not None else max(1, max_workers // 4)
    return total, per_token


class Backend:
    """What both servicers share: the store, the tokens, the caches and the stop signal."""

    def __init__(
        self,
        store: Store,
        tokens: Tokens,
        metrics: Metrics,
        limits: tuple[int, int] = watch_limits(128),
    ) -> None:
        self.store = store
        self.engine = store.engine
        self.tokens = tokens
        self.metrics = metrics
        self.index = ManifestIndex(store)
        self.views = Views(store)
        self.watches = WatchSlots(*limits)
        self.stopping = threading.Event()

    @contextlib.contextmanager
    def call(self, method: str, context: grpc.ServicerContext) -> Iterator[Principal]:
        """Authenticate, run the handler, and turn what it raised into a status (the message
        says what to do, trailing metadata names the skillfs error for the client)."""
        start = time.perf_counter()
        status = grpc.StatusCode.OK
        who = "-"
        failure: tuple[grpc.StatusCode, list[tuple[str, str]], str] | None = None
        try:
            principal = self.tokens.authenticate(_bearer(context))
            who = principal.name
            yield principal
        except (SkillfsError, VersionMismatch) as exc:
            status, meta = wire.status_of(exc)
            failure = (status, meta, str(exc))
        except Busy as exc:  # no skillfs metadata: the client tries another server
            status = grpc.StatusCode.UNAVAILABLE
            failure = (status, [], str(exc))
        except ValidationError as exc:  # a field that breaks the models' rules
            status, meta = wire.status_of(InvalidPath(""))
            failure = (status, meta, f"malformed request: {_first_error(exc)}")
        except Exception:
            if not context.is_active():  # the client went away mid-stream
                status = grpc.StatusCode.CANCELLED
                raise
            log.exception("internal error in %s", method, extra={"method": method, "token": who})
            status = grpc.StatusCode.INTERNAL
            failure = (status, [], f"internal error in {method}: see the server log")
        finally:
            seconds = time.perf_counter() - start
            self.metrics.observe(method, status.name, seconds)
            if failure is not None and status != grpc.StatusCode.INTERNAL:
                log.info(
                    "%s failed: %s",
                    method,
                    failure[2],
                    extra={"method": method, "code": status.name, "token": who},
                )
        if failure is not None:
            context.set_trailing_metadata(failure[1])
            context.abort(failure[0], failure[2])

    def now(self, principal: Principal, given: float) -> float:
        """The caller's clock for global admins (tools, tests), the server's for others, so a
        writer cannot age another writer's blobs into GC or pin them forever."""
        return given if given and principal.is_global_admin else time.time()

    def proven_size(self, principal: Principal, proof: pb.BlobProof) -> int | None:
        """The blob's size when the caller proved it may reference the blob, else None.
        Either proof will do: a receipt made under an older receipt key (the tokens config
        changed) is no proof, but the source sent along with it may still be."""
        sha = check_sha(proof.sha256)
        if proof.receipt and self.tokens.check_receipt(principal, sha, proof.size, proof.receipt):
            return int(proof.size)
        if proof.HasField("source") and proof.source.scope:
            scope = wire.scope_from(proof.source.scope)
            if not principal.may(Level.read, scope):
                return None
            files = self.index.files(scope, proof.source.skill, proof.source.version)
            return None if files is None else files.get(sha)
        return None

    def close(self) -> None:
        self.stopping.set()
        self.views.close()


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"


class Malformed:
    """What a request that is not the method's protobuf message decodes to, so the handler
    answers INVALID_ARGUMENT (gRPC itself would answer INTERNAL)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def lenient(decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decoder(data: bytes) -> Any:
        try:
            return decode(data)
        except Exception as exc:  # google.protobuf.message.DecodeError, untyped here
            return Malformed(exc)

    return decoder


def add_servicers(server: grpc.Server, backend: Backend) -> None:
    """Register both servicers with lenient request decoders (see `Malformed`)."""
    captured: list[tuple[str, dict[str, grpc.RpcMethodHandler]]] = []

    class Capture:
        def add_generic_rpc_handlers(self, handlers: object) -> None:
            pass

        def add_registered_method_handlers(
            self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
        ) -> None:
            captured.append((service, handlers))

    pb_grpc.add_SkillReaderServicer_to_server(Reader(backend), Capture())
    pb_grpc.add_SkillAdminServicer_to_server(Admin(backend), Capture())
    for service, handlers in captured:
        fixed = {
            name: h._replace(request_deserializer=lenient(h.request_deserializer))
            for name, h in handlers.items()
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, fixed),))
        server.add_registered_method_handlers(service, fixed)


def _well_formed(request: Any) -> Any:
    """The request, or for a client stream an iterator over its messages; INVALID_ARGUMENT
    for a message that did not decode."""
    if isinstance(request, Malformed):
        raise InvalidPath(f"malformed request: not the method's message ({request.error})")
    if isinstance(request, Iterator):
        return (_well_formed(m) for m in request)
    return request


def _bearer(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


Method = Callable[[Any, Any, grpc.ServicerContext, Principal], T]


def unary(fn: Method[T]) -> Callable[[Any, Any, grpc.ServicerContext], T]:
    """A unary (or client-streaming) handler run under `Backend.call`."""

    @functools.wraps(fn)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> T:
        with self.backend.call(fn.__name__, context) as principal:
            return fn(self, _well_formed(request), context, principal)
        raise AssertionError("unreachable: call() returns or aborts")

    return handler


def streaming(fn: Method[Iterable[T]]) -> Callable[[Any, Any, grpc.ServicerContext], Iterator[T]]:
    """A server-streaming handler run under `Backend.call`."""

    @functools.wraps(fn)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[T]:
        with self.backend.call(fn.__name__, context) as principal:
            yield from fn(self, _well_formed(request), context, principal)

    return handler


def _allowed(principal: Principal, level: Level, scope: str) -> Scope:
    """The scope a request names, once the token is known to have `level` on it."""
    parsed = wire.scope_from(scope)
    principal.require(level, parsed)
    return parsed


def _expected(message: Any) -> int | None:
    """A request's optional `expected_version`; None (no check) when it is not set."""
    return int(message.expected_version) if message.HasField("expected_version") else None


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

    def _view(self, principal: Principal, view: pb.View) -> Snapshot:
        for scope in Views.scopes(view):
            principal.require(Level.read, scope)
        return self.backend.views.snapshot(view)

    @unary
    def Snapshot(
        self, request: pb.SnapshotRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.SnapshotResponse:
        snap = self._view(principal, request.view)
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
            snap = self._view(principal, request.view)
            return pb.ListSkillsResponse(
                skills=[
                    pb.SkillInfo(
                        scope=str(s.scope) if s.scope else "",
                        skill=s.id,
                        version=s.version or 0,
                        description=s.description,
                        usable=True,
                        errors=sum(f.severity == "error" for f in s.findings),
                    )
                    for s in snap.skills
                ]
            )
        scope = _allowed(principal, Level.read, request.scope)
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
        scope = _allowed(principal, Level.read, request.scope)
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
            scope = _allowed(principal, Level.read, r.source.scope)
            src = f"{scope}/{r.source.skill} version {r.source.version}"
            files = self.backend.index.files(scope, r.source.skill, r.source.version)
            if files is None:
                raise NotFound(f"{src} is not kept any more: take a new snapshot")
            size = files.get(sha)
            if size is None:
                raise NotFound(f"{src} has no file with SHA-256 {sha}")
            entry = FileEntry.model_construct(sha256=sha, size=size, mode=0, mtime=0.0)
            return self.store.read_entry(entry, r.offset, end)
        if not principal.reads_everything:
            raise PermissionDenied(
                f"token {principal.name!r} must name the manifest a hash comes from "
                "(source: scope, skill, version); only tokens that read every scope ('*:read') "
                "may read by hash alone"
            )
        return self._read_unsized(sha, r.offset, end)

    def _read_unsized(self, sha: str, start: int, end: int | None) -> bytes:
        """A range of a blob whose size the caller did not say (global readers only)."""
        size = self.engine.chunk_size
        first = start // size
        last = first + 8 if end is None else max(start, end - 1) // size
        chunks = self.engine.get_chunks([(sha, i) for i in range(first, last + 1)])
        if chunks[0] is None and (first == 0 or self.engine.get_chunks([(sha, 0)])[0] is None):
            raise NotFound(f"blob {sha} is not in the store: republish the skill that names it")
        parts: list[bytes] = []
        for c in chunks:
            if c is None:
                break
            parts.append(c)
        if end is None and len(parts) == len(chunks):  # longer than 8 chunks: read on
            rest = self._read_unsized(sha, (last + 1) * size, None)
            parts.append(rest)
        data = b"".join(parts)
        offset = start - first * size
        return data[offset : None if end is None else end - first * size]

    @unary
    def LoadSkillThroughPath(
        self, request: pb.LoadRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.LoadResponse:
        snap = self._view(principal, request.view)
        return pb.LoadResponse(text=snap.load(request.skill_id, request.path or SKILL_MD))

    @unary
    def Prompt(
        self, request: pb.PromptRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.PromptResponse:
        snap = self._view(principal, request.view)
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
            since = self.engine.revisions([domain])[domain] or wire.NO_REVISION
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
            principal = self.backend.tokens.authenticate(_bearer(context))
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
        scope = _allowed(principal, Level.read, request.scope)
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


class Admin(pb_grpc.SkillAdminServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.store = backend.store
        self.engine = backend.engine

    @unary
    def TouchBlobs(
        self, request: pb.TouchBlobsRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.TouchBlobsResponse:
        now = self.backend.now(principal, request.now)
        if principal.reads_everything:
            present = self.engine.touch_blobs([check_sha(b.sha256) for b in request.blobs], now)
            return pb.TouchBlobsResponse(present=[pb.BlobProof(sha256=s) for s in sorted(present)])
        proven: dict[str, int] = {}
        for b in request.blobs:
            size = self.backend.proven_size(principal, b)
            if size is not None:
                proven[b.sha256] = size
        present = self.engine.touch_blobs(list(proven), now) if proven else set()
        receipt = self.backend.tokens.receipt
        return pb.TouchBlobsResponse(
            present=[
                pb.BlobProof(sha256=s, size=proven[s], receipt=receipt(principal, s, proven[s]))
                for s in sorted(present)
            ]
        )

    @unary
    def UploadBlob(
        self,
        request: Iterator[pb.UploadBlobRequest],
        context: grpc.ServicerContext,
        principal: Principal,
    ) -> pb.UploadBlobResponse:
        if not any(g.level >= Level.write for g in principal.grants):
            raise PermissionDenied(
                f"token {principal.name!r} may write nowhere, so it may not upload"
            )
        header = next(request, None)
        if header is None or header.WhichOneof("part") != "header":
            raise InvalidPath("UploadBlob: send the header (sha256, size) first, then the data")
        sha, size = check_sha(header.header.sha256), header.header.size
        limit = self.store.limits.max_file_size
        if size < 0 or size > limit:
            raise TooLarge(
                f"blob of {size} bytes: files may hold 0 to {limit} bytes (Limits.max_file_size)"
            )
        buf = bytearray()
        for msg in request:
            if msg.WhichOneof("part") != "data":
                raise InvalidPath("UploadBlob: only data may follow the header")
            buf += msg.data
            if len(buf) > size:
                raise InvalidPath(f"UploadBlob: more than the {size} bytes the header announced")
        data = bytes(buf)
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            raise InvalidPath(
                f"UploadBlob: the {len(data)} bytes sent do not hash to {sha} of {size} bytes; "
                "nothing was stored"
            )
        now = self.backend.now(principal, header.header.now)
        if sha not in self.engine.touch_blobs([sha], now):
            step = self.engine.chunk_size
            chunks = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
            self.engine.put_blob(sha, chunks, now)
        return pb.UploadBlobResponse(receipt=self.backend.tokens.receipt(principal, sha, size))

    @unary
    def Commit(
        self, request: pb.CommitRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.CommitResponse:
        domain = check_domain(request.domain)
        if not request.ops:
            raise InvalidPath("empty commit: give at least one op")
        max_ops = self.engine.max_ops
        if max_ops is not None and len(request.ops) > max_ops:
            raise TooLarge(
                f"a commit of {len(request.ops)} skills is over this store's limit of "
                f"{max_ops} per atomic commit: split it into several commits"
            )
        proofs = {p.sha256: p for p in request.proofs}
        free = principal.reads_everything
        checked: list[tuple[Scope, Manifest, int]] = []
        seen: set[tuple[Scope, str]] = set()
        for op in request.ops:
            scope = _allowed(principal, Level.write, op.scope)
            if scope.domain != domain:
                raise InvalidPath(
                    f"one commit spans one agent or one market: {scope} is not in {domain}"
                )
            m = self._checked(scope, wire.manifest_request(op.manifest_json), op.expect)
            if (scope, m.skill) in seen:
                raise InvalidPath(f"{scope}/{m.skill} appears twice in one commit")
            seen.add((scope, m.skill))
            for path, e in m.files.items():
                proof = proofs.get(e.sha256)
                size = None if proof is None else self.backend.proven_size(principal, proof)
                if not free and size != e.size:
                    raise PermissionDenied(
                        f"{m.skill}/{path} names blob {e.sha256}, which this token neither "
                        "uploaded nor read from a manifest it may read: upload the file's bytes "
                        "(UploadBlob) and commit with the receipt"
                    )
            checked.append((scope, m, op.expect))
        self._touch(checked, principal)
        ops = [
            CommitOp(
                scope=scope,
                manifest=storable(scope, self._derived(m, principal)),
                expect=expect,
            )
            for scope, m, expect in checked
        ]
        revision = self.engine.commit(domain, ops)
        for op_ in ops:
            self.backend.index.remember(op_.scope, op_.manifest)
        return pb.CommitResponse(revision=wire.rev_to_pb(revision))

    def _touch(self, checked: Sequence[tuple[Scope, Manifest, int]], principal: Principal) -> None:
        """Refresh the last-use time of every blob the commit names and refuse the commit if
        one is gone: a client may commit without touching first (or long after), and GC may
        have swept a blob nothing referenced. Once touched, GC's sweep leaves it alone for its
        grace period, longer than the commit takes (docs/design.md §2)."""
        shas = sorted({e.sha256 for _, m, _ in checked for e in m.files.values()})
        if not shas:
            return
        given = max(m.committed_at for _, m, _ in checked)
        missing = set(shas) - self.engine.touch_blobs(shas, self.backend.now(principal, given))
        if missing:
            sha = min(missing)
            where = next(
                f"{scope}/{m.skill}/{path}"
                for scope, m, _ in checked
                for path, e in m.files.items()
                if e.sha256 == sha
            )
            raise NotFound(
                f"{where} names blob {sha}, which the store does not hold (never uploaded, or "
                "garbage-collected since): upload it again, then commit"
            )

    def _checked(self, scope: Scope, m: Manifest, expect: int) -> Manifest:
        """A manifest a client built, held to the rules `Store` applies before a commit."""
        check_skill_name(m.skill)
        where = f"{scope}/{m.skill}"
        if expect < 0 or m.version != expect + 1:
            raise InvalidPath(f"{where}: version {m.version} must be the expected {expect} + 1")
        if not m.commit_id or len(m.commit_id) > 128:
            raise InvalidPath(f"{where}: a commit id is 1-128 characters")
        if m.deleted and m.files:
            raise InvalidPath(f"{where}: a deletion has no files")
        for path, e in m.files.items():
            if normalize_path(path) != path:
                raise InvalidPath(f"{where}: file path {path!r} is not normalized")
            check_sha(e.sha256)
        check_file_table(self.store.limits, m.skill, m.files)
        return m

    def _derived(self, m: Manifest, principal: Principal) -> Manifest:
        """Frontmatter and findings as the server reads them from SKILL.md (a client cannot
        make a skill look valid), and the server's clock unless a global admin commits."""
        update: dict[str, Any] = {}
        if not principal.is_global_admin:
            update["committed_at"] = time.time()
        if not m.deleted:
            entry = m.files.get(SKILL_MD)
            files: dict[str, bytes] = dict.fromkeys(m.files, b"")
            if entry is not None:
                files[SKILL_MD] = self.store.read_entry(entry)
            frontmatter, findings = inspect_skill(m.skill, files)
            update.update(frontmatter=frontmatter, findings=list(findings))
        return m.model_copy(update=update) if update else m

    @unary
    def Publish(
        self,
        request: Iterator[pb.PublishRequest],
        context: grpc.ServicerContext,
        principal: Principal,
    ) -> pb.CommitResult:
        first = next(request, None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidPath("Publish: send the header (scope, skill) first, then the files")
        h = first.header
        scope = _allowed(principal, Level.write, h.scope)
        skill = check_skill_name(h.skill)
        limits = self.store.limits
        parts: dict[str, bytearray] = {}
        modes: dict[str, int] = {}
        total = 0
        last = None
        for msg in request:
            if msg.WhichOneof("part") != "file":
                raise InvalidPath("Publish: only files may follow the header")
            f = msg.file
            if f.path != last and f.path in parts:
                raise InvalidPath(
                    f"Publish: the data of {f.path!r} must come in consecutive messages"
                )
            last = f.path
            buf = parts.setdefault(f.path, bytearray())
            buf += f.data
            total += len(f.data)
            if len(buf) > limits.max_file_size:
                raise TooLarge(
                    f"{skill}/{f.path} is over the limit of {limits.max_file_size} bytes per file "
                    "(Limits.max_file_size)"
                )
            if total > limits.max_skill_size:
                raise TooLarge(
                    f"{skill} is over the limit of {limits.max_skill_size} bytes per skill "
                    "(Limits.max_skill_size)"
                )
            if f.mode:
                modes[f.path] = f.mode
        files = {p: File(bytes(d), mode=modes.get(p)) for p, d in parts.items()}
        if not h.force:
            _, findings = inspect_skill(
                skill, {normalize_path(p): f.data for p, f in files.items()}
            )
            errors = [f for f in findings if f.severity == "error"]
            if errors:
                raise InvalidSkill(
                    f"{skill} breaks the Agent Skills spec: "
                    + "; ".join(e.message for e in errors)
                    + " (fix it, or publish with force to store it with these findings)",
                    list(errors),
                )
        expected = _expected(h)
        result = self.store.publish(scope, skill, files, expected, commit_id=h.commit_id or None)
        return _result(result)

    @unary
    def Delete(
        self, request: pb.DeleteRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.CommitResult:
        scope = _allowed(principal, Level.write, request.scope)
        commit_id = request.commit_id or None
        return _result(
            self.store.delete(scope, request.skill, _expected(request), commit_id=commit_id)
        )

    @unary
    def Rollback(
        self, request: pb.RollbackRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.CommitResult:
        scope = _allowed(principal, Level.write, request.scope)
        return _result(
            self.store.rollback(scope, request.skill, request.version, _expected(request))
        )

    @unary
    def DropHistory(
        self, request: pb.DropHistoryRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.Empty:
        scope = wire.scope_from(request.scope)
        skill = check_skill_name(request.skill)
        if principal.may(Level.admin, scope):
            self.engine.drop_history(scope, skill, list(request.versions))
        else:
            principal.require(Level.write, scope)
            self.store.prune(scope, skill)  # the server's retention policy, not the caller's
        return pb.Empty()

    @unary
    def ListDomains(
        self, request: pb.Empty, context: grpc.ServicerContext, principal: Principal
    ) -> pb.ListDomainsResponse:
        return pb.ListDomainsResponse(
            domains=[d for d in self.engine.domains() if principal.may_see_domain(d)]
        )

    @unary
    def ListScopes(
        self, request: pb.ListScopesRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.ListScopesResponse:
        domain = check_domain(request.domain)
        principal.require_domain(domain)
        return pb.ListScopesResponse(
            scopes=[str(s) for s in self.engine.scopes(domain) if principal.may(Level.read, s)]
        )

    @unary
    def Usage(
        self, request: pb.UsageRequest, context: grpc.ServicerContext, principal: Principal
    ) -> pb.UsageResponse:
        agent = check_id("agent", request.agent_id)
        principal.require_agent_admin(agent)
        return pb.UsageResponse(
            counts=[
                pb.UsageCount(user_id=u, skill=s, count=n)
                for (u, s), n in sorted(self.store.usage(agent).items())
            ]
        )

    @streaming
    def ListBlobs(
        self, request: pb.Empty, context: grpc.ServicerContext, principal: Principal
    ) -> Iterator[pb.ListBlobsResponse]:
        principal.require_global_admin("listing blobs")
        batch: list[str] = []
        for sha in self.engine.blob_shas():
            batch.append(sha)
            if len(batch) == 10_000:
                yield pb.ListBlobsResponse(sha256=batch)
                batch = []
        yield pb.ListBlobsResponse(sha256=batch)

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


def _result(result: Any) -> pb.CommitResult:
    return pb.CommitResult(
        revision=wire.rev_to_pb(result.revision),
        commit_id=result.commit_id,
        versions=dict(result.versions),
    )
