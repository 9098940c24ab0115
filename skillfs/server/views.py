"""The views the view RPCs (`Snapshot`, `Prompt`, `LoadSkillThroughPath`) are served from: one
runtime `Skills` per (agent, user, markets) asked for, kept current by the store's followers
(one per domain in the process, shared by every view of it and by MCP sessions, fed by the
store's one change feed, which the hub follows too) and bounded by an estimate of their
memory. A view starts no thread: its usage counts are flushed by the server; evicting the
last view of a domain stops following it (docs/server.md, "The serving model")."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from skillfs.api import Store
from skillfs.errors import InvalidArgument
from skillfs.model import Scope
from skillfs.model.names import check_id
from skillfs.model.pins import Pins
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.runtime import Market, Skills, Snapshot
from skillfs.runtime.usage import UsageRecorder

#: Markets one view may name (each is a layer and a domain to follow).
MAX_VIEW_MARKETS = 32
#: Rough bytes a view costs: its objects, plus per skill its merged entry and prompt line
#: (the manifests themselves are the followers', shared by every view of a domain).
VIEW_BYTES = 8 * 1024
SKILL_BYTES = 2 * 1024

#: (agent, user, markets, environment: "" for none, pins).
Key = tuple[str, str, tuple[str, ...], str, Pins]


def view_key(view: pb.View) -> Key:
    """The view a request names: markets deduplicated (first place kept) and capped, so a
    request naming one market many times costs what naming it once does; the environment
    staged rollouts see and the labels the worker is pinned to (docs/governance.md)."""
    if not view.user_id:
        raise InvalidArgument("a view needs agent_id and user_id")
    markets = tuple(dict.fromkeys(view.markets))
    if len(markets) > MAX_VIEW_MARKETS:
        raise InvalidArgument(
            f"a view names {len(markets)} markets: at most {MAX_VIEW_MARKETS} (MAX_VIEW_MARKETS)"
        )
    for m in markets:
        check_id("market", m)
    environment = check_id("environment", view.environment) if view.environment else ""
    agent, user = check_id("agent", view.agent_id), check_id("user", view.user_id)
    return agent, user, markets, environment, Pins.parse(view.pins)


def view_scopes(key: Key) -> list[Scope]:
    """The store scopes a view reads, lowest layer first."""
    agent, user, markets, _, _ = key
    return [*(Scope.market(m) for m in markets), Scope.shared(agent), Scope.user(agent, user)]


@dataclass(eq=False)
class _View:
    skills: Skills
    weight: int = VIEW_BYTES


class Views:
    """The views asked for, least recently used dropped beyond `max_bytes` (estimated)."""

    def __init__(self, store: Store, max_bytes: int) -> None:
        self._store = store
        self.max_bytes = max_bytes
        self._items: OrderedDict[Key, _View] = OrderedDict()
        self._weight = 0
        self._usage: dict[str, tuple[UsageRecorder, int]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def followed(self) -> list[str]:
        """The domains the views follow (each through the store's one follower of it)."""
        with self._lock:
            views = [v.skills for v in self._items.values()]
        return list(dict.fromkeys(f.domain for skills in views for f in skills.followers))

    def snapshot(self, key: Key) -> Snapshot:
        """The view's snapshot now (C3: one revision read); blocks on the store."""
        with self._lock:
            view = self._items.get(key)
            if view is not None:
                self._items.move_to_end(key)
            else:
                view = self._items[key] = _View(self._open(key))
                self._weight += view.weight
        snap = view.skills.snapshot()
        weight = VIEW_BYTES + SKILL_BYTES * len(snap.skills)
        with self._lock:
            if self._items.get(key) is view:
                self._weight += weight - view.weight
                view.weight = weight
            evicted = self._evict()
        for old in evicted:
            old.close()  # untracks its scopes, writes its pending usage counts
        return snap

    def _open(self, key: Key) -> Skills:
        agent, user, markets, environment, pins = key
        self._usage[agent] = (self._recorder(agent), self._usage.get(agent, (None, 0))[1] + 1)
        return Skills(
            self._store,
            agent,
            user,
            [Market(m) for m in markets],
            environment=environment or None,
            pins=pins,
            usage=self._usage[agent][0],
        )

    def _recorder(self, agent: str) -> UsageRecorder:
        held = self._usage.get(agent)
        return held[0] if held else UsageRecorder(self._store, agent, background=False)

    def _evict(self) -> list[Skills]:
        """Drop least recently used views beyond the budget (the newest always stays);
        their recorders are released under the lock (closing a view releases its scopes
        from the store's followers)."""
        out: list[Skills] = []
        while self._weight > self.max_bytes and len(self._items) > 1:
            _, view = self._items.popitem(last=False)
            self._weight -= view.weight
            out.append(view.skills)
            self._release(view.skills)
        return out

    def _release(self, skills: Skills) -> None:
        recorder, refs = self._usage[skills.agent_id]
        if refs > 1:
            self._usage[skills.agent_id] = (recorder, refs - 1)
        else:
            del self._usage[skills.agent_id]

    def flush_usage(self) -> None:
        """Write every view's pending load counts (the server calls this periodically)."""
        with self._lock:
            recorders = [r for r, _ in self._usage.values()]
        for r in recorders:
            r.flush()

    def close(self) -> None:
        with self._lock:
            items = [v.skills for v in self._items.values()]
            for skills in items:
                self._release(skills)
            self._items.clear()
            self._weight = 0
        for skills in items:
            skills.close()
