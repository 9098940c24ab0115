"""Who made a write and why (docs/governance.md, "Who and why"): the actor recorded with
every version, its message and its commit id, each checked before anything is written."""

from __future__ import annotations

import getpass
import os
import socket

from skillfs.errors import InvalidArgument

#: The longest actor name and commit message kept (longer ones are refused, not cut).
ACTOR_MAX, MESSAGE_MAX = 256, 4096


def default_actor() -> str:
    """`$SKILLFS_ACTOR`, else `user@host`: who a commit made from here is by."""
    named = os.environ.get("SKILLFS_ACTOR", "").strip()
    if named:
        return check_actor(named)
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return check_actor(f"{user}@{socket.gethostname()}")


def check_actor(actor: str) -> str:
    if not isinstance(actor, str) or not actor.strip() or len(actor) > ACTOR_MAX:
        raise InvalidArgument(f"invalid actor {actor!r}: give 1-{ACTOR_MAX} characters")
    if any(ord(c) < 32 for c in actor):
        raise InvalidArgument(f"invalid actor {actor!r}: no control characters")
    return actor.strip()


def agent_actor(agent_id: str, user_id: str) -> str:
    """The actor of an agent's own writes for one user."""
    return f"agent:{agent_id}/{user_id}"


def check_commit_id(commit_id: str) -> str:
    """A caller's commit id (the key that makes a retried commit happen once)."""
    if not isinstance(commit_id, str) or not 0 < len(commit_id) <= 128:
        raise InvalidArgument("a commit id is 1-128 characters")
    return commit_id


def check_message(message: str | None) -> str:
    if message is None:
        return ""
    if not isinstance(message, str) or len(message) > MESSAGE_MAX:
        raise InvalidArgument(
            f"a message or reason is text of at most {MESSAGE_MAX} characters: shorten it"
        )
    return message
