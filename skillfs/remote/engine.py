"""`grpc://host:port[,host:port…]` and `grpcs://…`: the engine primitives over one or more
skillfs servers, for workers that must not hold store credentials (docs/design.md §2, §6).

Calls go round-robin over the servers named; a server that cannot be reached is skipped for a
second and the call goes to the next one, so a dead server costs one failed connect, not an
error. `Store` runs on this side as on any engine (hashing, validation, versions, retries);
the server checks the result again and the token's grants.

Blobs need proofs (docs/server.md): the engine remembers, for each hash, the manifest it was
last seen in (sent along with reads and touches) and the receipt the server gave for an upload
or touch (sent along with commits). Both are small, bounded LRUs.

`changes()` may end with a change that names no scope or skill: it stands for changes in
scopes the token may not read, and only moves the follower's revision (C3). `changes_many()`
asks about every domain in one WatchMany call, so a worker following many agents holds one
watch slot on the server, not one Watch stream per agent.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.experimental

from skillfs.engines.base import Charge, Check, CommitOp, Engine, UrlOptions, host_port
from skillfs.errors import InvalidArgument, InvalidPath
from skillfs.model import (
    Access,
    AuditEntry,
    GcReport,
    Manifest,
    Revision,
    Scope,
    UsageDrop,
    UsageStat,
    VersionSummary,
)
from skillfs.remote import uploads, wire
from skillfs.remote.pool import Attempt, Pool, Server
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.watch import GrpcWatching
from skillfs.util.lru import Lru

ENV_TOKEN = "SKILLFS_TOKEN"


def default_token() -> str | None:
    """The bearer token a grpc:// store uses unless given one ($SKILLFS_TOKEN)."""
    return os.environ.get(ENV_TOKEN) or None


R = TypeVar("R")

#: The largest message sent or received by default (a server of protocol 1 may answer up to
#: its own limit, 16 MiB by default; one of protocol 2 never sends more than ~512 KiB).
MAX_MESSAGE = 16 * 1024 * 1024

_CHANNEL_OPTIONS = [
    # A name that resolves to several servers (a headless Kubernetes Service) is balanced too.
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    # A Watch stream is read on the thread that waits for it, in grpc's core: no hop through
    # the channel's spin thread per event, and no wake-up every 100 ms per waiting stream
    # (a process holding many followers' streams idles).
    (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
]


#: How long a blob GC run by the server (`gc`) may take: it walks the whole store.
GC_TIMEOUT = 3600.0


class GrpcEngine(GrpcWatching, Engine):
    """One or more skillfs servers, balanced and failed over by this client."""

    table_chunks = False  # the server's store keeps them; the wire carries whole tables

    def __init__(
        self,
        url: str,
        token: str | None = None,
        tls_ca: str | Path | None = None,
        timeout: float = 60.0,
    ) -> None:
        super().__init__(url)
        parts = urlsplit(url)
        if parts.scheme not in ("grpc", "grpcs") or not parts.netloc:
            raise InvalidArgument(
                f"invalid server URL {self.url!r}: use grpc://host:port[,host:port...] "
                "or grpcs://..."
            )
        options = UrlOptions(url, ("ca", "timeout", "max_message"))
        targets = [t.strip() for t in parts.netloc.split(",") if t.strip()]
        for target in targets:
            host_port(target, None, repr(self.url))
        credentials = None
        if parts.scheme == "grpcs":
            ca_path = tls_ca or options.get("ca")
            roots = Path(ca_path).read_bytes() if ca_path else None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        self.timeout = options.number("timeout", float, timeout)
        max_message = options.number("max_message", int, MAX_MESSAGE)
        channel = [
            *_CHANNEL_OPTIONS,
            ("grpc.max_receive_message_length", max_message),
            ("grpc.max_send_message_length", max_message),
        ]
        self._pool = Pool(
            [
                Server(
                    t,
                    grpc.insecure_channel(t, options=channel)
                    if credentials is None
                    else grpc.secure_channel(t, credentials, options=channel),
                )
                for t in targets
            ]
        )
        token = token or default_token()
        auth = (("authorization", f"Bearer {token}"),) if token else ()
        self._metadata = (*auth, (wire.PROTOCOL_KEY, str(wire.PROTOCOL)))
        #: sha256 -> (scope, skill, version): a readable manifest holding the blob.
        self._seen: Lru[str, tuple[Scope, str, int]] = Lru(200_000)
        #: sha256 -> (size, receipt) from the server's answers to uploads and touches.
        self._receipts: Lru[str, tuple[int, bytes]] = Lru(200_000)
        #: The server's store's `max_ops` (0: none) and the server's protocol, once a Ping
        #: told them.
        self._limit: int | None = None
        self._protocol: int | None = None
        #: Servers that answered UploadBlobs UNIMPLEMENTED: they get UploadBlob per blob.
        self._single_uploads: set[str] = set()
        self._init_watching()

    # ------------------------------------------------------------------ calls

    def _run(self, attempt: Attempt[R], limit: float | None = None) -> R:
        """`attempt(server, timeout)` on the pool's servers until one answers, within `limit`
        seconds (default: the per-call `timeout`) or the budget the call runs under."""
        return self._pool.run(attempt, self.timeout if limit is None else limit)

    def _read(self, method: str, request: Any, limit: float | None = None) -> Any:
        return self._run(
            lambda s, t: getattr(s.reader, method)(request, metadata=self._metadata, timeout=t),
            limit,
        )

    def _admin(self, method: str, request: Any) -> Any:
        return self._run(
            lambda s, t: getattr(s.admin, method)(request, metadata=self._metadata, timeout=t)
        )

    def _all(self, service: str, method: str, request: Any) -> list[Any]:
        """Every message of a server-streaming call, read to its end on one server (a
        collection is one read the server made once: all of it or none, C1 and C4)."""
        return self._run(
            lambda s, t: list(
                getattr(getattr(s, service), method)(request, metadata=self._metadata, timeout=t)
            )
        )

    # ------------------------------------------------------------------ what the engine saw

    def _saw(self, scope: Scope, manifests: Sequence[Manifest], live: bool = True) -> None:
        """Remember where each hash can be proven from, preferring the source that will stay
        longest: of one skill its highest version; of another skill, the latest live manifest
        seen, never a history one (history is what retention drops first, and a version no
        longer kept proves nothing)."""
        for m in manifests:
            for _, e in m.all_files():
                old = self._seen.get(e.sha256)
                if old is not None:
                    if old[0] == scope and old[1] == m.skill:
                        if old[2] >= m.version:
                            continue
                    elif not live:
                        continue
                self._seen.put(e.sha256, (scope, m.skill, m.version))

    def _source(self, sha: str) -> pb.Source | None:
        seen = self._seen.get(sha)
        if seen is None:
            return None
        return pb.Source(scope=str(seen[0]), skill=seen[1], version=seen[2])

    def _proof(self, sha: str) -> pb.BlobProof:
        """Every proof known: the server takes either, so a receipt the server no longer
        honours (its receipt key changed) does not hide a readable source."""
        proof = pb.BlobProof(sha256=sha, source=self._source(sha))
        receipt = self._receipts.get(sha)
        if receipt is not None:
            proof.size, proof.receipt = receipt
        return proof

    def _manifests(self, scope: Scope, blobs: Sequence[bytes], live: bool = True) -> list[Manifest]:
        found = [wire.manifest_from(b) for b in blobs]
        self._saw(scope, found, live)
        return found

    # ------------------------------------------------------------------ blobs

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        present: set[str] = set()
        for some in wire.chunked(list(shas)) if shas else ():
            reply = self._admin(
                "TouchBlobs", pb.TouchBlobsRequest(blobs=[self._proof(s) for s in some], now=now)
            )
            for p in reply.present:
                if p.receipt:
                    self._receipts.put(p.sha256, (p.size, p.receipt))
            present.update(p.sha256 for p in reply.present)
        for sha in shas:  # a receipt that proved nothing is stale: forget it
            if sha not in present:
                self._receipts.pop(sha)
        return present

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float, domain: str = "") -> None:
        messages = functools.partial(uploads.blob_messages, sha, chunks, now, domain)
        reply = self._run(
            lambda s, t: s.admin.UploadBlob(messages(), metadata=self._metadata, timeout=t)
        )
        self._receipts.put(sha, (sum(len(c) for c in chunks), reply.receipt))

    def put_blobs(self, blobs: Mapping[str, Sequence[bytes]], now: float, domain: str = "") -> None:
        """Small blobs in UploadBlobs batches, big ones alone (`remote.uploads`); one by one
        to a server without UploadBlobs (before 0.2), which is remembered."""
        alone, batches = uploads.split(blobs)
        for sha, chunks in alone.items():
            self.put_blob(sha, chunks, now, domain)
        for batch in batches:
            messages = uploads.batch_messages(batch, now, domain)
            receipts = self._run(functools.partial(self._upload_batch, messages))
            for i, (sha, data) in enumerate(batch):
                if receipts is None:
                    self.put_blob(sha, [data], now, domain)
                else:
                    self._receipts.put(sha, (len(data), receipts[i]))

    def _upload_batch(
        self, messages: Sequence[pb.UploadBlobsRequest], server: Server, timeout: float
    ) -> list[bytes] | None:
        """The receipts of one UploadBlobs call; None from a server without it."""
        if server.target in self._single_uploads:
            return None
        try:
            reply = server.admin.UploadBlobs(
                iter(messages), metadata=self._metadata, timeout=timeout
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            self._single_uploads.add(server.target)
            return None
        return list(reply.receipts)

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """Each blob's consecutive chunks are one range of one ReadFile call for all."""
        runs: list[tuple[str, int, int]] = []  # (sha, first, last)
        for sha, i in keys:
            if runs and runs[-1][0] == sha and runs[-1][2] + 1 == i:
                runs[-1] = (sha, runs[-1][1], i)
            else:
                runs.append((sha, i, i))
        size = self.chunk_size

        def read(
            some: Sequence[tuple[str, int, int]], server: Server, timeout: float
        ) -> list[bytearray]:
            request = pb.ReadFileRequest(
                ranges=[
                    pb.BlobRange(
                        sha256=sha,
                        offset=first * size,
                        length=(last - first + 1) * size,
                        source=self._source(sha),
                    )
                    for sha, first, last in some
                ]
            )
            got = [bytearray() for _ in some]
            stream = server.reader.ReadFile(request, metadata=self._metadata, timeout=timeout)
            for piece in stream:
                got[piece.range] += piece.data
            return got

        read_all: list[bytearray] = []
        for some in wire.chunked(runs):
            read_all += self._run(functools.partial(read, some))
        out: list[bytes | None] = []
        for (_, first, last), data in zip(runs, read_all, strict=True):
            for k in range(last - first + 1):
                chunk = bytes(data[k * size : (k + 1) * size])
                out.append(chunk if chunk or k == 0 else None)
        return out

    def blob_shas(self) -> Iterator[str]:
        def listing(server: Server, timeout: float) -> list[str]:
            stream = server.admin.ListBlobs(pb.Empty(), metadata=self._metadata, timeout=None)
            return [sha for batch in stream for sha in batch.sha256]

        return iter(self._run(listing))

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        reply = self._admin("DeleteBlobIfIdle", pb.DeleteBlobRequest(sha256=sha, cutoff=cutoff))
        return bool(reply.deleted)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        """The scope as one read of the server's (streamed in bounded messages)."""
        request = pb.GetManifestsRequest(scope=str(scope), whole_scope=True)
        return {m.skill: m for m in self._manifests(scope, self._manifest_stream(request))}

    def entry_names(self, scope: Scope) -> list[str] | None:
        """None: the server runs the name rule on every Commit, over its own read of the
        scope's names, so a client reads no whole scope to create a skill."""
        return None

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        """By name, `remote.wire.NAMES` at a time: more than that are several reads (each
        manifest is as of its read; a commit's compare-and-set, not this read, decides)."""
        out: dict[str, Manifest] = {}
        for names in wire.chunked(list(skills)) if skills else ():
            request = pb.GetManifestsRequest(scope=str(scope), skills=list(names))
            found = self._manifests(scope, self._manifest_stream(request))
            out.update((m.skill, m) for m in found)
        return out

    def _manifest_stream(self, request: pb.GetManifestsRequest) -> list[bytes]:
        replies = self._all("reader", "GetManifests", request)
        return wire.joined((r.manifests_json, r.continued) for r in replies)

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        """One Commit call: in bounded messages to a server of protocol 2 (an op's manifest
        in pieces where it passes a message), in one message to an older one. The checks and
        the charges are the server's to make: it runs the commit's rules on its own reads and
        charges the quotas of its store, to the token this engine holds."""
        shas = {e.sha256 for op in ops for _, e in op.manifest.all_files()}
        proofs = [self._proof(s) for s in sorted(shas)]
        budget = wire.BUDGET if self.protocol >= 2 else wire.UNBOUNDED
        messages = _commit_messages(domain, ops, proofs, budget)
        reply = self._run(
            lambda s, t: s.admin.Commit(iter(messages), metadata=self._metadata, timeout=t)
        )
        for op in ops:
            self._saw(op.scope, [op.manifest])
        return wire.rev_from_pb(reply.revision)

    def quota_used(self, domain: str) -> None:
        """The server counts its store's quotas (docs/security.md, "Quotas")."""
        return None

    def charge_quota(self, domain: str, charge: Charge) -> None:
        """Nothing here: the server charges what this engine sends it (its uploads, the
        usage counters it records) to the token this engine holds."""

    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        raise InvalidPath(
            f"{self.url}: quota counters are kept by the server's store; re-count them with "
            "skillfs gc on the store's own URL"
        )

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        replies = self._all("reader", "History", pb.HistoryRequest(scope=str(scope), skill=skill))
        blobs = wire.joined((r.history_json, r.continued) for r in replies)
        return self._manifests(scope, blobs, live=False)

    def history_summaries(self, scope: Scope, skill: str) -> list[VersionSummary]:
        request = pb.HistoryRequest(scope=str(scope), skill=skill, summaries=True)
        replies = self._all("reader", "History", request)
        if any(r.history_json for r in replies):  # a server before summaries: whole manifests
            blobs = wire.joined((r.history_json, r.continued) for r in replies)
            return [m.summary() for m in self._manifests(scope, blobs, live=False)]
        return [wire.summary_from(b) for r in replies for b in r.summaries_json]

    def history_version(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        request = pb.HistoryRequest(scope=str(scope), skill=skill, version=version)
        replies = self._all("reader", "History", request)
        blobs = wire.joined((r.history_json, r.continued) for r in replies)
        found = self._manifests(scope, blobs, live=False)  # an older server sends them all
        return next((m for m in found if m.version == version), None)

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        self._admin(
            "DropHistory",
            pb.DropHistoryRequest(scope=str(scope), skill=skill, versions=list(versions)),
        )

    # ------------------------------------------------------------------ revisions and changes

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        out: dict[str, Revision | None] = {}
        for some in wire.chunked(list(domains)) if domains else ():
            reply = self._read("Revisions", pb.RevisionsRequest(domains=list(some)))
            out.update(wire.revs_from_pb(some, reply.revisions))
        return out

    # ------------------------------------------------------------------ listings and usage

    def domains(self) -> list[str]:
        replies = self._all("admin", "ListDomains", pb.ListDomainsRequest())
        return [d for r in replies for d in r.domains]

    def stored_domains(self) -> list[str]:
        replies = self._all("admin", "ListDomains", pb.ListDomainsRequest(stored=True))
        return [d for r in replies for d in r.domains]

    def scopes(self, domain: str) -> list[Scope]:
        replies = self._all("admin", "ListScopes", pb.ListScopesRequest(domain=domain))
        return [Scope.parse(s) for r in replies for s in r.scopes]

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> set[tuple[str, str]]:
        times = last_used or {}
        rows = [
            pb.UsageCount(user_id=u, skill=s, count=n, last_used=times.get((u, s), 0.0))
            for (u, s), n in counts.items()
        ]
        for some in wire.chunked(rows):
            self._read("RecordUsage", pb.RecordUsageRequest(agent_id=agent, counts=some))
        return set()  # the server charges the keys it creates to this engine's token

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        replies = self._all("admin", "Usage", pb.UsageRequest(agent_id=agent))
        return {
            (c.user_id, c.skill): UsageStat(c.count, c.last_used) for r in replies for c in r.counts
        }

    def drop_usage(self, agent: str, drop: UsageDrop) -> UsageDrop:
        """The server drops what `drop` names from its own read, recording its token as the
        actor."""
        request = pb.DropUsageRequest(
            agent_id=agent,
            users=drop.users or (),
            some_users=drop.users is not None,
            skills=drop.skills or (),
            some_skills=drop.skills is not None,
            reason=drop.reason,
        )
        reply = self._admin("DropUsage", request)
        return UsageDrop.model_validate_json(reply.drop_json)

    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        raise InvalidPath(
            f"{self.url}: usage counters are dropped by the server, which records who and "
            "why: use store.usage.drop (skillfs usage drop)"
        )

    def audit(
        self,
        target: str,
        *,
        since: float | None,
        until: float | None,
        actor: str | None,
        skill: str | None,
        limit: int,
    ) -> list[AuditEntry] | None:
        request = pb.AuditRequest(
            target=target, since=since, until=until, actor=actor, skill=skill, limit=limit
        )
        replies = self._all("reader", "Audit", request)
        return [wire.audit_from_pb(e) for r in replies for e in r.entries]

    def gc(self, grace: float) -> GcReport:
        """Run by the server: only its store sees the chunks of the file tables it stores
        (the wire carries whole tables), so a mark made here would miss them. The wire's
        grace 0 names the server's default: a grace of 0 is sent as a microsecond."""
        request = pb.GcRequest(grace=max(grace, 1e-6))
        reply = self._run(
            lambda s, t: s.admin.Gc(request, metadata=self._metadata, timeout=t), GC_TIMEOUT
        )
        return GcReport(
            blobs_seen=reply.blobs_seen,
            blobs_referenced=reply.blobs_referenced,
            blobs_deleted=reply.blobs_deleted,
            history_dropped=reply.history_dropped,
        )

    # ------------------------------------------------------------------ access and life cycle

    def access(self, scope: Scope) -> Access:
        reply = self._read("Access", pb.AccessRequest(scope=str(scope)))
        return Access(
            scope=scope,
            read=reply.read,
            propose=reply.propose or reply.write,
            write=reply.write,
            admin=reply.admin,
            token=reply.token,
            resource=reply.resource,
        )

    # Leases elect one runner among servers that open the store itself (docs/governance.md,
    # "Curation"); a client of a server has no use for them and the protocol has none.

    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        raise self._no_leases()

    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        raise self._no_leases()

    def release_lease(self, name: str, holder: str) -> bool:
        raise self._no_leases()

    def _no_leases(self) -> InvalidPath:
        return InvalidPath(
            f"leases are not supported over grpc:// ({self.url}): run `skillfs serve "
            "--curate-every` on servers that open the store itself (redis://, etcd://, "
            "sqlite://)"
        )

    def ping(self) -> None:
        reply = self._read("Ping", pb.PingRequest(), limit=5.0)
        self._limit, self._protocol = reply.max_ops, reply.protocol or 1

    @property
    def protocol(self) -> int:
        """The servers' protocol (asked once): 2 takes a Commit in several messages."""
        if self._protocol is None:
            self.ping()
        return self._protocol or 1

    @property
    def max_ops(self) -> int | None:  # type: ignore[override]  # (an attribute elsewhere)
        """The limit of the server's store (asked once): a commit over it is refused before
        any upload, and `skillfs import` splits by it, as a direct client of that store."""
        if self._limit is None:
            self.ping()
        return self._limit or None

    def close(self) -> None:
        self._close_watches()
        self._pool.close()


def _commit_messages(
    domain: str, ops: Sequence[CommitOp], proofs: Sequence[pb.BlobProof], budget: int
) -> list[pb.CommitRequest]:
    """A commit's Commit stream: each message at most `budget` bytes of manifests (an op's
    manifest in pieces where it passes one), the proofs after the ops, the domain first."""
    blobs = [wire.manifest_bytes(op.manifest) for op in ops]
    messages: list[pb.CommitRequest] = []
    at = 0  # the op the next piece belongs to
    for batch, continued in wire.packed(blobs, budget):
        message = pb.CommitRequest()
        last = len(batch) - 1
        for i, piece in enumerate(batch):
            op = ops[at]
            cont = continued and i == last
            message.ops.append(
                pb.CommitOp(
                    scope=str(op.scope), manifest_json=piece, expect=op.expect, continued=cont
                )
            )
            if not cont:
                at += 1
        messages.append(message)
    for some in wire.by_size(proofs, pb.BlobProof.ByteSize, budget):
        if messages[-1].proofs or (messages[-1].ops and budget != wire.UNBOUNDED):
            messages.append(pb.CommitRequest())
        messages[-1].proofs.extend(some)
    messages[0].domain = domain
    return messages
