"""`AgentSkills` under the OpenAI Agents SDK's own runner, driven by its `ScriptedModel` (no
network, tracing off): the model calls a skill tool, an edit is published, and the next run
step's instructions show it."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import skillfs
from skillfs.integrations.openai_agents import AgentSkills
from tests.runtime_helpers import md

SHARED = skillfs.Scope.shared("bot")


def test_tool_call_then_an_edit_shows_in_the_next_steps_instructions() -> None:
    set_tracing_disabled(True)
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step one.")})
    kit = AgentSkills(skillfs.Skills(store, "bot", "alice"), base="You are support.")

    def publish_then_read_again(call: object) -> list[object]:
        """The second model turn: an operator publishes meanwhile; the model reads again."""
        store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Refunds, edited.", "Two.")})
        return [
            function_call("read_skill", {"skill_id": "refunds"}, call_id="c2"),
            function_call(
                "load_skill_through_path", {"skill_id": "nope", "path": "x"}, call_id="c3"
            ),
        ]

    model = ScriptedModel(
        [
            [function_call("read_skill", {"skill_id": "refunds"}, call_id="c1")],
            ModelStep.respond(publish_then_read_again),
            [assistant_message("done")],
        ]
    )
    agent = Agent(name="support", instructions=kit.instructions, tools=kit.tools, model=model)
    result = asyncio.run(Runner.run(agent, "refund order 7"))
    assert result.final_output == "done"
    first, second, third = model.calls
    assert first.system_instructions.startswith("You are support.\n\n<available_skills>")
    assert "Handle refunds." in first.system_instructions
    assert {t.name for t in first.tools} == {
        "load_skill_through_path",
        "read_skill",
        "search_skills",
    }
    assert "Step one." in json.dumps(second.input, default=str)  # the tool's answer reached it
    assert "Refunds, edited." in third.system_instructions  # the next step's instructions
    later = json.dumps(third.input, default=str)
    assert "Two." in later and "unknown skill id 'nope'" in later


def test_empty_view_gives_base_instructions_and_no_tools() -> None:
    set_tracing_disabled(True)
    kit = AgentSkills(skillfs.Skills(skillfs.open_store(f"memory://{uuid.uuid4().hex}"), "b", "u"))
    model = ScriptedModel([[assistant_message("ok")]])
    agent = Agent(name="a", instructions=kit.instructions, tools=kit.tools, model=model)
    asyncio.run(Runner.run(agent, "hi"))
    assert model.last_call.system_instructions in ("", None) and not model.last_call.tools


def test_skill_writes_add_the_write_tools_and_the_next_step_sees_the_skill() -> None:
    set_tracing_disabled(True)
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    kit = AgentSkills(skillfs.Skills(store, "bot", "alice", skill_writes="live"))
    files = {"SKILL.md": md("refunds", "Handle refunds.").decode()}
    model = ScriptedModel(
        [
            [function_call("propose_skill", {"name": "refunds", "files": files}, call_id="c1")],
            [assistant_message("done")],
        ]
    )
    agent = Agent(name="a", instructions=kit.instructions, tools=kit.tools, model=model)
    asyncio.run(Runner.run(agent, "remember how refunds work"))
    first, second = model.calls
    assert [t.name for t in first.tools] == ["propose_skill", "skill_manage"]  # empty view
    assert '\\"version\\": 1' in json.dumps(second.input, default=str)
    assert "Handle refunds." in second.system_instructions  # live: seen at the next step
    assert store.manifest(skillfs.Scope.user("bot", "alice"), "refunds").actor == "agent:bot/alice"


def test_the_saa_tool_set_reads_by_name_and_disables_for_the_run() -> None:
    """`Skills(..., tools="saa")`: the SDK gets read_skill (no required argument, so not
    strict) and disable_skill; a disabled skill leaves the next turn's instructions."""
    set_tracing_disabled(True)
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step one.")})
    store.publish(SHARED, "billing", {"SKILL.md": md("billing", "Billing help.", "Bill it.")})
    kit = AgentSkills(skillfs.Skills(store, "bot", "alice", tools="saa"))
    assert [(t.name, t.strict_json_schema) for t in kit.tools] == [
        ("read_skill", False),
        ("disable_skill", False),
        ("load_skill_through_path", True),
    ]
    model = ScriptedModel(
        [
            [function_call("read_skill", {"skill_name": "refunds"}, call_id="c1")],
            [function_call("disable_skill", {"skill_path": "shared/billing"}, call_id="c2")],
            [assistant_message("done")],
        ]
    )
    agent = Agent(name="support", instructions=kit.instructions, tools=kit.tools, model=model)
    asyncio.run(Runner.run(agent, "refund order 7"))
    first, second, third = model.calls
    assert "Billing help." in first.system_instructions
    assert "Step one." in json.dumps(second.input, default=str)
    assert "Billing help." not in third.system_instructions
    assert "Handle refunds." in third.system_instructions


def test_each_conversation_is_its_own_session() -> None:
    """`AgentSkills(session=)` maps a run's context to the worker's session: a skill the
    model disabled in one conversation stays disabled in that conversation's next run and is
    still offered in another's (docs/runtime.md, "Sessions")."""
    set_tracing_disabled(True)
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step one.")})
    store.publish(SHARED, "billing", {"SKILL.md": md("billing", "Billing help.", "Bill it.")})
    kit = AgentSkills(
        skillfs.Skills(store, "bot", "alice", tools="saa"),
        session=lambda ctx: ctx.context["conversation"],
    )

    def run(conversation: str, *steps: list[object]) -> ScriptedModel:
        model = ScriptedModel([*steps, [assistant_message("done")]])
        agent = Agent(name="support", instructions=kit.instructions, tools=kit.tools, model=model)
        asyncio.run(Runner.run(agent, "hi", context={"conversation": conversation}))
        return model

    disable = function_call("disable_skill", {"skill_name": "billing"}, call_id="c1")
    assert "Billing help." not in run("a", [disable]).last_call.system_instructions
    assert "Billing help." not in run("a").last_call.system_instructions  # its next run
    other = run("b").last_call.system_instructions
    assert "Billing help." in other and "Handle refunds." in other
