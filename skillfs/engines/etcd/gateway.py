"""`EtcdEngine.revisions` over etcd's JSON gateway (docs/engine-etcd.md, "Revisions and
epochs").

The per-step check is the call a fleet makes most: one linearizable read of a domain's rev
key per worker step, on every worker and on the server. Through the gRPC stubs of the
`etcd3` module it costs ~185 µs of the caller's CPU on this project's test machines; the
same read as one HTTP/1.1 request to the gateway etcd serves on its client port
(`POST /v3/kv/range`, JSON; a read-only `/v3/kv/txn` for several domains), on a kept-alive
connection parsed by httptools, costs ~50 µs. The gateway calls etcd's own KV service, so the
read is the same linearizable read.

The gRPC client (`EtcdClient`) stays the authority: this reader asks the member that client
uses now, with the auth token it logged in with, and answers None whenever it cannot answer
— no connection, a timeout, an error status, no token yet — so that the engine reads over
gRPC, which fails over, logs in again and reports errors. After a failure other than a
stale token it rests `REST` seconds (logged once per run of failures).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import httptools

from skillfs.engines.etcd.client import EtcdClient
from skillfs.engines.etcd.watch import revision
from skillfs.model import Revision

log = logging.getLogger(__name__)

#: Seconds without gateway reads after one failed (gRPC reads meanwhile).
REST = 5.0


class StaleToken(Exception):
    """The gateway refused the token: the gRPC read logs in again."""


def _revision(cluster_id: int, kvs: Sequence[Mapping[str, Any]] | None) -> Revision | None:
    """A domain's revision from the gateway's JSON for its rev key: its fields as the gRPC
    reply has them (the gateway writes int64 as strings), read by `etcd_watch.revision`."""
    kv = None
    if kvs:
        created, modified = int(kvs[0]["create_revision"]), int(kvs[0]["mod_revision"])
        kv = SimpleNamespace(create_revision=created, mod_revision=modified)
    return revision(cluster_id, kv)


class _Reply:
    """One response, parsed by httptools (which calls the `on_` methods)."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.done = False
        self.keep_alive = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True
        self.keep_alive = self.parser.should_keep_alive()  # valid until the parser resets


class _Connection:
    """One kept-alive HTTP/1.1 connection to a member's gateway, used by one thread at a
    time."""

    def __init__(self, target: str, context: ssl.SSLContext | None, timeout: float) -> None:
        self.target = target
        host, _, port = target.rpartition(":")
        host = host.strip("[]")
        sock = socket.create_connection((host, int(port)), timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = context.wrap_socket(sock, server_hostname=host) if context else sock
        self.reusable = True
        self.pid = os.getpid()  # a forked child opens its own: a shared stream mixes answers

    def request(self, data: bytes) -> tuple[int, bytes]:
        """The status and body of one request (the bytes of a whole HTTP request)."""
        self.sock.sendall(data)
        reply = _Reply()
        while not reply.done:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the gateway closed the connection")
            reply.parser.feed_data(chunk)
        self.reusable = reply.keep_alive
        return reply.parser.get_status_code(), b"".join(reply.body)

    def close(self) -> None:
        self.reusable = False
        self.sock.close()


class GatewayReads:
    """Revisions read over the gateway of the member `client` uses (see the module
    docstring); thread-safe, one connection per concurrent reader, kept for the next."""

    def __init__(
        self, client: EtcdClient, rev_key: Callable[[str], bytes], tls: Mapping[str, str]
    ) -> None:
        self._client = client
        self._rev_key = rev_key
        self._tls = tls
        self._context: ssl.SSLContext | None = None  # made with the first TLS connection
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._rest_until = 0.0
        self._failing = False  # a failure was logged and no read succeeded since
        self._refused_token: str | None = None  # the token the gateway last refused
        self._closed = False

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None] | None:
        """The revisions of `domains`; None: read them over gRPC."""
        ep = self._client.endpoints[self._client.endpoint_index]
        token = ep.token
        if self._client.needs_login and (token is None or token == self._refused_token):
            return None  # the gRPC read logs in (again) first
        if self._closed or time.monotonic() < self._rest_until:
            return None
        conn: _Connection | None = None
        try:
            conn = self._take(ep.target)
            out = self._read(conn, domains, token)
        except StaleToken:
            self._refused_token = token
            out = None
        except (OSError, ValueError, KeyError, TypeError) as exc:  # timeouts, TLS, bad JSON
            if conn is not None:
                conn.close()
            self._rest(ep.target, exc)
            return None
        assert conn is not None
        self._give(conn)
        if out is not None and self._failing:
            self._failing = False
            log.info("etcd gateway reads from %s again", ep.target)
        return out

    def close(self) -> None:
        self._closed = True
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _read(
        self, conn: _Connection, domains: Sequence[str], token: str | None
    ) -> dict[str, Revision | None]:
        if len(domains) == 1:
            reply = self._call(conn, "/v3/kv/range", {"key": self._b64(domains[0])}, token)
            return {domains[0]: _revision(int(reply["header"]["cluster_id"]), reply.get("kvs"))}
        out: dict[str, Revision | None] = {}
        for part in self._client.packed(domains, lambda d: len(self._rev_key(d))):
            ops = [{"request_range": {"key": self._b64(d)}} for d in part]
            reply = self._call(conn, "/v3/kv/txn", {"success": ops}, token)
            cluster = int(reply["header"]["cluster_id"])
            for domain, r in zip(part, reply["responses"], strict=True):
                out[domain] = _revision(cluster, r["response_range"].get("kvs"))
        return out

    def _b64(self, domain: str) -> str:
        return base64.b64encode(self._rev_key(domain)).decode()

    def _call(
        self, conn: _Connection, path: str, body: Mapping[str, Any], token: str | None
    ) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {conn.target}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n"
        )
        if token is not None:
            head += f"Authorization: {token}\r\n"
        status, reply = conn.request(head.encode() + b"\r\n" + data)
        if status == 401:
            raise StaleToken()
        if status != 200:
            raise ConnectionError(f"HTTP {status} from the gateway: {reply[:200]!r}")
        return json.loads(reply)

    def _take(self, target: str) -> _Connection:
        """An idle connection to `target` (the member the gRPC client uses now: it moves
        there when that client fails over), else a new one."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.target == target and conn.pid == os.getpid():
                    return conn
                conn.close()  # in a forked child this closes only the child's descriptor
        if self._client.tls and self._context is None:
            self._context = self._ssl_context(self._tls)
        return _Connection(target, self._context, self._client.timeout)

    def _give(self, conn: _Connection) -> None:
        if not conn.reusable:
            conn.close()
            return
        with self._lock:
            self._idle.append(conn)

    @staticmethod
    def _ssl_context(tls: Mapping[str, str]) -> ssl.SSLContext:
        """TLS as the gRPC client has it: the URL's `cacert=` (else the system's roots),
        `cert=` and `key=`."""
        context = ssl.create_default_context(cafile=tls.get("cacert"))
        if tls.get("cert"):
            context.load_cert_chain(tls["cert"], tls.get("key"))
        return context

    def _rest(self, target: str, exc: Exception) -> None:
        self._rest_until = time.monotonic() + REST
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if not self._failing:
            self._failing = True
            log.warning(
                "etcd gateway read at %s failed (%s: %s); reading over gRPC, trying the "
                "gateway again every %.0f s",
                target,
                type(exc).__name__,
                exc,
                REST,
            )
