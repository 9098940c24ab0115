"""What one conversation changed of its view: the skills its model disabled
(docs/runtime.md, "Tool sets": `disable_skill`).

A session here is one `Skills` worker: a host makes one per conversation (a thread or run),
and what the model disables stays hidden from that worker's snapshots until it is closed.
Another worker of the same user, another conversation, sees every skill.
"""

from __future__ import annotations

import threading


class Session:
    """Skill ids the model hid for the rest of the conversation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Replaced, never changed in place: a snapshot compares it with what it was built for.
        self.hidden: frozenset[str] = frozenset()

    def hide(self, skill_id: str) -> None:
        with self._lock:
            self.hidden = self.hidden | {skill_id}
