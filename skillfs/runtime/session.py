"""What one conversation changed of its view: the skills its model loaded and disabled
(docs/runtime.md, "Sessions").

A conversation is named by the host or its framework (a thread or run id) and given to
`Skills.snapshot(session=...)`; the worker keeps a bounded number of sessions, the least
recently used forgotten first. Without an id a snapshot is of the worker's own session, so
a worker made per conversation keeps working as before. Nothing of one session reaches
another: each has its own loaded and hidden skills, and its own last snapshot.

A snapshot holds its `Session`; the worker tracks the sessions (runtime/sessions.py).
"""

from __future__ import annotations

import threading


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
