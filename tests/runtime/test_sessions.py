"""Sessions (runtime/session.py, docs/runtime.md "Sessions"): one per conversation id, kept
by the worker up to `max_sessions` (least recently used forgotten); what a conversation's
model disables stays in that conversation, and the worker's own session is the default
(issue 31)."""

from __future__ import annotations

import pytest

from skillfs import Skills, Store
from skillfs.errors import InvalidArgument
from skillfs.model import Scope
from tests.runtime_helpers import md, memory_store

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")


def store_with_skills() -> Store:
    store = memory_store()
    store.publish(SHARED, "beta", {"SKILL.md": md("beta", "Shared beta.", "Beta steps.")})
    store.publish(ALICE, "alpha", {"SKILL.md": md("alpha", "Alice's alpha.", "Alpha steps.")})
    return store


def test_a_disabled_skill_stays_in_its_conversation() -> None:
    skills = Skills(store_with_skills(), "bot", "alice", tools="saa")
    one = skills.snapshot(session="thread-1")
    assert one.session == "thread-1" and skills.snapshot().session is None
    assert one.call_tool("disable_skill", {"skill_id": "beta"}).startswith("Skill 'beta'")
    assert "beta" not in skills.snapshot(session="thread-1").prompt()
    # the same user's other conversation, and the worker's own session, still see it
    two = skills.snapshot(session="thread-2")
    assert "beta" in two.prompt() and two.call_tool("read_skill", {"skill_id": "beta"}) == (
        "# beta\nBeta steps.\n"
    )
    assert "beta" in skills.snapshot().prompt()
    assert "was disabled" in skills.snapshot(session="thread-1").call_tool(
        "read_skill", {"skill_id": "beta"}
    )


def test_each_session_keeps_its_own_snapshot_while_nothing_moves() -> None:
    store = store_with_skills()
    skills = Skills(store, "bot", "alice", tools="saa")
    one, two = skills.snapshot(session="a"), skills.snapshot(session="b")
    assert skills.snapshot(session="a") is one and skills.snapshot(session="b") is two
    assert one.merged is two.merged  # same skills, nothing hidden: one prompt computed
    two.call_tool("disable_skill", {"skill_id": "alpha"})
    assert skills.snapshot(session="a") is one
    assert skills.snapshot(session="b").token != two.token
    store.publish(SHARED, "gamma", {"SKILL.md": md("gamma", "Gamma.")})
    assert "gamma" in skills.snapshot(session="a").prompt()
    b = skills.snapshot(session="b")
    assert "gamma" in b.prompt() and "alpha" not in b.prompt()


def test_the_least_recently_used_session_is_forgotten() -> None:
    skills = Skills(store_with_skills(), "bot", "alice", tools="saa", max_sessions=2)
    skills.snapshot(session="old").call_tool("disable_skill", {"skill_id": "beta"})
    skills.snapshot(session="kept").call_tool("disable_skill", {"skill_id": "beta"})
    skills.snapshot(session="kept")  # used again: "old" is now the least recent
    skills.snapshot(session="new")
    assert "beta" not in skills.snapshot(session="kept").prompt()
    assert "beta" in skills.snapshot(session="old").prompt()  # forgotten, then made anew


@pytest.mark.parametrize("bad", ["", "x" * 257, 7])
def test_a_bad_session_id_is_refused(bad: object) -> None:
    skills = Skills(store_with_skills(), "bot", "alice")
    with pytest.raises(InvalidArgument, match="give the conversation's id"):
        skills.snapshot(session=bad)  # type: ignore[arg-type]


def test_max_sessions_must_be_positive() -> None:
    with pytest.raises(InvalidArgument, match="max_sessions=0"):
        Skills(memory_store(), "bot", "alice", max_sessions=0)
