"""The servers a `grpc://` URL names, as one pool: which to call next, what a failure says
about a server, and when one that hung may be called again (docs/server.md, "The `grpc://`
engine").

- **Balance.** Calls go round-robin over the servers in rotation, so when one leaves it its
  share spreads evenly over the others (a ring that skipped it gave its share to the next
  one: 2:1 loads, a cascade at fleet size).
- **Dead or hung.** A server that refuses or drops a call is tried last for `DOWN_FOR`
  seconds (failing again costs nothing). One whose call timed out — stopped, overloaded, gone
  from the network without closing its connections — leaves the rotation (outlier
  ejection) until a health probe, one thread for the pool while any is out, finds it
  answering again.
- **Deadlines.** A call ends by the end of the budget it runs under (`skillfs.util.deadline`):
  under a budget (a worker's step) each server but the last gets half of what is left, so a
  hung one leaves time for the next; outside one, each gets the call's own timeout.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from skillfs.errors import StoreUnavailable
from skillfs.remote import wire
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.util import deadline

log = logging.getLogger(__name__)
R = TypeVar("R")

#: A server that refused or dropped a call is tried last for this long (seconds).
DOWN_FOR = 1.0
#: While no server can be connected to, how long calls are tried again (every
#: RECONNECT_POLL s) before giving up: the longest reconnect backoff, and a connect. A
#: channel backing off after a restart fails calls at once until it connects again.
RECONNECT_WAIT = 1.5
RECONNECT_POLL = 0.05
#: How often the probe asks an ejected server's health, and how long it waits for it.
PROBE_EVERY = 1.0
PROBE_TIMEOUT = 1.0
#: The shortest try a server gets under a budget.
MIN_TRY = 0.05


class Server:
    """One server of the pool: its channel and stubs, and what its last failure said."""

    def __init__(self, target: str, channel: grpc.Channel) -> None:
        self.target = target
        self.channel = channel
        self.reader = pb_grpc.SkillReaderStub(channel)
        self.admin = pb_grpc.SkillAdminStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)
        #: Refused or dropped a call: tried last until then (`time.monotonic()`).
        self.down_until = 0.0
        #: Timed out: out of the rotation until the probe finds it answering.
        self.ejected = False


#: One try of a call on one server, with its timeout in seconds.
Attempt = Callable[[Server, float], R]


class Pool:
    def __init__(self, servers: Sequence[Server]) -> None:
        self.servers = list(servers)
        self._turn = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._lock = threading.Lock()
        self._probe: threading.Thread | None = None
        self._closed = threading.Event()

    def order(self) -> list[Server]:
        """The servers to try, in turn: one of those in rotation round-robin, the others in
        rotation in a random order (a call that fails over from a dead server then lands on
        any of them, not always on the one after it), then those that just refused, then the
        ejected ones (a call that found no other tries them too)."""
        now = time.monotonic()
        healthy = [s for s in self.servers if not s.ejected and s.down_until <= now]
        if len(healthy) > 1:
            first = healthy.pop(next(self._turn) % len(healthy))
            random.shuffle(healthy)
            healthy.insert(0, first)
        down = [s for s in self.servers if not s.ejected and s.down_until > now]
        return healthy + down + [s for s in self.servers if s.ejected]

    def run(self, attempt: Attempt[R], limit: float) -> R:
        """Run `attempt` on one server after another until one answers, all of it within
        `limit` seconds or the budget it runs under. While no server could even be connected
        to (nothing was sent, so a write is safe to send again) the servers are tried again
        for up to `RECONNECT_WAIT`: a restarted server is back before its channel's
        reconnect backoff ends."""
        end = deadline.deadline(limit)
        reconnect_until = min(time.monotonic() + RECONNECT_WAIT, end)
        bounded = deadline.bounded()
        while True:
            failures: list[str] = []
            unsent = True
            order = self.order()
            for i, server in enumerate(order):
                left = end - time.monotonic()
                if left <= 0 and failures:
                    break
                share = left / 2 if bounded and i < len(order) - 1 else left
                try:
                    return attempt(server, max(share, MIN_TRY))
                except grpc.RpcError as exc:
                    if not wire.is_transport_failure(exc):
                        raise wire.error_from(exc, server.target) from None
                    self.failed(server, exc)
                    failures.append(f"{server.target}: {exc.code().name}: {exc.details()}")
                    unsent = unsent and wire.never_sent(exc)
            if not unsent or time.monotonic() >= reconnect_until:
                raise StoreUnavailable(
                    f"no skillfs server answered ({'; '.join(failures)}); "
                    "check that the servers are running and reachable, then retry"
                )
            time.sleep(RECONNECT_POLL)

    def failed(self, server: Server, exc: grpc.RpcError) -> None:
        """What a transport failure says of `server`: a timeout (a call's deadline, or a
        keepalive ping unanswered on a stream) ejects it, anything else puts it last for
        `DOWN_FOR` seconds."""
        hung = "keepalive" in (exc.details() or "").lower()
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED or hung:
            self.eject(server)
        else:
            server.down_until = time.monotonic() + DOWN_FOR

    def eject(self, server: Server) -> None:
        """Take `server` out of the rotation until the probe finds it answering."""
        with self._lock:
            if not server.ejected:
                log.warning(
                    "skillfs server %s timed out: out of the rotation until it answers",
                    server.target,
                )
            server.ejected = True
            if (self._probe is None or not self._probe.is_alive()) and not self._closed.is_set():
                self._probe = threading.Thread(
                    target=self._probing, name="skillfs-grpc-probe", daemon=True
                )
                self._probe.start()

    def _probing(self) -> None:
        """Ask each ejected server's health until none is out (or the pool closes)."""
        while not self._closed.wait(PROBE_EVERY):
            out = [s for s in self.servers if s.ejected]
            if not out:
                return
            for server in out:
                try:
                    server.health.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT)
                except grpc.RpcError as exc:
                    if exc.code() in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                      grpc.StatusCode.UNAVAILABLE):  # fmt: skip
                        continue  # still hung, or gone
                log.warning("skillfs server %s answers again: back in the rotation", server.target)
                server.ejected = False

    def close(self) -> None:
        self._closed.set()
        for server in self.servers:
            server.channel.close()
