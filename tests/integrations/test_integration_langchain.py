"""`SkillsMiddleware` under LangChain's own `create_agent` (its graph, tool node and
middleware chain) driven by langchain's fake chat model, no network: the model calls a skill
tool, an operator publishes an edit, and the agent's next step's system message shows it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

import skillfs
from skillfs.integrations.langchain import SkillsMiddleware
from tests.langchain_helpers import ScriptedChat
from tests.runtime_helpers import md

SHARED = skillfs.Scope.shared("bot")
ALICE = skillfs.Scope.user("bot", "alice")
READS = ["load_skill_through_path", "read_skill", "search_skills"]


def call(name: str, args: dict[str, object], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def system(sent: list[BaseMessage]) -> str:
    assert sent[0].type == "system"
    return sent[0].text


def test_a_skill_tool_is_called_and_an_edit_shows_at_the_next_step() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step one.")})

    def script() -> Iterator[AIMessage]:
        yield call("read_skill", {"skill_id": "refunds"}, "c1")
        # the second model call: an operator publishes after its system message was built
        store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Refunds, edited.", "Two.")})
        yield call("read_skill", {"skill_id": "refunds"}, "c2")
        yield call("load_skill_through_path", {"skill_id": "nope", "path": "x"}, "c3")
        yield AIMessage(content="done")

    model = ScriptedChat(messages=script())
    kit = SkillsMiddleware(skillfs.Skills(store, "bot", "alice"))
    agent = create_agent(model, system_prompt="You are support.", middleware=[kit])
    out = agent.invoke({"messages": [HumanMessage("refund order 7")]})
    assert out["messages"][-1].content == "done"
    first, second, third, fourth = model.sent
    assert system(first).startswith("You are support.\n\n<available_skills>")
    assert "Handle refunds." in system(first) and "Handle refunds." in system(second)
    assert "Refunds, edited." in system(third)  # the agent's next step after the publish
    assert system(third) == system(fourth)  # nothing changed: byte-identical, caches stay warm
    assert model.offered == [READS] * 4
    replies = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert ["Step one." in str(m.content) for m in replies] == [True, False, False]
    assert "Two." in str(replies[1].content)
    assert replies[2].status == "error" and "unknown skill id 'nope'" in str(replies[2].content)


def test_an_empty_view_offers_only_the_write_tools_until_the_agent_writes_a_skill() -> None:
    """With `skill_writes="live"` and no skill: no block, no read tools (nothing to name); the
    skill the agent proposes is in the next step's system message and tools (async path)."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    files = {"SKILL.md": md("refunds", "Handle refunds.").decode()}
    model = ScriptedChat(
        messages=iter(
            [call("propose_skill", {"name": "refunds", "files": files}, "c1"), AIMessage("ok")]
        )
    )
    kit = SkillsMiddleware(skillfs.Skills(store, "bot", "alice", skill_writes="live"))
    agent = create_agent(model, middleware=[kit])
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("remember how refunds work")]}))
    first, second = model.sent
    assert first[0].type == "human"  # no system message at all
    assert "Handle refunds." in system(second)
    assert model.offered == [
        ["propose_skill", "skill_manage"],
        [*READS, "propose_skill", "skill_manage"],
    ]
    assert store.manifest(ALICE, "refunds").actor == "agent:bot/alice"


def test_a_threads_loaded_skill_binds_a_host_tool_in_that_thread_only() -> None:
    """A bindable host tool is out of the model's tools until a shared skill naming it is
    loaded in the thread; the next thread of the same user starts without it."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    text = "---\nname: sql\ndescription: Query the database.\nallowed-tools: run_sql\n---\nGo.\n"
    store.publish(SHARED, "sql", {"SKILL.md": text.encode()})

    def run_sql(query: str) -> str:
        """Run a read-only SQL query."""
        return "42"

    def script() -> Iterator[AIMessage]:
        yield call("read_skill", {"skill_id": "sql"}, "c1")
        yield call("run_sql", {"query": "select 42"}, "c2")
        yield AIMessage(content="42")
        yield AIMessage(content="hello")  # the other thread's one step

    model = ScriptedChat(messages=script())
    host = [skillfs.HostTool(name="run_sql", bindable=True)]
    kit = SkillsMiddleware(skillfs.Skills(store, "bot", "alice", host_tools=host))
    agent = create_agent(model, tools=[run_sql], middleware=[kit])
    one = {"configurable": {"thread_id": "t1"}}
    out = agent.invoke({"messages": [HumanMessage("how many?")]}, one)
    assert out["messages"][-1].content == "42"
    agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t2"}})
    assert model.offered == [READS, [*READS, "run_sql"], [*READS, "run_sql"], READS]
    replies = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [str(m.content) for m in replies] == ["Go.\n", "42"]
