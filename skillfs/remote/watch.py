"""The grpc:// engine's watch: `changes` (one catch-up read), `changes_many` (what a process's
one `Watcher` waits in) and the manifests the server's events carry (docs/server.md, "The
serving model").

A watch of one domain — a worker following its agent — keeps one `Watch` stream open from
one wait to the next: each publish is one message on it, not an answer to a call plus a
new call (a fleet's fan-out is then a message per worker, and an idle worker's stream ends
after `watch_wait` quiet seconds and is opened again). A watch of several domains asks
them all in one `WatchMany` call. Either way the events carry the changed manifests, kept
for `known_manifest`, so after a publish no follower calls `GetManifests`. `interrupt_wait`
ends a thread's wait at once (the watch added a domain, or closes).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from skillfs.engines.base import Engine
from skillfs.model import Change, Manifest, Revision, Scope, same_revision
from skillfs.remote import wire
from skillfs.remote.pool import Pool, Server
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.util.lru import Lru

R = TypeVar("R")
#: Manifests carried by watch events kept for `known_manifest` (the latest of each skill is
#: what a follower asks for, so a few per skill a process follows).
PUSHED = 4096
#: Bytes of the small files watch events carried kept for `known_blob`: a publish's files,
#: taken by every follower of the process as it prefetches them.
PUSHED_BYTES = 16 * 1024 * 1024
#: How much longer than its own wait a watch call waits for the server's answer before
#: taking it as hung.
IDLE_MARGIN = 10.0
#: A wait of one domain at least this long keeps its stream for the next wait (a process's
#: `Watcher`); shorter ones (`Store.follow(poll=1)`) are one call each, as they may be the
#: last of a caller that stops iterating.
HOLD_MIN = 5.0


def with_through(changes: list[Change], through: Revision | None) -> list[Change]:
    """A watch event's changes, ending with a change without scope or skill at `through` when
    the server left out later changes the token may not read: following it moves the revision
    and reloads nothing (C3)."""
    if through is None or (changes and changes[-1].op == "reset"):
        return changes
    last = changes[-1].revision if changes else None
    if last is None or (last.epoch == through.epoch and last.counter < through.counter):
        changes.append(Change(revision=through, op="put"))
    return changes


@dataclass
class _Held:
    """A thread's open Watch stream, kept for its next wait while it is at `through`."""

    domain: str
    through: Revision
    call: Any  # grpc's streaming call: iterate for events, cancel() to end it
    server: Server


class GrpcWatching:
    """The watch half of `GrpcEngine`."""

    if TYPE_CHECKING:
        _metadata: tuple[tuple[str, str], ...]
        timeout: float
        _pool: Pool

        def _run(self, attempt: Callable[[Any, float], R], limit: float | None = None) -> R: ...
        def _manifests(self, scope: Scope, blobs: Any, live: bool = True) -> list[Manifest]: ...

    #: A watch's wait: a Watch stream or WatchMany call the server holds (below its 30 s
    #: limit), ended early by `interrupt_wait`.
    watch_wait = 25.0

    def _init_watching(self) -> None:
        #: False once a server answered that it has no WatchMany (an older one).
        self._many = True
        #: (scope, skill, version) -> the manifest a watch event carried (`known_manifest`).
        self._pushed: Lru[tuple[Scope, str, int], Manifest] = Lru(PUSHED)
        #: sha256 -> a file's bytes a watch event carried (`known_blob`).
        self._pushed_files: Lru[str, bytes] = Lru(PUSHED_BYTES, len)
        self._lock = threading.Lock()
        #: What each thread waits in now (a call to cancel); None: interrupted while not
        #: waiting, so its next wait ends at once.
        self._waiting: dict[int, Any] = {}
        self._interrupted: set[int] = set()
        self._held: dict[int, _Held] = {}

    # ------------------------------------------------------------------ waits

    def _enter(self, call: Any) -> None:
        me = threading.get_ident()
        with self._lock:
            early = me in self._waiting  # interrupted before it began
            self._waiting[me] = call
        if early:
            self._interrupted.add(me)
            call.cancel()

    def _leave(self) -> bool:
        """Done waiting; True when the wait was interrupted."""
        me = threading.get_ident()
        with self._lock:
            self._waiting.pop(me, None)
            if me in self._interrupted:
                self._interrupted.discard(me)
                return True
        return False

    def interrupt_wait(self, thread: int) -> None:
        with self._lock:
            call = self._waiting.get(thread)
            self._waiting[thread] = call
            if call is not None:
                self._interrupted.add(thread)
        if call is not None:
            call.cancel()

    def known_manifest(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        return self._pushed.get((scope, skill, version))

    def known_blob(self, sha: str) -> bytes | None:
        return self._pushed_files.get(sha)

    def _event(self, event: pb.WatchEvent) -> list[Change]:
        for f in event.files:
            if self._pushed_files.get(f.sha256) is None:
                data = bytes(f.data)
                if hashlib.sha256(data).hexdigest() == f.sha256:  # else read it when needed
                    self._pushed_files.put(f.sha256, data)
        for m in event.manifests:
            scope = Scope.parse(m.scope)
            found = self._manifests(scope, [m.manifest_json])[0]
            self._pushed.put((scope, found.skill, found.version), found)
        return with_through(
            [wire.change_from_pb(c) for c in event.changes],
            wire.rev_from_pb(event.through) if event.HasField("through") else None,
        )

    # ------------------------------------------------------------------ the engine's calls

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """The first batch of a Watch stream that ends after `timeout` quiet seconds; the
        manifests it carries are kept for `known_manifest` (a follower's catch-up then loads
        nothing)."""
        wait = max(timeout, 0.001)
        request = pb.WatchRequest(
            domain=domain,
            since=wire.rev_to_pb(since),
            max_wait_seconds=wait,
            with_manifests=True,
            with_files=True,
        )

        def first(server: Any, timeout: float) -> list[Change]:
            stream = server.reader.Watch(request, metadata=self._metadata, timeout=timeout)
            try:
                out: list[Change] = []
                for event in stream:  # a batch, its `continued` events included
                    out += self._event(event)
                    if not event.continued:
                        break
                return out
            finally:
                stream.cancel()

        return self._run(first, wait + IDLE_MARGIN)

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        """One domain, waited for long: the thread's held Watch stream (opened if need be);
        otherwise one WatchMany call (one watch slot on the server, however many agents this process
        follows). A server that predates WatchMany is asked domain by domain."""
        me = threading.get_ident()
        with self._lock:
            held = self._held.pop(me, None)
        if len(since) == 1 and timeout >= HOLD_MIN:
            ((domain, rev),) = since.items()
            return self._one(domain, rev, timeout, held)
        if held is not None:
            held.call.cancel()
        if not since or not self._many:
            return Engine.changes_many(self, since, timeout)  # type: ignore[arg-type]
        return self._watch_many(since, timeout)

    def _one(
        self, domain: str, since: Revision, timeout: float, held: _Held | None
    ) -> dict[str, list[Change]]:
        """The next event of the thread's Watch stream of `domain` (from `since`)."""
        if held is not None and (held.domain != domain or not same_revision(held.through, since)):
            held.call.cancel()  # the follower moved on by itself: follow from there
            held = None
        request = pb.WatchRequest(
            domain=domain,
            since=wire.rev_to_pb(since),
            max_wait_seconds=timeout,  # the stream ends after this long without news
            with_manifests=True,
            with_files=True,
        )

        def open_next(server: Server, _: float) -> tuple[Server, Any, pb.WatchEvent | None]:
            call = server.reader.Watch(request, metadata=self._metadata, timeout=None)
            return server, call, self._next(call)

        try:
            if held is not None:
                server, call, event = held.server, held.call, self._next(held.call)
            else:
                server, call, event = self._run(open_next)
        except grpc.RpcError as exc:  # the held stream broke (or hung): open one again
            if not wire.is_transport_failure(exc):
                raise wire.error_from(exc, "grpc watch") from None
            if held is not None:
                self._pool.failed(held.server, exc)
            server, call, event = self._run(open_next)
        if event is None:  # quiet for `timeout` seconds, or interrupted
            call.cancel()
            return {}
        changes = self._event(event)
        while event is not None and event.continued:  # the rest of the batch
            event = self._next(call)
            if event is None:  # the stream ended inside a batch: follow it again
                call.cancel()
                return {}
            changes += self._event(event)
        if changes:
            with self._lock:
                me = threading.get_ident()
                self._held[me] = _Held(domain, changes[-1].revision, call, server)
        else:
            call.cancel()
        return {domain: changes} if changes else {}

    def _next(self, call: Any) -> pb.WatchEvent | None:
        """The stream's next event; None when it ended quietly or the wait was interrupted.
        A server that hung is found by gRPC's keepalive (a ping unanswered: `Pool.failed`
        ejects it), with no thread of our own to time the wait: an idle watch is one thread."""
        self._enter(call)
        try:
            return next(call)
        except StopIteration:
            return None
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED and self._leave_peek():
                return None
            raise
        finally:
            self._leave()

    def _leave_peek(self) -> bool:
        with self._lock:
            return threading.get_ident() in self._interrupted

    def _watch_many(self, since: Mapping[str, Revision], timeout: float) -> dict[str, list[Change]]:
        wait = max(timeout, 0.0)
        request = pb.WatchManyRequest(
            domains=[pb.DomainSince(domain=d, since=wire.rev_to_pb(r)) for d, r in since.items()],
            max_wait_seconds=wait,
            with_manifests=True,
            with_files=True,
        )

        def call(server: Any, timeout: float) -> list[pb.WatchManyResponse] | None:
            stream = server.reader.WatchMany(request, metadata=self._metadata, timeout=timeout)
            self._enter(stream)
            try:
                return list(stream)
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED and self._leave_peek():
                    return []  # interrupt_wait: nothing yet
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return None
                raise
            finally:
                self._leave()

        replies = self._run(call, wait + IDLE_MARGIN)
        if replies is None:
            self._many = False
            return Engine.changes_many(self, since, timeout)  # type: ignore[arg-type]
        out: dict[str, list[Change]] = {}
        for reply in replies:  # a domain's events in order, across the stream's messages
            for e in reply.events:
                out.setdefault(e.domain, []).extend(self._event(e.event))
        return out

    def _close_watches(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for h in held:
            h.call.cancel()
