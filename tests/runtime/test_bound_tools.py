"""Host tools bound to skills (runtime/bound_tools.py, docs/runtime.md "Tools bound to
skills"): a bindable tool is offered in a session after the model loads a skill of a trusted
layer naming it, in that session only, until the skill leaves the view; a user-scope skill
naming it activates nothing (issue 31)."""

from __future__ import annotations

import pytest

from skillfs import HostTool, Market, Skills, Store
from skillfs.errors import InvalidArgument
from skillfs.model import Scope
from skillfs.runtime.bound_tools import allowed_tools
from tests.runtime_helpers import memory_store

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
TOOLS = [HostTool(name="search"), HostTool(name="run_sql", bindable=True)]
TOOLS += [HostTool(name="send_mail", bindable=True)]


def skill(name: str, tools: str, field: str = "allowed-tools") -> dict[str, bytes]:
    text = f"---\nname: {name}\ndescription: {name} things.\n{field}: {tools}\n---\nSteps.\n"
    return {"SKILL.md": text.encode()}


def store_with_skills() -> Store:
    store = memory_store()
    store.publish(SHARED, "sql", skill("sql", "run_sql Read"))
    store.publish(SHARED, "mail", skill("mail", "[send_mail]", "allowedTools"))
    store.publish(ALICE, "sneaky", skill("sneaky", "run_sql send_mail"))
    return store


def worker(store: Store, **kw: object) -> Skills:
    return Skills(store, "bot", "alice", host_tools=TOOLS, **kw)  # type: ignore[arg-type]


def test_a_loaded_skill_binds_its_tools_in_its_session_only() -> None:
    skills = worker(store_with_skills())
    first = skills.snapshot(session="t1")
    assert first.host_tools == ("search",) and first.bound_tools == ()
    first.call_tool("load_skill_through_path", {"skill_id": "sql", "path": "SKILL.md"})
    assert first.host_tools == ("search",)  # a snapshot never changes (C4)
    after = skills.snapshot(session="t1")
    assert after.bound_tools == ("run_sql",) and after.host_tools == ("search", "run_sql")
    assert after.token != first.token
    assert skills.snapshot(session="t1") is after  # nothing moved: the same object
    # another conversation of the same user, and the worker's own session: nothing bound
    assert skills.snapshot(session="t2").host_tools == ("search",)
    assert skills.snapshot().host_tools == ("search",)
    after.call_tool("read_skill", {"skill_id": "mail"})  # SAA's spelling, a YAML list
    assert skills.snapshot(session="t1").host_tools == ("search", "run_sql", "send_mail")


def test_a_bound_tool_leaves_with_its_skill() -> None:
    store = store_with_skills()
    skills = worker(store, tools="saa")
    skills.snapshot(session="t").call_tool("read_skill", {"skill_id": "sql"})
    skills.snapshot(session="t").call_tool("read_skill", {"skill_id": "mail"})
    assert skills.snapshot(session="t").bound_tools == ("run_sql", "send_mail")
    # disabled for the session
    skills.snapshot(session="t").call_tool("disable_skill", {"skill_id": "mail"})
    assert skills.snapshot(session="t").bound_tools == ("run_sql",)
    # an edit that no longer names it
    store.publish(SHARED, "sql", skill("sql", "Read"))
    assert skills.snapshot(session="t").host_tools == ("search",)
    # deleted, then back: not loaded again until the model loads it
    store.publish(SHARED, "sql", skill("sql", "run_sql"))
    skills.snapshot(session="t").call_tool("read_skill", {"skill_id": "sql"})
    assert skills.snapshot(session="t").bound_tools == ("run_sql",)
    store.delete(SHARED, "sql")
    assert skills.snapshot(session="t").bound_tools == ()
    store.publish(SHARED, "sql", skill("sql", "run_sql"))
    assert skills.snapshot(session="t").bound_tools == ()


def test_a_user_scope_skill_naming_a_bound_tool_activates_nothing() -> None:
    store = store_with_skills()
    skills = worker(store)
    snap = skills.snapshot(session="t")
    assert snap.call_tool("read_skill", {"skill_id": "sneaky"}) == "Steps.\n"
    assert skills.snapshot(session="t").host_tools == ("search",)
    # a user's override of a shared skill is the user's: it binds nothing either
    store.publish(ALICE, "sql", skill("sql", "run_sql"))
    skills.snapshot(session="t").call_tool("read_skill", {"skill_id": "sql"})
    assert skills.snapshot(session="t").bound_tools == ()
    # nor can an operator mark the user's scope trusted
    with pytest.raises(InvalidArgument, match="user's scope"):
        worker(store, trusted_layers=[str(ALICE)])


def test_trusted_layers_choose_which_layers_bind() -> None:
    store = store_with_skills()
    store.publish(Scope.market("acme"), "crm", skill("crm", "send_mail"))
    default = worker(store, layers=[Market("acme")])
    default.snapshot(session="t").call_tool("read_skill", {"skill_id": "crm"})
    assert default.snapshot(session="t").bound_tools == ("send_mail",)
    shared_only = worker(store, layers=[Market("acme")], trusted_layers=[str(SHARED)])
    shared_only.snapshot(session="t").call_tool("read_skill", {"skill_id": "crm"})
    assert shared_only.snapshot(session="t").bound_tools == ()
    with pytest.raises(InvalidArgument, match="no layer is labelled 'market:nope'"):
        worker(store, trusted_layers=["market:nope"])


def test_allowed_tools_spellings_and_scoped_entries() -> None:
    assert allowed_tools({"allowed-tools": "Read, Grep Bash(git add:*) run_sql"}) == {
        "Read",
        "Grep",
        "run_sql",
    }
    assert allowed_tools({"allowed_tools": ["a", "b c", 3]}) == {"a", "b", "c"}
    assert allowed_tools({"metadata": {"allowed-tools": "x"}}) == frozenset()


def test_host_tools_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="registered twice: run_sql"):
        Skills(memory_store(), "bot", "alice", host_tools=[TOOLS[1], TOOLS[1]])
    with pytest.raises(ValueError, match="give the name the model calls it by"):
        HostTool(name="two words")


def test_a_step_where_nothing_moved_reads_no_frontmatter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-step path: the bound tools are the last snapshot's while the skills and the
    session's loads are the same; a new load binds anew."""
    from skillfs.runtime import bound_tools

    reads: list[object] = []
    real = bound_tools.allowed_tools
    monkeypatch.setattr(bound_tools, "allowed_tools", lambda fm: reads.append(fm) or real(fm))
    skills = worker(store_with_skills())
    skills.snapshot(session="t").call_tool("read_skill", {"skill_id": "sql"})
    bound = skills.snapshot(session="t")
    assert bound.bound_tools == ("run_sql",) and len(reads) == 1
    for _ in range(3):
        assert skills.snapshot(session="t") is bound
    assert len(reads) == 1
    bound.call_tool("read_skill", {"skill_id": "mail"})
    assert skills.snapshot(session="t").bound_tools == ("run_sql", "send_mail")
    assert len(reads) == 3
