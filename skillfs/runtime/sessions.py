"""The sessions a worker tracks (docs/runtime.md, "Sessions"): by id, bounded, the least
recently used forgotten first, each with its last snapshot.

A snapshot holds its `Session` (runtime/session.py); the worker holds, per session, a
`Tracked`: the session and its last snapshot. So nothing holds a snapshot that holds it
back, and a snapshot dropped with its worker is freed at once (no cycle for the garbage
collector to find).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from skillfs.errors import InvalidArgument
from skillfs.runtime.layers import LayerSkills
from skillfs.runtime.session import Session
from skillfs.runtime.snapshot import Snapshot

#: Sessions a worker keeps by default; the least recently used one is forgotten past it.
MAX_SESSIONS = 1024
#: The longest session id taken (a thread id, a run id, an MCP session id).
MAX_ID = 256


class Tracked:
    """A session as its worker tracks it: with its last snapshot, which the worker returns
    again while nothing it depends on moved (C3)."""

    def __init__(self, session_id: str | None = None) -> None:
        self.session = Session(session_id)
        self.last: Snapshot | None = None
        #: The layer states `last` was made of.
        self.states: tuple[LayerSkills, ...] = ()
        #: The session's loaded skills `last.bound_tools` were bound from (the set object:
        #: `Session` replaces it when it changes, so identity says "the same loads").
        self.bound_from: frozenset[str] | None = None


class Sessions:
    """A worker's sessions by id, at most `limit` of them (least recently used forgotten)."""

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        if not isinstance(limit, int) or limit < 1:
            raise InvalidArgument(f"max_sessions={limit!r}: give a positive number of sessions")
        self.limit = limit
        self._lock = threading.Lock()
        self._by_id: OrderedDict[str, Tracked] = OrderedDict()

    def get(self, session_id: str) -> Tracked:
        """The session `session_id`, made when new (or forgotten), as the most recent."""
        if not isinstance(session_id, str) or not 0 < len(session_id) <= MAX_ID:
            raise InvalidArgument(
                f"session={session_id!r}: give the conversation's id (a thread or run id), "
                f"a non-empty string of at most {MAX_ID} characters"
            )
        with self._lock:
            s = self._by_id.get(session_id)
            if s is None:
                s = self._by_id[session_id] = Tracked(session_id)
                while len(self._by_id) > self.limit:
                    self._by_id.popitem(last=False)
            else:
                self._by_id.move_to_end(session_id)
            return s

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._by_id
