"""An etcd v3 client for the engine (docs/engine-etcd.md): the generated gRPC stubs of the
`etcd3` module, driven directly because that module's client neither retries nor rotates
endpoints well, hides the response header (the engine needs its revision and cluster id) and
caps responses at 4 MiB. Per call it owns: one gRPC channel per endpoint, a deadline on every
RPC, rotation to the next endpoint on connection failures within a bounded budget, the auth
token, a raised receive limit, paged range reads and watches. The key layout is the engine's
(`skillfs/engines/etcd/engine.py`), as JuiceFS keeps tkv_etcd.go apart from tkv.go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import grpc
from etcd3 import etcdrpc

from skillfs.engines.base import MiB, redact, unavailable_error
from skillfs.errors import InvalidPath, PermissionDenied, SkillfsError, StoreUnavailable, TooLarge
from skillfs.util.deadline import deadline as budget_end

T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...] | None

MAX_TXN_OPS = 128  # etcd's default --max-txn-ops, per compare/success/failure list
MAX_REQUEST_BYTES = MiB * 3 // 2  # etcd's default --max-request-bytes
#: What etcd wraps around a request before comparing its size with --max-request-bytes (its
#: raft header), with room to spare: requests are built to stay this far under the limit.
ENVELOPE = 4096
#: Bytes counted per item of a batch on top of its own size: the protobuf framing of a list
#: entry (a tag and a length).
FRAMING = 8
DEFAULT_PORT = 2379
#: The URL's options for TLS (the others are the engine's).
TLS_QUERY = ("cacert", "cert", "key", "tls")
_ROTATE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}


class EndpointsDown(Exception):
    """No endpoint answered within the budget; the message lists each one's last error."""


class ResponseTooLarge(TooLarge):
    """A response was over our receive limit: page smaller."""


class RequestOverLimit(SkillfsError):
    """A request over etcd's --max-txn-ops or --max-request-bytes. Requests are built to fit
    (docs/engine-etcd.md, "Limits"), so this is a bug, or a cluster whose limits are lower
    than the URL says: never a reason to retry."""


class LeaseGone(StoreUnavailable):
    """A put named a lease etcd no longer has (expired early, or the data was restored)."""


class Compacted(Exception):
    """A read at a pinned revision hit a compaction: start the scan again."""


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with `prefix`."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return b"\0"
    p[-1] += 1
    return bytes(p)


def txn_ops(request: Any) -> int:
    """The operations etcd counts against --max-txn-ops for a transaction (its
    checkTxnRequest): its longest list, plus the most any transaction nested in it counts."""
    nested = [
        txn_ops(op.request_txn)
        for op in (*request.success, *request.failure)
        if op.WhichOneof("request") == "request_txn"
    ]
    longest = max(len(request.compare), len(request.success), len(request.failure))
    return longest + max(nested, default=0)


def get_op(key: bytes) -> Any:
    return etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=key))


def put_op(key: bytes, value: bytes, prev_kv: bool = False, lease: int = 0) -> Any:
    request = etcdrpc.PutRequest(key=key, value=bytes(value), prev_kv=prev_kv, lease=lease)
    return etcdrpc.RequestOp(request_put=request)


def delete_op(key: bytes, range_end: bytes = b"") -> Any:
    return etcdrpc.RequestOp(
        request_delete_range=etcdrpc.DeleteRangeRequest(key=key, range_end=range_end)
    )


def mod_is(key: bytes, mod_revision: int) -> Any:
    """Compare: the key was last written at `mod_revision` (0: the key is absent)."""
    return etcdrpc.Compare(
        key=key, target=etcdrpc.Compare.MOD, result=etcdrpc.Compare.EQUAL, mod_revision=mod_revision
    )


def absent(key: bytes) -> Any:
    return etcdrpc.Compare(
        key=key, target=etcdrpc.Compare.VERSION, result=etcdrpc.Compare.EQUAL, version=0
    )


def first_kv(response_op: Any) -> Any:
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
        self.maintenance = etcdrpc.MaintenanceStub(self.channel)
        self.token: str | None = None


class EtcdClient:
    """The members named by an etcd URL, called one at a time with failover; thread-safe."""

    def __init__(
        self,
        url: str,
        tls: Mapping[str, str],
        *,
        timeout: float,
        retry_for: float,
        page_size: int,
        max_response_bytes: int,
        max_txn_ops: int = MAX_TXN_OPS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.url = redact(url)
        #: The cluster's limits (etcd's defaults unless the URL says otherwise): every
        #: request is built to fit them, `packed` being the one place batches are cut.
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        creds, _, hosts = urlsplit(url).netloc.rpartition("@")
        user, _, password = creds.partition(":")
        self._user = unquote(user) or None
        self._password = unquote(password)
        self.timeout = timeout
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
        credentials = self._tls(tls)
        #: Calls go over TLS (the URL's `cacert=` or `tls=1`).
        self.tls = credentials is not None
        targets = [self._target(h) for h in hosts.split(",") if h.strip()]
        if not targets:
            raise InvalidPath(f"no endpoint in {self.url!r}; use etcd://host:port[,host:port]")
        self.endpoints = [_Endpoint(t, credentials, options) for t in targets]
        self._current = 0
        self._lock = threading.Lock()

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
        return self.endpoints[self._current].target

    @property
    def needs_login(self) -> bool:
        """The URL names a user: calls carry the token `rpc` logs in for."""
        return self._user is not None

    @property
    def endpoint_index(self) -> int:
        """The index in `endpoints` of `endpoint` (where a long-lived watch stream opens)."""
        return self._current

    def metadata(self, ep: _Endpoint) -> Metadata:
        """The auth metadata of a call to `ep` that `rpc` does not run (a watch stream)."""
        return self._metadata(ep, self.timeout)

    # ------------------------------------------------------------------ calls

    def _metadata(self, ep: _Endpoint, timeout: float) -> Metadata:
        """The auth token of this endpoint, fetched when first needed (or after it expired)."""
        if self._user is None:
            return None
        if ep.token is None:
            req = etcdrpc.AuthenticateRequest(name=self._user, password=self._password)
            ep.token = str(ep.auth.Authenticate(req, timeout=timeout).token)
        return (("token", ep.token),)

    def rpc(
        self, fn: Callable[[_Endpoint, float, Metadata], T], deadline: float | None = None
    ) -> T:
        """Run `fn` on the current endpoint; on a connection failure rotate to the next one
        and try again, each endpoint at most twice and never past the budget (`retry_for`, or
        `deadline` for waits, which also becomes the RPC's deadline), nor past the end of the
        budget the call runs under (`skillfs.util.deadline`: a worker's step)."""
        end = budget_end(self.retry_for if deadline is None else deadline - time.monotonic())
        n = len(self.endpoints)
        failures: dict[str, str] = {}
        reauthenticated = False
        attempt = 0
        while attempt < 2 * n:
            remaining = end - time.monotonic()
            if remaining <= 0 and attempt > 0:
                break
            index = self._current
            ep = self.endpoints[index]
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
        raise unavailable_error(self.url, down) from down

    def _error(self, code: grpc.StatusCode, details: str) -> Exception:
        """An error that rotating endpoints would not cure."""
        where = f"etcd store {self.url}"
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "Received message larger" in details:
            return ResponseTooLarge(
                f"a response from {where} is over the receive limit of "
                f"{self.max_response_bytes} bytes ({details}); raise max_response_bytes"
            )
        if (
            "request is too large" in details
            or "larger than max" in details
            or "too many operations" in details
        ):
            return self.over_limit(f"{where} refused it ({code.name}: {details})")
        if code == grpc.StatusCode.OUT_OF_RANGE and "compacted" in details:
            return Compacted(details)
        if "requested lease not found" in details:
            return LeaseGone(f"{where}: {details}")
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

    @property
    def request_budget(self) -> int:
        """The bytes a request may take: --max-request-bytes less etcd's envelope."""
        return self.max_request_bytes - ENVELOPE

    def over_limit(self, what: str) -> RequestOverLimit:
        return RequestOverLimit(
            f"an etcd request is over the cluster's limits: {what}. skillfs builds every "
            f"request for max_txn_ops={self.max_txn_ops} and max_request_bytes="
            f"{self.max_request_bytes} (etcd's defaults unless the URL gives them): if the "
            "cluster runs with lower --max-txn-ops or --max-request-bytes, give its values in "
            "the URL; otherwise this is a bug in skillfs, please report it with this message"
        )

    def packed(
        self,
        items: Sequence[T],
        size: Callable[[T], int],
        *,
        reserve_ops: int = 0,
        reserve_bytes: int = 0,
    ) -> Iterator[list[T]]:
        """`items` cut into batches that each fit one transaction: at most `max_txn_ops` less
        `reserve_ops` items (an item is one entry of each list it is in) and the request
        budget less `reserve_bytes`, an item costing `size(item)` bytes. Every batched request
        is cut here, so none is refused for its size (docs/engine-etcd.md, "Limits")."""
        most = self.max_txn_ops - reserve_ops
        budget = self.request_budget - reserve_bytes
        batch: list[T] = []
        used = 0
        for item in items:
            cost = size(item) + FRAMING
            if batch and (len(batch) >= most or used + cost > budget):
                yield batch
                batch, used = [], 0
            batch.append(item)
            used += cost
        if batch:
            yield batch

    def txn(self, request: Any) -> Any:
        """One transaction; one over the limits is refused here, before etcd sees it."""
        ops, size = txn_ops(request), request.ByteSize()
        if ops > self.max_txn_ops or size > self.request_budget:
            raise self.over_limit(f"a transaction of {ops} operations and {size} bytes")
        return self.rpc(lambda ep, t, md: ep.kv.Txn(request, timeout=t, metadata=md))

    def range(self, request: Any) -> Any:
        return self.rpc(lambda ep, t, md: ep.kv.Range(request, timeout=t, metadata=md))

    def get_many(self, keys: Sequence[bytes], batch: int = MAX_TXN_OPS) -> list[Any]:
        """The KeyValue (or None) of each key: one transaction per `batch` keys (fewer when
        the limits say so), split further when a response would be over the receive limit."""
        out: list[Any] = []
        for part in self.packed(keys, len, reserve_ops=max(0, self.max_txn_ops - batch)):
            request = etcdrpc.TxnRequest(success=[get_op(k) for k in part])
            try:
                response = self.txn(request)
            except ResponseTooLarge:
                if len(part) == 1:
                    raise
                out += self.get_many(part, max(1, len(part) // 2))
                continue
            out += [first_kv(r) for r in response.responses]
        return out

    def scan(self, prefix: bytes, *, keys_only: bool = False) -> list[Any]:
        """Every KeyValue under `prefix`, in key order, as of one revision: the first page is
        a linearizable read, the next ones read at its revision. Pages shrink when a response
        would be over the receive limit; a compaction mid-scan starts it again. `keys_only`:
        the keys without their values."""
        for _ in range(5):
            try:
                return self._scan_once(prefix, keys_only)
            except Compacted:
                continue
        raise StoreUnavailable(f"etcd store {self.url} kept compacting while {prefix!r} was read")

    def _scan_once(self, prefix: bytes, keys_only: bool = False) -> list[Any]:
        start, end = prefix, prefix_end(prefix)
        revision, limit = 0, self.page_size
        out: list[Any] = []
        while True:
            request = etcdrpc.RangeRequest(
                key=start, range_end=end, limit=limit, revision=revision, keys_only=keys_only
            )
            try:
                response = self.range(request)
            except ResponseTooLarge:
                if limit == 1:
                    raise
                limit = max(1, limit // 2)
                continue
            out += response.kvs
            revision = revision or response.header.revision
            if not response.more or not response.kvs:
                return out
            start = response.kvs[-1].key + b"\0"

    def children(self, prefix: bytes) -> Iterator[str]:
        """The distinct path segments right below `prefix`, reading keys only and jumping over
        each child's subtree, so a child with many keys costs no more than one with few."""
        start, end = prefix, prefix_end(prefix)
        last: bytes | None = None
        while True:
            request = etcdrpc.RangeRequest(
                key=start, range_end=end, keys_only=True, limit=self.page_size
            )
            response = self.range(request)
            for kv in response.kvs:
                child = kv.key[len(prefix) :].split(b"/", 1)[0]
                if child != last:
                    last = child
                    yield child.decode()
            if not response.more or last is None:
                return
            start = prefix_end(prefix + last + b"/")

    def exists(self, prefix: bytes) -> bool:
        request = etcdrpc.RangeRequest(
            key=prefix, range_end=prefix_end(prefix), keys_only=True, limit=1
        )
        return bool(self.range(request).kvs)

    # ------------------------------------------------------------------ keys

    def watch(self, prefix: bytes, start: int, deadline: float) -> tuple[int, list[Any]] | None:
        """The first batch of events under `prefix` from revision `start` on (whole
        revisions), an empty list at the deadline, None when `start` was compacted (or the
        batch is over the receive limit: reloading is the safe answer either way)."""

        def run(ep: _Endpoint, timeout: float, md: Metadata) -> tuple[int, list[Any]] | None:
            done = threading.Event()
            create = etcdrpc.WatchCreateRequest(
                key=prefix, range_end=prefix_end(prefix), start_revision=start
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

        return self.rpc(run, deadline=deadline)

    # ------------------------------------------------------------------ listings

    def db_size(self) -> int:
        """The backend's size in bytes, as the member answering says (what etcd compares with
        its --quota-backend-bytes)."""
        request = etcdrpc.StatusRequest()
        reply = self.rpc(lambda ep, t, md: ep.maintenance.Status(request, timeout=t, metadata=md))
        return int(reply.dbSize)

    def grant_lease(self, ttl: int) -> tuple[int, int]:
        """A new lease: its id and its TTL in seconds."""
        request = etcdrpc.LeaseGrantRequest(TTL=ttl)
        response = self.rpc(lambda ep, t, md: ep.lease.LeaseGrant(request, timeout=t, metadata=md))
        return int(response.ID), int(response.TTL)

    def close(self) -> None:
        for ep in self.endpoints:
            ep.channel.close()
