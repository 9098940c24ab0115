"""`etcd://host:port[,host:port…]`: etcd v3, the strongly consistent production engine.

The `etcd3` module (python3-etcd3) gives us the generated gRPC stubs; this engine drives them
directly because the module's client neither retries nor rotates endpoints well, hides the
response header (we need its revision and cluster id) and caps responses at 4 MiB. So the
engine owns, per call: one gRPC channel per endpoint, a deadline on every RPC, rotation to
the next endpoint on connection failures within a bounded budget, a raised receive limit and
paged range reads. Layout, epochs and limits: docs/engine-etcd.md.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs, quote, unquote, urlsplit

import grpc
from etcd3 import etcdrpc
from etcd3.etcdrpc import kv_pb2

from skillfs.engines.base import EMPTY, CommitOp, Engine, MiB, VersionMismatch
from skillfs.errors import InvalidPath, PermissionDenied, StoreUnavailable, TooLarge
from skillfs.model import Change, Manifest, Revision, Scope

T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...] | None

MAX_TXN_OPS = 128  # etcd's default --max-txn-ops, per compare/success/failure list
#: Seconds a usage batch's marker lives (see `add_usage`): far longer than its retries take.
USAGE_MARK_TTL = 600
CHUNKS_PER_READ = 32  # chunk reads per transaction: responses stay under 32 MiB
DEFAULT_PORT = 2379
PARTIAL = b"partial "  # last-use value of a blob still being uploaded
COMPLETE_BELOW = b"p"  # a complete blob's last-use value (decimal text) sorts below this
_ROTATE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}
_QUERY = {"prefix", "timeout", "cacert", "cert", "key", "tls"}


class EndpointsDown(Exception):
    """No endpoint answered within the budget; the message lists each one's last error."""


class _ResponseTooLarge(TooLarge):
    """A response was over our receive limit: page smaller."""


class _RequestTooLarge(TooLarge):
    """etcd refused a request over its --max-request-bytes."""


class _LeaseGone(StoreUnavailable):
    """A put named a lease etcd no longer has (expired early, or the data was restored)."""


class _Compacted(Exception):
    """A read at a pinned revision hit a compaction: start the scan again."""


def _prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with `prefix`."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return b"\0"
    p[-1] += 1
    return bytes(p)


def _batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _epoch(cluster_id: int, created: int) -> str:
    """An epoch names one history of a domain: this cluster, this creation of the rev key."""
    return f"{cluster_id:016x}-{created}"


def _revision(cluster_id: int, rev_kv: Any) -> Revision | None:
    """A domain's revision from its rev key (None: the key is absent)."""
    if rev_kv is None:
        return None
    return Revision(epoch=_epoch(cluster_id, rev_kv.create_revision), counter=rev_kv.mod_revision)


def _stamp(value: bytes) -> float:
    return float(value.removeprefix(PARTIAL))


def _get(key: bytes) -> Any:
    return etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=key))


def _put(key: bytes, value: bytes, prev_kv: bool = False, lease: int = 0) -> Any:
    request = etcdrpc.PutRequest(key=key, value=bytes(value), prev_kv=prev_kv, lease=lease)
    return etcdrpc.RequestOp(request_put=request)


def _delete(key: bytes, range_end: bytes = b"") -> Any:
    return etcdrpc.RequestOp(
        request_delete_range=etcdrpc.DeleteRangeRequest(key=key, range_end=range_end)
    )


def _mod_is(key: bytes, mod_revision: int) -> Any:
    """Compare: the key was last written at `mod_revision` (0: the key is absent)."""
    return etcdrpc.Compare(
        key=key, target=etcdrpc.Compare.MOD, result=etcdrpc.Compare.EQUAL, mod_revision=mod_revision
    )


def _absent(key: bytes) -> Any:
    return etcdrpc.Compare(
        key=key, target=etcdrpc.Compare.VERSION, result=etcdrpc.Compare.EQUAL, version=0
    )


def _first_kv(response_op: Any) -> Any:
    kvs = response_op.response_range.kvs
    return kvs[0] if kvs else None


class _Endpoint:
    """One etcd member: its own channel, so a dead member never blocks the others."""

    def __init__(
        self, target: str, credentials: grpc.ChannelCredentials | None, options: list[Any]
    ) -> None:
        self.target = target
        self.channel = (
            grpc.secure_channel(target, credentials, options=options)
            if credentials is not None
            else grpc.insecure_channel(target, options=options)
        )
        self.kv = etcdrpc.KVStub(self.channel)
        self.watch = etcdrpc.WatchStub(self.channel)
        self.auth = etcdrpc.AuthStub(self.channel)
        self.lease = etcdrpc.LeaseStub(self.channel)
        self.token: str | None = None


class EtcdEngine(Engine):
    """etcd v3 through the `etcd3` module's stubs; see the module docstring."""

    chunk_size = 1 * MiB
    #: A commit's success list holds 2 puts per op (manifest, history copy) plus the rev key.
    max_ops = (MAX_TXN_OPS - 1) // 2

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        retry_for: float = 10.0,
        page_size: int = 256,
        max_response_bytes: int = 64 * MiB,
    ) -> None:
        super().__init__(url)
        parts = urlsplit(url)
        if parts.scheme != "etcd":
            raise InvalidPath(f"not an etcd URL: {self.url!r}; use etcd://host:port[,host:port]")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = set(query) - _QUERY
        if unknown:
            raise InvalidPath(
                f"unknown option(s) {', '.join(sorted(unknown))} in {self.url!r}; "
                f"known: {', '.join(sorted(_QUERY))}"
            )
        creds, _, hosts = parts.netloc.rpartition("@")
        user, _, password = creds.partition(":")
        self._user = unquote(user) or None
        self._password = unquote(password)
        self._prefix = query.get("prefix", "").encode()
        try:
            self.timeout = float(query.get("timeout", timeout))
        except ValueError as exc:
            raise InvalidPath(f"timeout in {self.url!r} is not a number of seconds") from exc
        self.retry_for = retry_for
        self.page_size = page_size
        self.max_response_bytes = max_response_bytes
        options = [
            ("grpc.max_receive_message_length", max_response_bytes),
            ("grpc.max_send_message_length", -1),
            # Reconnect to a member that comes back within a second, not grpc's default 120 s.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        credentials = self._tls(query)
        targets = [self._target(h) for h in hosts.split(",") if h.strip()]
        if not targets:
            raise InvalidPath(f"no endpoint in {self.url!r}; use etcd://host:port[,host:port]")
        self._endpoints = [_Endpoint(t, credentials, options) for t in targets]
        self._current = 0
        self._lock = threading.Lock()
        #: (lease id, time.monotonic() it expires) for usage-batch markers
        self._usage_lease: tuple[int, float] | None = None

    def _target(self, host: str) -> str:
        host = host.strip()
        name, sep, port = host.rpartition(":")
        if not sep or name.endswith(":") or "]" in port:  # no port, or a bare IPv6 address
            return f"{host}:{DEFAULT_PORT}"
        if not port.isdigit():
            raise InvalidPath(f"bad port in endpoint {host!r} of {self.url!r}")
        return host

    def _tls(self, query: Mapping[str, str]) -> grpc.ChannelCredentials | None:
        """TLS when the URL names a CA (`cacert=`) or asks for it (`tls=1`, system roots)."""
        if not ("cacert" in query or query.get("tls") in ("1", "true", "yes")):
            if "cert" in query or "key" in query:
                raise InvalidPath(f"cert/key in {self.url!r} need TLS: add cacert=PATH or tls=1")
            return None

        def read(name: str) -> bytes | None:
            path = query.get(name)
            if not path:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as exc:
                raise InvalidPath(f"cannot read {name}={path!r} of {self.url!r}: {exc}") from exc

        cert, key = read("cert"), read("key")
        if (cert is None) != (key is None):
            raise InvalidPath(f"give both cert= and key= (a client certificate) in {self.url!r}")
        return grpc.ssl_channel_credentials(read("cacert"), key, cert)

    @property
    def endpoint(self) -> str:
        """The endpoint calls go to now (they move to the next one when it fails)."""
        return self._endpoints[self._current].target

    # ------------------------------------------------------------------ calls

    def _metadata(self, ep: _Endpoint, timeout: float) -> Metadata:
        """The auth token of this endpoint, fetched when first needed (or after it expired)."""
        if self._user is None:
            return None
        if ep.token is None:
            req = etcdrpc.AuthenticateRequest(name=self._user, password=self._password)
            ep.token = str(ep.auth.Authenticate(req, timeout=timeout).token)
        return (("token", ep.token),)

    def _rpc(
        self, fn: Callable[[_Endpoint, float, Metadata], T], deadline: float | None = None
    ) -> T:
        """Run `fn` on the current endpoint; on a connection failure rotate to the next one
        and try again, each endpoint at most twice and never past the budget (`retry_for`, or
        `deadline` for waits, which also becomes the RPC's deadline)."""
        end = deadline if deadline is not None else time.monotonic() + self.retry_for
        n = len(self._endpoints)
        failures: dict[str, str] = {}
        reauthenticated = False
        attempt = 0
        while attempt < 2 * n:
            remaining = end - time.monotonic()
            if remaining <= 0 and attempt > 0:
                break
            index = self._current
            ep = self._endpoints[index]
            remaining = max(remaining, 0.01)  # the first attempt always runs
            call_timeout = remaining if deadline is not None else min(self.timeout, remaining)
            try:
                return fn(ep, call_timeout, self._metadata(ep, call_timeout))
            except grpc.RpcError as exc:
                code, details = exc.code(), exc.details() or ""
                if code == grpc.StatusCode.UNAUTHENTICATED and not reauthenticated:
                    ep.token, reauthenticated = None, True  # the token expired: log in again
                    continue
                if code not in _ROTATE:
                    raise self._error(code, details) from exc
                failures[ep.target] = f"{code.name}: {details}"
            with self._lock:
                if self._current == index:
                    self._current = (index + 1) % n
            attempt += 1
            if attempt % n == 0:
                time.sleep(max(0.0, min(0.2, end - time.monotonic())))
        tried = "; ".join(f"{t} {e}" for t, e in failures.items())
        down = EndpointsDown(f"no etcd endpoint answered: {tried}")
        raise self.unavailable_error(down) from down

    def _error(self, code: grpc.StatusCode, details: str) -> Exception:
        """An error that rotating endpoints would not cure."""
        where = f"etcd store {self.url}"
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "Received message larger" in details:
            return _ResponseTooLarge(
                f"a response from {where} is over the receive limit of "
                f"{self.max_response_bytes} bytes ({details}); raise max_response_bytes"
            )
        if "request is too large" in details or "larger than max" in details:
            return _RequestTooLarge(f"{where} refused a request as too large ({details})")
        if code == grpc.StatusCode.OUT_OF_RANGE and "compacted" in details:
            return _Compacted(details)
        if "requested lease not found" in details:
            return _LeaseGone(f"{where}: {details}")
        if "user name is empty" in details:
            return PermissionDenied(
                f"{where} requires a user: give etcd://USER:PASSWORD@host:port (URL-encoded)"
            )
        if code == grpc.StatusCode.PERMISSION_DENIED or "authentication" in details:
            return PermissionDenied(
                f"{where} refused the credentials or the operation ({code.name}: {details}); "
                "check the user and password in the URL and the user's roles"
            )
        return StoreUnavailable(
            f"{where} failed the request ({code.name}: {details}); check the cluster's health "
            "(etcdctl endpoint status, alarm list), then retry"
        )

    def _txn(self, request: Any) -> Any:
        return self._rpc(lambda ep, t, md: ep.kv.Txn(request, timeout=t, metadata=md))

    def _range(self, request: Any) -> Any:
        return self._rpc(lambda ep, t, md: ep.kv.Range(request, timeout=t, metadata=md))

    def _get_many(self, keys: Sequence[bytes], batch: int = MAX_TXN_OPS) -> list[Any]:
        """The KeyValue (or None) of each key: one transaction per `batch` keys, split further
        when a response would be over the receive limit."""
        out: list[Any] = []
        for part in _batches(keys, batch):
            request = etcdrpc.TxnRequest(success=[_get(k) for k in part])
            try:
                response = self._txn(request)
            except _ResponseTooLarge:
                if len(part) == 1:
                    raise
                out += self._get_many(part, max(1, len(part) // 2))
                continue
            out += [_first_kv(r) for r in response.responses]
        return out

    def _scan(self, prefix: bytes) -> list[Any]:
        """Every KeyValue under `prefix`, in key order, as of one revision: the first page is
        a linearizable read, the next ones read at its revision. Pages shrink when a response
        would be over the receive limit; a compaction mid-scan starts it again."""
        for _ in range(5):
            try:
                return self._scan_once(prefix)
            except _Compacted:
                continue
        raise StoreUnavailable(f"etcd store {self.url} kept compacting while {prefix!r} was read")

    def _scan_once(self, prefix: bytes) -> list[Any]:
        start, end = prefix, _prefix_end(prefix)
        revision, limit = 0, self.page_size
        out: list[Any] = []
        while True:
            request = etcdrpc.RangeRequest(key=start, range_end=end, limit=limit, revision=revision)
            try:
                response = self._range(request)
            except _ResponseTooLarge:
                if limit == 1:
                    raise
                limit = max(1, limit // 2)
                continue
            out += response.kvs
            revision = revision or response.header.revision
            if not response.more or not response.kvs:
                return out
            start = response.kvs[-1].key + b"\0"

    def _children(self, prefix: bytes) -> Iterator[str]:
        """The distinct path segments right below `prefix`, reading keys only and jumping over
        each child's subtree, so a child with many keys costs no more than one with few."""
        start, end = prefix, _prefix_end(prefix)
        last: bytes | None = None
        while True:
            request = etcdrpc.RangeRequest(
                key=start, range_end=end, keys_only=True, limit=self.page_size
            )
            response = self._range(request)
            for kv in response.kvs:
                child = kv.key[len(prefix) :].split(b"/", 1)[0]
                if child != last:
                    last = child
                    yield child.decode()
            if not response.more or last is None:
                return
            start = _prefix_end(prefix + last + b"/")

    def _exists(self, prefix: bytes) -> bool:
        request = etcdrpc.RangeRequest(
            key=prefix, range_end=_prefix_end(prefix), keys_only=True, limit=1
        )
        return bool(self._range(request).kvs)

    # ------------------------------------------------------------------ keys

    def _key(self, logical: str) -> bytes:
        return self._prefix + logical.encode()

    def _manifest_key(self, scope: Scope, skill: str) -> bytes:
        return self._key(scope.prefix + skill)

    def _history_prefix(self, scope: Scope, skill: str) -> bytes:
        return self._key(f"history/{scope.prefix}{skill}/")

    def _rev_key(self, domain: str) -> bytes:
        return self._key(f"{domain}/rev")

    def _use_key(self, sha: str) -> bytes:
        return self._key(f"blobs/{sha}")

    def _usage_prefix(self, agent: str) -> bytes:
        return self._key(f"usage/agents/{agent}/")

    # ------------------------------------------------------------------ blobs

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        """One nested transaction per blob: refresh last-use only where the blob is complete
        (its value sorts below b"p"; an absent key or a `partial` marker does not)."""
        stamp = repr(now).encode()
        present: set[str] = set()
        for part in _batches(list(dict.fromkeys(shas)), MAX_TXN_OPS):
            ops = [
                etcdrpc.RequestOp(
                    request_txn=etcdrpc.TxnRequest(
                        compare=[
                            etcdrpc.Compare(
                                key=self._use_key(sha),
                                target=etcdrpc.Compare.VALUE,
                                result=etcdrpc.Compare.LESS,
                                value=COMPLETE_BELOW,
                            )
                        ],
                        success=[_put(self._use_key(sha), stamp)],
                    )
                )
                for sha in part
            ]
            response = self._txn(etcdrpc.TxnRequest(success=ops))
            present.update(
                sha
                for sha, r in zip(part, response.responses, strict=True)
                if r.response_txn.succeeded
            )
        return present

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float) -> None:
        """Marker first, chunks next, then the marker turns complete if nobody (GC) removed it
        meanwhile; a crashed upload leaves a dated marker that GC can collect with its chunks."""
        use = self._use_key(sha)
        stamp = repr(now).encode()
        for _ in range(3):
            response = self._txn(
                etcdrpc.TxnRequest(
                    compare=[_absent(use)],
                    success=[_put(use, PARTIAL + stamp)],
                    failure=[_get(use)],
                )
            )
            if response.succeeded:
                marker = response.header.revision
            else:
                kv = _first_kv(response.responses[0])
                if kv is None:
                    continue
                if not kv.value.startswith(PARTIAL):
                    if sha in self.touch_blobs([sha], now):
                        return
                    continue  # GC swept it between the read and the touch: upload it
                marker = kv.mod_revision  # another upload of the same bytes: share its marker
            for i, chunk in enumerate(chunks):
                self._txn(etcdrpc.TxnRequest(success=[_put(self._key(f"blobs/{sha}/{i}"), chunk)]))
            response = self._txn(
                etcdrpc.TxnRequest(
                    compare=[_mod_is(use, marker)], success=[_put(use, stamp)], failure=[_get(use)]
                )
            )
            if response.succeeded:
                return
            kv = _first_kv(response.responses[0])
            if kv is not None and not kv.value.startswith(PARTIAL):
                return  # the other upload finished first
        raise StoreUnavailable(
            f"blob {sha} was garbage-collected three times while it was uploaded to {self.url}; "
            "is the GC grace shorter than an upload?"
        )

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        kvs = self._get_many([self._key(f"blobs/{s}/{i}") for s, i in keys], CHUNKS_PER_READ)
        return [None if kv is None else bytes(kv.value) for kv in kvs]

    def blob_shas(self) -> Iterator[str]:
        return self._children(self._key("blobs/"))

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        use = self._use_key(sha)
        chunks = self._key(f"blobs/{sha}/")
        kv = self._get_many([use])[0]
        if kv is None:  # chunks left by an upload whose marker GC removed: garbage
            response = self._txn(
                etcdrpc.TxnRequest(
                    compare=[_absent(use)], success=[_delete(chunks, _prefix_end(chunks))]
                )
            )
            return bool(response.succeeded and response.responses[0].response_delete_range.deleted)
        if _stamp(kv.value) >= cutoff:
            return False
        response = self._txn(
            etcdrpc.TxnRequest(
                compare=[_mod_is(use, kv.mod_revision)],
                success=[_delete(use), _delete(chunks, _prefix_end(chunks))],
            )
        )
        return bool(response.succeeded)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        prefix = self._manifest_key(scope, "")
        return {
            kv.key[len(prefix) :].decode(): Manifest.from_json(kv.value)
            for kv in self._scan(prefix)
        }

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        kvs = self._get_many([self._manifest_key(scope, s) for s in skills])
        return {
            s: Manifest.from_json(kv.value)
            for s, kv in zip(skills, kvs, strict=True)
            if kv is not None
        }

    def commit(self, domain: str, ops: Sequence[CommitOp]) -> Revision:
        """Read the current manifests (their bytes go to history), then one transaction:
        compare each key's mod_revision with what was read, copy the old manifests to
        history, put the new ones and the rev key. A failed compare returns the current
        manifests in the same round trip, for the VersionMismatch the Store retries on."""
        keys = [self._manifest_key(op.scope, op.manifest.skill) for op in ops]
        current = self._get_many(keys)
        self._check_versions(ops, current)
        request = etcdrpc.TxnRequest(
            compare=[
                _mod_is(k, kv.mod_revision if kv is not None else 0)
                for k, kv in zip(keys, current, strict=True)
            ],
            success=[
                *(
                    _put(
                        self._history_prefix(op.scope, op.manifest.skill) + b"%010d" % op.expect,
                        kv.value,
                    )
                    for op, kv in zip(ops, current, strict=True)
                    if kv is not None
                ),
                *(
                    _put(k, op.manifest.model_dump_json().encode())
                    for k, op in zip(keys, ops, strict=True)
                ),
                _put(self._rev_key(domain), ops[0].manifest.commit_id.encode(), prev_kv=True),
            ],
            failure=[_get(k) for k in keys],
        )
        try:
            response = self._txn(request)
        except _RequestTooLarge as exc:
            one = ops[0].manifest
            fix = (
                "commit fewer skills at once"
                if len(ops) > 1
                else f"{one.skill} lists {len(one.files)} files; an update carries the old "
                "and the new file table, so keep a skill under about 5,000 files"
            )
            raise TooLarge(
                f"a commit of {len(ops)} skill(s) is one etcd transaction of "
                f"{request.ByteSize()} bytes (new manifests and history copies), over the "
                f"server's --max-request-bytes (1.5 MiB by default): {fix} ({exc})"
            ) from exc
        if not response.succeeded:
            now = [_first_kv(r) for r in response.responses]
            self._check_versions(ops, now)
            # rewritten at the same version between our read and the transaction
            first = ops[0]
            raise VersionMismatch(first.scope, first.manifest.skill, first.expect)
        rev_put = response.responses[-1].response_put
        created = (
            rev_put.prev_kv.create_revision
            if rev_put.HasField("prev_kv")
            else response.header.revision
        )
        return Revision(
            epoch=_epoch(response.header.cluster_id, created), counter=response.header.revision
        )

    @staticmethod
    def _check_versions(ops: Sequence[CommitOp], current: Sequence[Any]) -> None:
        """VersionMismatch for the first op whose skill is not at the version it expects."""
        for op, kv in zip(ops, current, strict=True):
            version = Manifest.from_json(kv.value).version if kv is not None else 0
            if version != op.expect:
                raise VersionMismatch(op.scope, op.manifest.skill, version)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        kvs = self._scan(self._history_prefix(scope, skill))
        return [Manifest.from_json(kv.value) for kv in reversed(kvs)]

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        prefix = self._history_prefix(scope, skill)
        for part in _batches(list(versions), MAX_TXN_OPS):
            self._txn(etcdrpc.TxnRequest(success=[_delete(prefix + b"%010d" % v) for v in part]))

    # ------------------------------------------------------------------ revisions and changes

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """All rev keys in one read-only transaction (linearizable, one round trip)."""
        out: dict[str, Revision | None] = {}
        for part in _batches(list(domains), MAX_TXN_OPS):
            response = self._txn(etcdrpc.TxnRequest(success=[_get(self._rev_key(d)) for d in part]))
            cluster = response.header.cluster_id
            for domain, r in zip(part, response.responses, strict=True):
                out[domain] = _revision(cluster, _first_kv(r))
        return out

    def _read_rev(self, domain: str) -> tuple[Revision | None, int]:
        """The domain's revision and the store's revision at the time of reading it."""
        response = self._range(etcdrpc.RangeRequest(key=self._rev_key(domain)))
        kv = response.kvs[0] if response.kvs else None
        return _revision(response.header.cluster_id, kv), response.header.revision

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """etcd's MVCC history is the log: a watch on the domain's keys from the revision
        after `since` replays what the log still holds, then waits for new commits."""
        deadline = time.monotonic() + timeout
        prefix = self._key(f"{domain}/")
        while True:
            current, store_revision = self._read_rev(domain)
            if self._must_reset(current, since):
                return [Change(revision=current or EMPTY, op="reset")]
            behind = current is not None and current.counter > since.counter
            if behind:  # the log holds what we need now: read it even when timeout is 0
                start, wait_until = (
                    since.counter + 1,
                    max(deadline, time.monotonic() + self.timeout),
                )
            elif time.monotonic() < deadline:
                # Nothing of this domain changed up to store_revision: wait from just after
                # it, so a compaction of older, unrelated revisions is no reason to reset.
                start, wait_until = store_revision + 1, deadline
            else:
                return []
            watched = self._watch(prefix, start, wait_until)
            if watched is None:
                return self._reset(domain, since)
            cluster, events = watched
            out: list[Change] = []
            for event in events:
                change = self._change(domain, prefix, cluster, since, event)
                if change == "reset":
                    return self._reset(domain, since)
                if change is not None:
                    out.append(change)
            if out or not events or time.monotonic() >= deadline:
                return out

    @staticmethod
    def _must_reset(current: Revision | None, since: Revision) -> bool:
        """Another history than `since`'s: another epoch, the counter went back, or the
        domain is gone while `since` is not EMPTY."""
        if current is None:
            return since.epoch != ""
        return current.epoch != since.epoch or current.counter < since.counter

    def _reset(self, domain: str, since: Revision) -> list[Change]:
        current, _ = self._read_rev(domain)
        if current is None and since.epoch == "":
            return []
        return [Change(revision=current or EMPTY, op="reset")]

    def _change(
        self, domain: str, prefix: bytes, cluster: int, since: Revision, event: Any
    ) -> Change | Literal["reset"] | None:
        """One watch event as a Change; a deleted key or a recreated rev key means reset."""
        if event.type == kv_pb2.Event.DELETE:
            return "reset"
        kv = event.kv
        rest = kv.key[len(prefix) :].decode()
        if rest == "rev":
            return "reset" if _epoch(cluster, kv.create_revision) != since.epoch else None
        kind, _, ident = domain.partition("/")
        if kind == "markets" and rest.startswith("skills/"):
            scope = Scope.market(ident)
        elif rest.startswith("shared/skills/"):
            scope = Scope.shared(ident)
        elif rest.startswith("users/") and rest.count("/") >= 3:
            scope = Scope.user(ident, rest.split("/", 2)[1])
        else:
            return None
        m = Manifest.from_json(kv.value)
        return Change(
            revision=Revision(epoch=since.epoch, counter=kv.mod_revision),
            op="remove" if m.deleted else "put",
            scope=scope,
            skill=m.skill,
            version=m.version,
        )

    def _watch(self, prefix: bytes, start: int, deadline: float) -> tuple[int, list[Any]] | None:
        """The first batch of events under `prefix` from revision `start` on (whole
        revisions), an empty list at the deadline, None when `start` was compacted (or the
        batch is over the receive limit: reloading is the safe answer either way)."""

        def run(ep: _Endpoint, timeout: float, md: Metadata) -> tuple[int, list[Any]] | None:
            done = threading.Event()
            create = etcdrpc.WatchCreateRequest(
                key=prefix, range_end=_prefix_end(prefix), start_revision=start
            )

            def requests() -> Iterator[Any]:
                yield etcdrpc.WatchRequest(create_request=create)
                done.wait()  # keep the stream open until we are done reading

            stream = ep.watch.Watch(requests(), timeout=timeout, metadata=md)
            try:
                for response in stream:
                    if response.compact_revision:
                        return None
                    if response.canceled:
                        raise StoreUnavailable(
                            f"etcd store {self.url} cancelled a watch: {response.cancel_reason}"
                        )
                    if response.events:
                        return response.header.cluster_id, list(response.events)
                return 0, []
            except grpc.RpcError as exc:
                # the wait is over; etcd may report its side of the deadline as UNKNOWN
                if "deadline exceeded" in (exc.details() or "").lower():
                    return 0, []
                if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    return None
                raise
            finally:
                done.set()
                stream.cancel()

        return self._rpc(run, deadline=deadline)

    # ------------------------------------------------------------------ listings

    def domains(self) -> list[str]:
        agents = [f"agents/{a}" for a in self._children(self._key("agents/"))]
        markets = [f"markets/{m}" for m in self._children(self._key("markets/"))]
        return sorted(agents + markets)

    def scopes(self, domain: str) -> list[Scope]:
        kind, _, ident = domain.partition("/")
        if kind == "markets":
            market = Scope.market(ident)
            return [market] if self._exists(self._manifest_key(market, "")) else []
        shared = Scope.shared(ident)
        out = [shared] if self._exists(self._manifest_key(shared, "")) else []
        out += [Scope.user(ident, u) for u in self._children(self._key(f"{domain}/users/"))]
        return sorted(out, key=str)

    # ------------------------------------------------------------------ usage counters

    def add_usage(self, agent: str, counts: Mapping[tuple[str, str], int]) -> None:
        """One counter key per (user, skill), bumped by compare-and-swap on its mod_revision;
        a batch is one transaction per 127 keys, retried while others bump the same keys.

        Exactly once: the transaction also puts a marker key unique to the batch (on a lease,
        so markers expire by themselves), and a failed compare reads it back. When a retry
        finds its own marker, an earlier attempt landed and only its answer was lost."""
        prefix = self._usage_prefix(agent)
        items = [
            (prefix + f"{quote(user, safe='')}/{quote(skill, safe='')}".encode(), n)
            for (user, skill), n in counts.items()
            if n
        ]
        for part in _batches(items, MAX_TXN_OPS - 1):  # the marker is one more op
            try:
                self._add_usage(agent, part, self._lease_for_marks())
            except _LeaseGone:
                self._usage_lease = None
                self._add_usage(agent, part, self._lease_for_marks())

    def _add_usage(self, agent: str, part: Sequence[tuple[bytes, int]], lease: int) -> None:
        keys = [k for k, _ in part]
        mark = self._key(f"usage/batches/{uuid.uuid4().hex}")
        current = self._get_many(keys)
        end = time.monotonic() + self.retry_for
        while True:
            request = etcdrpc.TxnRequest(
                compare=[
                    _mod_is(k, kv.mod_revision if kv is not None else 0)
                    for k, kv in zip(keys, current, strict=True)
                ],
                success=[
                    *(
                        _put(k, b"%d" % (n + (int(kv.value) if kv is not None else 0)))
                        for (k, n), kv in zip(part, current, strict=True)
                    ),
                    _put(mark, b"", lease=lease),
                ],
                failure=[*(_get(k) for k in keys), _get(mark)],
            )
            response = self._txn(request)
            if response.succeeded or _first_kv(response.responses[-1]) is not None:
                return  # done now, or by an attempt whose answer was lost
            if time.monotonic() > end:
                raise StoreUnavailable(
                    f"usage counters of agent {agent} on {self.url} stayed contended for "
                    f"{self.retry_for:.0f}s; retry"
                )
            current = [_first_kv(r) for r in response.responses[:-1]]

    def _lease_for_marks(self) -> int:
        """The lease of this engine's usage-batch markers: one grant serves many batches, and a
        new one is granted when less than half of its time is left."""
        ttl = max(USAGE_MARK_TTL, int(6 * self.retry_for))
        held = self._usage_lease
        if held is not None and held[1] - time.monotonic() > ttl / 2:
            return held[0]
        started = time.monotonic()
        request = etcdrpc.LeaseGrantRequest(TTL=ttl)
        response = self._rpc(lambda ep, t, md: ep.lease.LeaseGrant(request, timeout=t, metadata=md))
        self._usage_lease = (int(response.ID), started + int(response.TTL))
        return int(response.ID)

    def usage(self, agent: str) -> dict[tuple[str, str], int]:
        prefix = self._usage_prefix(agent)
        out: dict[tuple[str, str], int] = {}
        for kv in self._scan(prefix):
            user, _, skill = kv.key[len(prefix) :].decode().partition("/")
            out[(unquote(user), unquote(skill))] = int(kv.value)
        return out

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        """A linearizable read: answered only by a member that is part of a quorum."""
        self._range(etcdrpc.RangeRequest(key=self._key("rev"), count_only=True))

    def close(self) -> None:
        for ep in self._endpoints:
            ep.channel.close()
