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

import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.experimental

from skillfs.engines import grpc_wire as wire
from skillfs.engines.base import CommitOp, Engine, UrlOptions, host_port
from skillfs.engines.grpc_watch import GrpcWatching
from skillfs.errors import InvalidPath, StoreUnavailable
from skillfs.lru import Lru
from skillfs.model import Access, AuditEntry, Manifest, Revision, Scope, UsageStat
from skillfs.proto import skillfs_pb2 as pb
from skillfs.proto import skillfs_pb2_grpc as pb_grpc

ENV_TOKEN = "SKILLFS_TOKEN"


def default_token() -> str | None:
    """The bearer token a grpc:// store uses unless given one ($SKILLFS_TOKEN)."""
    return os.environ.get(ENV_TOKEN) or None


R = TypeVar("R")

#: A server that failed to answer is tried last for this long (seconds).
DOWN_FOR = 1.0
#: While no server can be connected to, how long calls are tried again (every
#: RECONNECT_POLL s) before giving up: the longest reconnect backoff below, and a connect. A
#: channel backing off after a restart (or sharing a connection, process-wide, that is)
#: fails calls at once until it connects again.
RECONNECT_WAIT = 1.5
RECONNECT_POLL = 0.05

_CHANNEL_OPTIONS = [
    # A name that resolves to several servers (a headless Kubernetes Service) is balanced too.
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
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


class _Server:
    def __init__(self, target: str, credentials: grpc.ChannelCredentials | None) -> None:
        self.target = target
        if credentials is None:
            self.channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        else:
            self.channel = grpc.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)
        self.reader = pb_grpc.SkillReaderStub(self.channel)
        self.admin = pb_grpc.SkillAdminStub(self.channel)
        self.down_until = 0.0


class GrpcEngine(GrpcWatching, Engine):
    """One or more skillfs servers, balanced and failed over by this client."""

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
            raise InvalidPath(
                f"invalid server URL {self.url!r}: use grpc://host:port[,host:port...] "
                "or grpcs://..."
            )
        options = UrlOptions(url, ("ca", "timeout"))
        targets = [t.strip() for t in parts.netloc.split(",") if t.strip()]
        for target in targets:
            host_port(target, None, repr(self.url))
        credentials = None
        if parts.scheme == "grpcs":
            ca_path = tls_ca or options.get("ca")
            roots = Path(ca_path).read_bytes() if ca_path else None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        self.timeout = options.number("timeout", float, timeout)
        self._servers = [_Server(t, credentials) for t in targets]
        self._turn = itertools.count(int.from_bytes(os.urandom(2), "big"))
        token = token or default_token()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        #: sha256 -> (scope, skill, version): a readable manifest holding the blob.
        self._seen: Lru[str, tuple[Scope, str, int]] = Lru(200_000)
        #: sha256 -> (size, receipt) from the server's answers to uploads and touches.
        self._receipts: Lru[str, tuple[int, bytes]] = Lru(200_000)
        #: The server's store's `max_ops` (0: none), once a Ping told it.
        self._limit: int | None = None
        self._init_watching()

    # ------------------------------------------------------------------ calls

    def _order(self) -> list[_Server]:
        """Round-robin from the next server; servers that just failed go last."""
        n = len(self._servers)
        start = next(self._turn) % n
        ring = [self._servers[(start + i) % n] for i in range(n)]
        now = time.monotonic()
        return sorted(ring, key=lambda s: s.down_until > now)

    def _run(self, attempt: Callable[[_Server], R]) -> R:
        """Run `attempt` on one server after another until one answers. While no server
        could even be connected to (nothing was sent, so a write is safe to send again),
        the servers are tried again for up to `RECONNECT_WAIT`: a restarted server is back
        before its channel's reconnect backoff ends."""
        deadline = time.monotonic() + RECONNECT_WAIT
        while True:
            failures, unsent = [], True
            for server in self._order():
                try:
                    return attempt(server)
                except grpc.RpcError as exc:
                    if not wire.is_transport_failure(exc):
                        raise wire.error_from(exc, server.target) from None
                    server.down_until = time.monotonic() + DOWN_FOR
                    failures.append(f"{server.target}: {exc.details()}")
                    unsent = unsent and wire.never_sent(exc)
            if not unsent or time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"no skillfs server answered ({'; '.join(failures)}); "
                    "check that the servers are running and reachable, then retry"
                )
            time.sleep(RECONNECT_POLL)

    def _read(self, method: str, request: Any, timeout: float | None = None) -> Any:
        return self._run(
            lambda s: getattr(s.reader, method)(
                request, metadata=self._metadata, timeout=timeout or self.timeout
            )
        )

    def _admin(self, method: str, request: Any, timeout: float | None = None) -> Any:
        return self._run(
            lambda s: getattr(s.admin, method)(
                request, metadata=self._metadata, timeout=timeout or self.timeout
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
        if not shas:
            return set()
        reply = self._admin(
            "TouchBlobs", pb.TouchBlobsRequest(blobs=[self._proof(s) for s in shas], now=now)
        )
        for p in reply.present:
            if p.receipt:
                self._receipts.put(p.sha256, (p.size, p.receipt))
        present = {p.sha256 for p in reply.present}
        for sha in shas:  # a receipt that proved nothing is stale: forget it
            if sha not in present:
                self._receipts.pop(sha)
        return present

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float) -> None:
        size = sum(len(c) for c in chunks)

        def messages() -> Iterator[pb.UploadBlobRequest]:
            yield pb.UploadBlobRequest(header=pb.UploadBlobHeader(sha256=sha, size=size, now=now))
            for chunk in chunks:
                for off in range(0, len(chunk), wire.PIECE):
                    yield pb.UploadBlobRequest(data=chunk[off : off + wire.PIECE])

        reply = self._run(
            lambda s: s.admin.UploadBlob(messages(), metadata=self._metadata, timeout=self.timeout)
        )
        self._receipts.put(sha, (size, reply.receipt))

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """Each blob's consecutive chunks are one range of one ReadFile call for all."""
        runs: list[tuple[str, int, int]] = []  # (sha, first, last)
        for sha, i in keys:
            if runs and runs[-1][0] == sha and runs[-1][2] + 1 == i:
                runs[-1] = (sha, runs[-1][1], i)
            else:
                runs.append((sha, i, i))
        size = self.chunk_size
        request = pb.ReadFileRequest(
            ranges=[
                pb.BlobRange(
                    sha256=sha,
                    offset=first * size,
                    length=(last - first + 1) * size,
                    source=self._source(sha),
                )
                for sha, first, last in runs
            ]
        )

        def read(server: _Server) -> list[bytearray]:
            got = [bytearray() for _ in runs]
            stream = server.reader.ReadFile(request, metadata=self._metadata, timeout=self.timeout)
            for piece in stream:
                got[piece.range] += piece.data
            return got

        out: list[bytes | None] = []
        for (_, first, last), data in zip(runs, self._run(read), strict=True):
            for k in range(last - first + 1):
                chunk = bytes(data[k * size : (k + 1) * size])
                out.append(chunk if chunk or k == 0 else None)
        return out

    def blob_shas(self) -> Iterator[str]:
        def listing(server: _Server) -> list[str]:
            stream = server.admin.ListBlobs(pb.Empty(), metadata=self._metadata, timeout=None)
            return [sha for batch in stream for sha in batch.sha256]

        return iter(self._run(listing))

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        reply = self._admin("DeleteBlobIfIdle", pb.DeleteBlobRequest(sha256=sha, cutoff=cutoff))
        return bool(reply.deleted)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        reply = self._read(
            "GetManifests", pb.GetManifestsRequest(scope=str(scope), whole_scope=True)
        )
        return {m.skill: m for m in self._manifests(scope, reply.manifests_json)}

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        if not skills:
            return {}
        reply = self._read(
            "GetManifests", pb.GetManifestsRequest(scope=str(scope), skills=list(skills))
        )
        return {m.skill: m for m in self._manifests(scope, reply.manifests_json)}

    def commit(self, domain: str, ops: Sequence[CommitOp]) -> Revision:
        shas = {e.sha256 for op in ops for _, e in op.manifest.all_files()}
        request = pb.CommitRequest(
            domain=domain,
            ops=[
                pb.CommitOp(
                    scope=str(op.scope),
                    manifest_json=wire.manifest_bytes(op.manifest),
                    expect=op.expect,
                )
                for op in ops
            ],
            proofs=[self._proof(s) for s in sorted(shas)],
        )
        reply = self._admin("Commit", request)
        for op in ops:
            self._saw(op.scope, [op.manifest])
        return wire.rev_from_pb(reply.revision)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        reply = self._read("History", pb.HistoryRequest(scope=str(scope), skill=skill))
        return self._manifests(scope, reply.history_json, live=False)

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        self._admin(
            "DropHistory",
            pb.DropHistoryRequest(scope=str(scope), skill=skill, versions=list(versions)),
        )

    # ------------------------------------------------------------------ revisions and changes

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        if not domains:
            return {}
        reply = self._read("Revisions", pb.RevisionsRequest(domains=list(domains)))
        return wire.revs_from_pb(domains, reply.revisions)

    # ------------------------------------------------------------------ listings and usage

    def domains(self) -> list[str]:
        return list(self._admin("ListDomains", pb.ListDomainsRequest()).domains)

    def stored_domains(self) -> list[str]:
        return list(self._admin("ListDomains", pb.ListDomainsRequest(stored=True)).domains)

    def scopes(self, domain: str) -> list[Scope]:
        reply = self._admin("ListScopes", pb.ListScopesRequest(domain=domain))
        return [Scope.parse(s) for s in reply.scopes]

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        times = last_used or {}
        self._read(
            "RecordUsage",
            pb.RecordUsageRequest(
                agent_id=agent,
                counts=[
                    pb.UsageCount(user_id=u, skill=s, count=n, last_used=times.get((u, s), 0.0))
                    for (u, s), n in counts.items()
                ],
            ),
        )

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        reply = self._admin("Usage", pb.UsageRequest(agent_id=agent))
        return {(c.user_id, c.skill): UsageStat(c.count, c.last_used) for c in reply.counts}

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
        return [wire.audit_from_pb(e) for e in self._read("Audit", request).entries]

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
        self._limit = self._read("Ping", pb.PingRequest(), timeout=5.0).max_ops

    @property
    def max_ops(self) -> int | None:  # type: ignore[override]  # (an attribute elsewhere)
        """The limit of the server's store (asked once): a commit over it is refused before
        any upload, and `skillfs import` splits by it, as a direct client of that store."""
        if self._limit is None:
            self.ping()
        return self._limit or None

    def close(self) -> None:
        self._close_watches()
        for server in self._servers:
            server.channel.close()
