"""What the reader and admin services share: the store, the tokens, the caches of immutable
things, the limits on open watches and the stop signal. The server holds no other state, so
any number of servers can run over one store (docs/server.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator

from skillfs.auth import Principal, Tokens
from skillfs.errors import InvalidPath
from skillfs.model import Scope
from skillfs.proto import skillfs_pb2 as pb
from skillfs.runtime import Market, Skills, Snapshot
from skillfs.server.metrics import Metrics
from skillfs.server.proofs import BlobProofs, ManifestIndex
from skillfs.server.rpc import Busy
from skillfs.store import Store


def view_scopes(view: pb.View) -> list[Scope]:
    """The store scopes a requested view reads, lowest layer first."""
    if not view.user_id:
        raise InvalidPath("a view needs agent_id and user_id")
    markets = [Scope.market(m) for m in view.markets]
    return [*markets, Scope.shared(view.agent_id), Scope.user(view.agent_id, view.user_id)]


class SkillsCache:
    """One runtime `Skills` per (agent, user, markets) a caller asked for, shared by every call
    for it, so the runtime's followers keep each current and a snapshot costs one revision
    read. The least recently used are closed beyond `size`."""

    def __init__(self, store: Store, size: int = 512) -> None:
        self._store = store
        self._size = size
        self._items: OrderedDict[tuple[str, str, tuple[str, ...]], Skills] = OrderedDict()
        self._lock = threading.Lock()

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
        self.proofs = BlobProofs(tokens, ManifestIndex(store))
        self.skills = SkillsCache(store)
        self.watches = WatchSlots(*limits)
        self.stopping = threading.Event()

    def now(self, principal: Principal, given: float) -> float:
        """The caller's clock for global admins (tools, tests), the server's for others, so a
        writer cannot age another writer's blobs into GC or pin them forever."""
        return given if given and principal.is_global_admin else time.time()

    def close(self) -> None:
        self.stopping.set()
        self.skills.close()
