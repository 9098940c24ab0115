"""What one conversation changed of its view: the skills its model loaded and disabled
(docs/runtime.md, "Sessions").

A conversation is named by the host or its framework (a thread or run id) and given to
`Skills.snapshot(session=...)`; the worker keeps a bounded number of sessions, the least
recently used forgotten first. Without an id a snapshot is of the worker's own session, so
a worker made per conversation keeps working as before. Nothing of one session reaches
another: each has its own loaded and hidden skills, and its own last snapshot.

A snapshot holds its `Session`; the worker holds, per session, a `Tracked`: the session and
its last snapshot. So nothing holds a snapshot that holds it back, and a snapshot dropped
with its worker is freed at once (no cycle for the garbage collector to find).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from skillfs.errors import InvalidArgument

if TYPE_CHECKING:
    from skillfs.runtime.layers import LayerSkills
    from skillfs.runtime.snapshot import Snapshot

#: Sessions a worker keeps by default; the least recently used one is forgotten past it.
MAX_SESSIONS = 1024
#: The longest session id taken (a thread id, a run id, an MCP session id).
MAX_ID = 256


class Session:
    """One conversation's changes to the view: skills loaded by the model (which may bind
    host tools, docs/runtime.md "Tools bound to skills") and skills it hid."""

    def __init__(self, session_id: str | None = None) -> None:
        #: The host's id for the conversation; None: a worker's own session.
        self.id = session_id
        self._lock = threading.Lock()
        # Both replaced, never changed in place: a snapshot compares them with what it was
        # built for.
        #: Skill ids the model hid for the rest of the conversation (`disable_skill`).
        self.hidden: frozenset[str] = frozenset()
        #: Skill ids the model loaded, in the view at the last snapshot.
        self.loaded: frozenset[str] = frozenset()

    def hide(self, skill_id: str) -> None:
        with self._lock:
            self.hidden = self.hidden | {skill_id}
            self.loaded = self.loaded - {skill_id}

    def load(self, skill_id: str) -> None:
        if skill_id in self.loaded:
            return
        with self._lock:
            self.loaded = self.loaded | {skill_id}

    def keep_loaded(self, in_view: frozenset[str]) -> frozenset[str]:
        """Forget loads of skills that left the view (deleted, disabled, rolled out of the
        user's cohort): a skill back later is not loaded until the model loads it again."""
        with self._lock:
            if not self.loaded <= in_view:
                self.loaded = self.loaded & in_view
            return self.loaded


class Tracked:
    """A session as its worker tracks it: with its last snapshot, which the worker returns
    again while nothing it depends on moved (C3)."""

    def __init__(self, session_id: str | None = None) -> None:
        self.session = Session(session_id)
        self.last: Snapshot | None = None
        #: The layer states `last` was made of.
        self.states: tuple[LayerSkills, ...] = ()


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
