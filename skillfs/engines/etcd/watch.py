"""The etcd engine's change log (docs/engine-etcd.md, "Change log"): `changes` and
`changes_many` read what changed with range reads and wait for news on one watch stream.

- **A look** reads every followed domain's rev key in one linearizable transaction (128 per
  transaction). A domain whose counter moved is **caught up by range reads**: one
  transaction reads the domain's keys and its history keys written after `since`
  (`min_mod_revision`), from which every manifest put since then is rebuilt in order. A
  watch from a past revision would instead wait for etcd's 100 ms sync loop.
- **The wait** is one gRPC watch stream per engine (`RevWatch`), carrying one watch id per
  followed domain, on its rev key only (every commit puts it, a wipe deletes it). An event
  only wakes the waiters; the next look decides. Threads and connections do not grow with
  the number of domains followed.

Rebuilding the log from the keys: version 1 of a skill was written at its live key's
`create_revision`; version w+1 at the `mod_revision` of history key w (the commit of w+1
copies w there), and the current version at the live key's `mod_revision` too (a retention
policy may have dropped that copy already); the manifest of a version is its history copy,
or the live one. A `since`
older than etcd's compaction point still means reset (as a watch from it would).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc
from etcd3 import etcdrpc

from skillfs.engines.base import must_reset, reset_to
from skillfs.engines.etcd import client as ec
from skillfs.model import Change, Manifest, Revision, Scope
from skillfs.model.names import SIDE_DIRS

log = logging.getLogger(__name__)

#: A domain nobody asked about for this long loses its watch id.
IDLE_WATCH = 60.0
#: Pause before opening the watch stream again after it failed.
REOPEN_DELAY = 0.2


def epoch(cluster_id: int, created: int) -> str:
    """An epoch names one history of a domain: this cluster, this creation of the rev key."""
    return f"{cluster_id:016x}-{created}"


def revision(cluster_id: int, rev_kv: Any) -> Revision | None:
    """A domain's revision from its rev key (None: the key is absent)."""
    if rev_kv is None:
        return None
    return Revision(epoch=epoch(cluster_id, rev_kv.create_revision), counter=rev_kv.mod_revision)


def scope_of(domain: str, rest: str) -> tuple[Scope, str] | None:
    """The scope and skill of a key below `<domain>/` (`shared/skills/x`), None for others."""
    kind, _, ident = domain.partition("/")
    parts = rest.split("/")
    if len(parts) > 2 and parts[-2] in SIDE_DIRS:  # an entry `_drafts/<name>` is one skill
        parts = [*parts[:-2], f"{parts[-2]}/{parts[-1]}"]
    if kind == "markets" and len(parts) == 2 and parts[0] == "skills":
        return Scope.market(ident), parts[1]
    if kind == "agents" and len(parts) == 3 and parts[:2] == ["shared", "skills"]:
        return Scope.shared(ident), parts[2]
    if kind == "agents" and len(parts) == 4 and parts[0] == "users" and parts[2] == "skills":
        return Scope.user(ident, parts[1]), parts[3]
    return None


class RevWatch:
    """One watch stream of an engine: a watch id per followed domain's rev key, created on
    first use from the store revision the caller's look read (so nothing after it is
    missed); any event bumps `generation` and wakes the waiters."""

    def __init__(self, client: ec.EtcdClient, rev_key: Callable[[str], bytes]) -> None:
        self._etcd = client
        self._rev_key = rev_key
        self._cond = threading.Condition()
        self.generation = 0
        self._ids: dict[str, int] = {}  # domain -> watch id
        self._pending: list[str] = []  # domains whose create request awaits its answer
        self._used: dict[str, float] = {}
        self._requests: queue.Queue[Any] | None = None
        self._call: Any = None
        self._failed_at = -float("inf")
        self.streams_opened = 0  # for tests and metrics

    @property
    def alive(self) -> bool:
        return self._requests is not None

    def follow(self, domains: Sequence[str], start: int) -> None:
        """Make sure each domain has a watch id (new ones from revision `start`)."""
        now = time.monotonic()
        with self._cond:
            if self._requests is None:
                if now - self._failed_at < REOPEN_DELAY:
                    return
                self._open()
            requests = self._requests
            assert requests is not None
            for d in domains:
                self._used[d] = now
                if d not in self._ids and d not in self._pending:
                    self._pending.append(d)
                    create = etcdrpc.WatchCreateRequest(key=self._rev_key(d), start_revision=start)
                    requests.put(etcdrpc.WatchRequest(create_request=create))
            for d, used in list(self._used.items()):
                if now - used > IDLE_WATCH and d in self._ids:
                    cancel = etcdrpc.WatchCancelRequest(watch_id=self._ids.pop(d))
                    requests.put(etcdrpc.WatchRequest(cancel_request=cancel))
                    del self._used[d]

    def wait(self, seen: int, timeout: float) -> None:
        """Until `generation` moves past `seen` (or the stream is down: a short pause)."""
        with self._cond:
            if self._requests is None:
                timeout = min(timeout, REOPEN_DELAY)
            self._cond.wait_for(lambda: self.generation != seen, timeout)

    def wake(self) -> None:
        """Every waiter looks again now."""
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def _open(self) -> None:
        """Open the stream on the endpoint the client uses now; runs under the lock."""
        ep = self._etcd.endpoints[self._etcd.endpoint_index]
        requests: queue.Queue[Any] = queue.Queue()
        try:
            md = self._etcd.metadata(ep)
            call = ep.watch.Watch(iter(requests.get, None), metadata=md)
        except grpc.RpcError as exc:  # a look will rotate and report the endpoint
            self._failed(exc)
            return
        self._requests, self._call = requests, call
        self._ids, self._pending = {}, []
        self.streams_opened += 1
        threading.Thread(
            target=self._read, args=(call, requests), name="skillfs-etcd-watch", daemon=True
        ).start()

    def _read(self, call: Iterator[Any], requests: queue.Queue[Any]) -> None:
        try:
            for response in call:
                with self._cond:
                    if response.created and self._pending:
                        domain = self._pending.pop(0)
                        if not response.canceled:
                            self._ids[domain] = response.watch_id
                    elif response.canceled or response.compact_revision:
                        self._ids = {d: i for d, i in self._ids.items() if i != response.watch_id}
                    if response.events or response.canceled or response.compact_revision:
                        self.generation += 1
                        self._cond.notify_all()
        except grpc.RpcError as exc:
            with self._cond:
                if self._requests is requests:
                    self._failed(exc)
            return
        with self._cond:
            if self._requests is requests:
                self._failed(None)

    def _failed(self, exc: BaseException | None) -> None:
        """The stream is gone: every waiter looks again; the next `follow` reopens it."""
        if exc is not None:  # one line: grpc's own text of a call spans several
            said = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else exc
            log.warning(
                "etcd watch stream of %s ended (%s); reopened at the next follow",
                self._etcd.url,
                said,
            )
        if self._requests is not None:
            self._requests.put(None)
        self._requests, self._call = None, None
        self._ids, self._pending = {}, []
        self._failed_at = time.monotonic()
        self.generation += 1
        self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            call = self._call
            self._failed(None)
        if call is not None:
            call.cancel()


class ChangeLog:
    """`changes`/`changes_many` of one engine: looks by range reads, waits on `RevWatch`."""

    def __init__(self, client: ec.EtcdClient, key: Callable[[str], bytes]) -> None:
        self._etcd = client
        self._key = key
        self.watch = RevWatch(client, lambda d: key(f"{d}/rev"))
        self._wakes = 0  # `wake_waits` calls: a wait that sees it move answers

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        deadline = time.monotonic() + timeout
        wakes = self._wakes
        while True:
            seen = self.watch.generation
            found, store_revision = self.look(since)
            left = deadline - time.monotonic()
            if found or left <= 0 or not since or self._wakes != wakes:
                return found
            self.watch.follow(list(since), store_revision + 1)
            self.watch.wait(seen, left)

    def wake_waits(self) -> None:
        self._wakes += 1
        self.watch.wake()

    def look(self, since: Mapping[str, Revision]) -> tuple[dict[str, list[Change]], int]:
        """The domains with news, and the store revision the rev keys were read at."""
        out: dict[str, list[Change]] = {}
        store_revision = 0
        domains = list(since)
        for part in self._etcd.packed(domains, lambda d: len(self._key(f"{d}/rev"))):
            response = self._etcd.txn(
                etcdrpc.TxnRequest(success=[ec.get_op(self._key(f"{d}/rev")) for d in part])
            )
            cluster = response.header.cluster_id
            store_revision = max(store_revision, response.header.revision)
            for d, r in zip(part, response.responses, strict=True):
                current = revision(cluster, ec.first_kv(r))
                if must_reset(current, since[d]):
                    out[d] = reset_to(current)
                elif current is not None and current.counter > since[d].counter:
                    found = self.catch_up(d, since[d])
                    if found:
                        out[d] = found
        return out, store_revision

    def catch_up(self, domain: str, since: Revision) -> list[Change]:
        """Every manifest put of `domain` after `since`, in order, by range reads (one
        transaction); a reset when `since` was compacted or the rev key was re-created."""
        prefix, history = self._key(f"{domain}/"), self._key(f"history/{domain}/")
        after = since.counter + 1

        def changed(p: bytes) -> Any:
            end = ec.prefix_end(p)
            request = etcdrpc.RangeRequest(key=p, range_end=end, min_mod_revision=after)
            return etcdrpc.RequestOp(request_range=request)

        rev_key = self._key(f"{domain}/rev")
        probe = etcdrpc.RangeRequest(key=rev_key, revision=after, count_only=True)
        request = etcdrpc.TxnRequest(
            success=[changed(prefix), changed(history), etcdrpc.RequestOp(request_range=probe)]
        )
        try:
            response = self._etcd.txn(request)
        except (ec.Compacted, ec.ResponseTooLarge):  # the log no longer reaches back: reload
            now = self._etcd.range(etcdrpc.RangeRequest(key=self._key(f"{domain}/rev")))
            return reset_to(revision(now.header.cluster_id, now.kvs[0] if now.kvs else None))
        cluster = response.header.cluster_id
        live = response.responses[0].response_range.kvs
        rev_kv = next((kv for kv in live if kv.key == prefix + b"rev"), None)
        if rev_kv is None or epoch(cluster, rev_kv.create_revision) != since.epoch:
            return reset_to(revision(cluster, rev_kv))  # wiped or re-created meanwhile
        old = response.responses[1].response_range.kvs
        return rebuild(domain, since, prefix, history, live, old)

    def close(self) -> None:
        self.watch.close()


def rebuild(
    domain: str, since: Revision, prefix: bytes, history: bytes, live: Any, old: Any
) -> list[Change]:
    """The changes after `since` from the live keys and history keys written after it."""
    copies: dict[tuple[Scope, str], dict[int, Any]] = {}
    for kv in old:
        path, _, version = kv.key[len(history) :].decode().rpartition("/")
        found = scope_of(domain, path)
        if found is not None:
            copies.setdefault(found, {})[int(version)] = kv
    out: list[tuple[int, bytes, Change]] = []
    for kv in live:
        found = scope_of(domain, kv.key[len(prefix) :].decode())
        if found is None:
            continue
        scope, skill = found
        current = Manifest.from_json(kv.value)
        held = copies.get(found, {})
        written = {w + 1: copy.mod_revision for w, copy in held.items()}
        if kv.create_revision >= since.counter + 1:
            written[1] = kv.create_revision
        # the live key was written after `since` (the range asked so): by its current
        # version's commit, dated so also when retention dropped the copy that commit wrote
        written.setdefault(current.version, kv.mod_revision)
        for version, at in written.items():
            m = current if version == current.version else None
            if m is None and version in held:
                m = Manifest.from_json(held[version].value)
            if m is None:  # a history copy dropped by retention: nothing to report it by
                continue
            change = Change(
                revision=Revision(epoch=since.epoch, counter=at),
                op="remove" if m.deleted else "put",
                scope=scope,
                skill=skill,
                version=version,
                actor=m.actor,
                message=m.message,
            )
            out.append((at, kv.key, change))
    out.sort(key=lambda item: (item[0], item[1]))
    return [change for _, _, change in out]


# ---------------------------------------------------------------------- the domain index


def indexed_domains(client: ec.EtcdClient, key: Callable[[str], bytes]) -> list[str] | None:
    """Every domain of the index (`domains/<domain>`, one keys-only range per page), or None
    while the index was never built (the marker `domains` is absent: a store written before
    the index existed)."""
    prefix = key("domains/")
    request = etcdrpc.TxnRequest(
        success=[
            ec.get_op(key("domains")),
            etcdrpc.RequestOp(
                request_range=etcdrpc.RangeRequest(
                    key=prefix, range_end=ec.prefix_end(prefix), keys_only=True,
                    limit=client.page_size,
                )
            ),
        ]
    )  # fmt: skip
    response = client.txn(request)
    if ec.first_kv(response.responses[0]) is None:
        return None
    page = response.responses[1].response_range
    out = [kv.key[len(prefix) :].decode() for kv in page.kvs]
    while page.more and page.kvs:
        start = page.kvs[-1].key + b"\0"
        page = client.range(
            etcdrpc.RangeRequest(
                key=start, range_end=ec.prefix_end(prefix), keys_only=True,
                limit=client.page_size, revision=response.header.revision,
            )
        )  # fmt: skip
        out += [kv.key[len(prefix) :].decode() for kv in page.kvs]
    return sorted(out)


def index_request(key: Callable[[str], bytes], domain: str) -> Any:
    """Put `domain` in the index; in an empty store also the marker (the index is complete)."""
    put = ec.put_op(key(f"domains/{domain}"), b"")

    def empty(prefix: bytes) -> Any:  # true when no key of the range exists
        return etcdrpc.Compare(
            key=prefix, range_end=ec.prefix_end(prefix), target=etcdrpc.Compare.VERSION,
            result=etcdrpc.Compare.EQUAL, version=0,
        )  # fmt: skip

    return etcdrpc.TxnRequest(
        compare=[empty(key("agents/")), empty(key("markets/"))],
        success=[put, ec.put_op(key("domains"), b"1")],
        failure=[put],
    )


def build_index(
    client: ec.EtcdClient, key: Callable[[str], bytes], domains: Sequence[str]
) -> list[str]:
    """Index the domains found by walking the key space, then put the marker."""
    for part in client.packed(list(domains), lambda d: len(key(f"domains/{d}"))):
        client.txn(etcdrpc.TxnRequest(success=[ec.put_op(key(f"domains/{d}"), b"") for d in part]))
    client.txn(etcdrpc.TxnRequest(success=[ec.put_op(key("domains"), b"1")]))
    return sorted(domains)
