"""`SkillfsLoader` and `skill_tools` under AgentScope's own `Agent` (its ReAct loop, Toolkit,
`Skill` tool and permission engine), driven by a scripted `ChatModelBase` as AgentScope's own
tests drive it (their MockModel), no network: the model reads a skill with AgentScope's
`Skill` tool and loads a file with a skill tool, an operator publishes an edit, and the
agent's next step's system prompt shows it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("agentscope", reason="the AgentScope adapter needs skillfs[agentscope]")

from agentscope.agent import Agent, InjectionConfig
from agentscope.credential import CredentialBase
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg, TextBlock, ToolCallBlock, UserMsg
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.tool import Toolkit

import skillfs
from skillfs.integrations.agentscope import SkillfsLoader, skill_tools
from tests.runtime_helpers import md

SHARED = skillfs.Scope.shared("bot")
READS = ["load_skill_through_path", "read_skill", "search_skills"]


class _Credential(CredentialBase):
    @classmethod
    def get_chat_model_class(cls) -> type[ChatModelBase]:
        return ScriptedModel


class ScriptedModel(ChatModelBase):
    """Answers the scripted responses in turn; `sent` holds each call's messages, `offered`
    the tool names it was given."""

    class Parameters(BaseModel):
        pass

    def __init__(self, script: Iterator[ChatResponse]) -> None:
        super().__init__(_Credential(), "scripted", self.Parameters(), stream=False)
        self.formatter = OpenAIChatFormatter()  # real models have one; the agent reads it
        self.script = script
        self.sent: list[list[Msg]] = []
        self.offered: list[list[str]] = []

    async def _call_api(
        self, model_name: str, messages: list[Msg], tools: list[dict] | None = None, **kw: Any
    ) -> ChatResponse:
        self.sent.append(list(messages))
        self.offered.append([t["function"]["name"] for t in tools or []])
        return next(self.script)


def call(name: str, args: dict[str, object], call_id: str) -> ChatResponse:
    block = ToolCallBlock(id=call_id, name=name, input=json.dumps(args))
    return ChatResponse(content=[block], is_last=True)


def text(said: str) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=said)], is_last=True)


def system(sent: list[Msg]) -> str:
    assert sent[0].role == "system"
    return sent[0].get_text_content() or ""


def results(agent: Agent) -> list[tuple[str, str]]:
    """(state, text) of each tool result in the agent's context, in order."""
    return [
        (b.state, "".join(x.text for x in b.output if isinstance(x, TextBlock)))
        for m in agent.state.context
        for b in m.get_content_blocks("tool_result")
    ]


def agent_for(model: ScriptedModel, toolkit: Toolkit) -> Agent:
    return Agent(
        name="support",
        system_prompt="You are support.",
        model=model,
        toolkit=toolkit,
        injection_config=InjectionConfig(inject_runtime_state=False),
    )


def test_a_skill_is_read_and_an_edit_shows_at_the_next_step() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    files = {"SKILL.md": md("refunds", "Handle refunds.", "Step one."), "policy.md": b"30 days."}
    store.publish(SHARED, "refunds", files)

    def script() -> Iterator[ChatResponse]:
        yield call("Skill", {"skill": "refunds"}, "c1")
        # the second model call: an operator publishes after its system prompt was built
        store.publish(SHARED, "refunds", {**files, "SKILL.md": md("refunds", "Edited.", "Two.")})
        yield call("load_skill_through_path", {"skill_id": "refunds", "path": "policy.md"}, "c2")
        yield call("Skill", {"skill": "refunds"}, "c3")
        yield call("load_skill_through_path", {"skill_id": "nope", "path": "x"}, "c4")
        yield text("done")

    model = ScriptedModel(script())
    skills = skillfs.Skills(store, "bot", "alice")
    toolkit = Toolkit(tools=skill_tools(skills), skills_or_loaders=[SkillfsLoader(skills)])
    agent = agent_for(model, toolkit)
    reply = asyncio.run(agent.reply(UserMsg("user", "refund order 7")))
    assert reply.get_text_content() == "done"
    first, second, third, fourth, fifth = model.sent
    assert system(first).startswith("You are support.\n<agent-skills>")
    assert "<name>refunds</name>" in system(first) and "<dir>shared/refunds</dir>" in system(first)
    assert "Handle refunds." in system(first) and "Handle refunds." in system(second)
    assert "Edited." in system(third)  # the agent's next step after the publish
    assert system(third) == system(fourth) == system(fifth)  # unchanged: byte-identical
    assert model.offered == [["Skill", *READS]] * 5
    *read, (state, error) = results(agent)
    assert read == [
        ("success", "# refunds\nStep one.\n"),
        ("success", "30 days."),
        ("success", "# refunds\nTwo.\n"),  # AgentScope's Skill tool reads the edited version
    ]
    assert state == "error" and "unknown skill id 'nope'" in error


def test_materialized_skills_are_listed_where_the_sandbox_sees_them(tmp_path: Path) -> None:
    """With `materialize=`, each listing writes the view to disk and AgentScope's block names
    each skill's directory as the sandbox mounts it (`shown_as=`), for its file tools."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.")})
    skills = skillfs.Skills(store, "bot", "alice")
    loader = SkillfsLoader(skills, materialize=tmp_path, shown_as="/workspace/.skills-cache")
    toolkit = Toolkit(skills_or_loaders=[loader])
    block = asyncio.run(toolkit.get_skill_instructions())
    assert block is not None and "<dir>/workspace/.skills-cache/shared/refunds</dir>" in block
    assert (tmp_path / "shared/refunds/SKILL.md").read_bytes() == md("refunds", "Handle refunds.")
    store.publish(skillfs.Scope.user("bot", "alice"), "notes", {"SKILL.md": md("notes", "Mine.")})
    block = asyncio.run(toolkit.get_skill_instructions())
    assert block is not None and "<dir>/workspace/.skills-cache/user/notes</dir>" in block
    assert (tmp_path / "user/notes/SKILL.md").is_file()


def test_each_agent_is_a_conversation_of_its_own() -> None:
    """`session=` on the loader and the tools: a skill the model disabled in one agent's
    conversation leaves that agent's next system prompt and stays in another's, though both
    are the same user's view (docs/runtime.md, "Sessions")."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step one.")})
    store.publish(SHARED, "billing", {"SKILL.md": md("billing", "Billing help.", "Bill it.")})
    skills = skillfs.Skills(store, "bot", "alice", tools="saa")

    def agent(conversation: str, script: Iterator[ChatResponse]) -> ScriptedModel:
        model = ScriptedModel(script)
        toolkit = Toolkit(
            tools=skill_tools(skills, session=conversation),
            skills_or_loaders=[SkillfsLoader(skills, session=conversation)],
        )
        asyncio.run(agent_for(model, toolkit).reply(UserMsg("user", "hi")))
        return model

    a = agent("a", iter([call("disable_skill", {"skill_name": "billing"}, "c1"), text("ok")]))
    assert "Billing help." in system(a.sent[0]) and "Billing help." not in system(a.sent[1])
    b = agent("b", iter([text("ok")]))
    assert "Billing help." in system(b.sent[0]) and "Handle refunds." in system(b.sent[0])
