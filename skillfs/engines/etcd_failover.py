"""How one etcd call fails over between the members of a URL, for the blocking client
(`etcd_client`) and the event loop's (`etcd_loop`) alike (docs/engine-etcd.md)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import grpc

from skillfs.engines.base import unavailable_error
from skillfs.errors import StoreUnavailable

#: What rotating to the next member may cure.
ROTATE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}


class EndpointsDown(Exception):
    """No endpoint answered within the budget; the message lists each one's last error."""


class Member(Protocol):
    target: str
    token: str | None  # the auth token a call to it sends, None until logged in


class Members(Protocol):
    """What failover needs of a client (`EtcdClient`)."""

    url: str
    timeout: float  # an RPC's deadline
    retry_for: float  # a call's budget

    @property
    def endpoints(self) -> Sequence[Member]: ...

    @property
    def endpoint_index(self) -> int: ...

    def rotate(self, index: int) -> None: ...

    def error(self, code: grpc.StatusCode, details: str) -> Exception: ...


class Attempts:
    """The failover of one call, for the blocking client and the event loop's alike: each
    endpoint tried at most twice, rotating on connection failures, a fresh login once when
    the token expired, never past the budget (`retry_for`, or `deadline` for waits, which
    also becomes the RPC's deadline)."""

    def __init__(self, client: Members, deadline: float | None) -> None:
        self._client = client
        self._waits = deadline is not None
        self._end = deadline if deadline is not None else time.monotonic() + client.retry_for
        self._failures: dict[str, str] = {}
        self._reauthenticated = False
        self._attempt = 0
        self.index = client.endpoint_index  # the endpoint of the try under way
        self.timeout = client.timeout  # and its RPC deadline

    def next(self) -> bool:
        """Whether to try again, and where (`index`, `timeout`); the first try always runs."""
        remaining = self._end - time.monotonic()
        if self._attempt >= 2 * len(self._client.endpoints) or (
            remaining <= 0 and self._attempt > 0
        ):
            return False
        remaining = max(remaining, 0.01)
        self.timeout = remaining if self._waits else min(self._client.timeout, remaining)
        self.index = self._client.endpoint_index
        return True

    def failed(self, exc: grpc.RpcError) -> float:
        """After a failed try: raise what rotating would not cure; else the seconds to wait
        before the next try (a pause after each round of every endpoint)."""
        code, details = exc.code(), exc.details() or ""
        ep = self._client.endpoints[self.index]
        if code == grpc.StatusCode.UNAUTHENTICATED and not self._reauthenticated:
            ep.token, self._reauthenticated = None, True  # the token expired: log in again
            return 0.0
        if code not in ROTATE:
            raise self._client.error(code, details) from exc
        self._failures[ep.target] = f"{code.name}: {details}"
        self._client.rotate(self.index)
        self._attempt += 1
        if self._attempt % len(self._client.endpoints):
            return 0.0
        return max(0.0, min(0.2, self._end - time.monotonic()))

    def exhausted(self) -> StoreUnavailable:
        """The error once no endpoint answered: each one's last failure."""
        tried = "; ".join(f"{t} {e}" for t, e in self._failures.items())
        down = EndpointsDown(f"no etcd endpoint answered: {tried}")
        error = unavailable_error(self._client.url, down)
        error.__cause__ = down
        return error
