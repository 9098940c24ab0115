"""Skills for AgentScope 2.x agents (`pip install skillfs[agentscope]`).

```python
skills = Skills(store, "support-bot", "alice")
toolkit = Toolkit(tools=skill_tools(skills), skills_or_loaders=[SkillfsLoader(skills)])
agent = Agent(name="support", system_prompt="You are support.", model=model, toolkit=toolkit)
```

AgentScope's `Toolkit` asks its skill loaders for their skills whenever the agent builds a
system prompt and tool list, which it does before every model call, and again when its
`Skill` tool runs. `SkillfsLoader` answers each time from a fresh snapshot of the worker's
view (docs/runtime.md), so an operator's edit shows at the agent's next reasoning step, in
AgentScope's own `<agent-skills>` block and through its own `Skill` tool; an unchanged view
gives a byte-identical block. A skill is listed under its skill id; `Skill` returns its
SKILL.md without the frontmatter, read when the tool asks (listing reads no body).

A skill's other files: `SkillfsLoader(skills, materialize=".skills-cache")` writes the view
there at each listing (only changed files) and lists each skill's directory, for the agent's
file tools (`Read`, `Bash`); `shown_as=` names that directory as a sandbox mounts it. Else
`skill_tools(skills)` gives the worker's tool set (`load_skill_through_path`, ...) and, with
`Skills(..., skill_writes=)`, the write tools, as AgentScope tools.

An AgentScope agent is one conversation; give its loader and tools the conversation's id
(`session=`), and what the model loads, binds or disables there stays in it, never in
another conversation of the same user (docs/runtime.md, "Sessions"). Without it they share
the worker's own session.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentscope.message import TextBlock, ToolResultState
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.skill import Skill, SkillLoaderBase
from agentscope.tool import FunctionTool, ToolBase, ToolChunk

from skillfs.runtime import Skills, Snapshot
from skillfs.runtime.layers import SkillInfo
from skillfs.runtime.model_tools import skill_path, tool_specs
from skillfs.runtime.prompt import prompt_description, xml_escape
from skillfs.runtime.skill_writes import write_tool_specs


class SkillfsLoader(SkillLoaderBase):
    """The model's skills of one (agent, user) view, in one conversation (`session`), as
    AgentScope skills."""

    def __init__(
        self,
        skills: Skills,
        *,
        materialize: str | Path | None = None,
        shown_as: str | None = None,
        session: str | None = None,
    ) -> None:
        self.skills = skills
        self.materialize = materialize
        self.shown_as = shown_as
        self.session = session

    async def list_skills(self) -> list[Skill]:
        snap = await self.skills.asnapshot(session=self.session)
        if self.materialize is not None:
            snap = await asyncio.to_thread(
                snap.materialize, self.materialize, shown_as=self.shown_as
            )
        return [_ListedSkill(snap, s) for s in snap.model_skills]


class _ListedSkill(Skill):
    """A skill of one snapshot whose `markdown` (what AgentScope's `Skill` tool returns) is
    read when asked: the Toolkit lists skills at every step, and a listing must neither read
    every body nor count every skill as used."""

    def __init__(self, snap: Snapshot, info: SkillInfo) -> None:
        self._snap = snap
        self.name = info.id
        # AgentScope's template puts it between XML tags unescaped: escaped here, as
        # skillfs's own block does (docs/runtime.md)
        self.description = xml_escape(prompt_description(info.description))
        # where the agent's file tools find it, or the directory the skill tools name
        self.dir = skill_path(info, snap.shown_root)
        self.updated_at = 0.0  # a skill has versions, not a modification time

    @property
    def markdown(self) -> str:  # type: ignore[override]
        return self._snap.read_skill(self.name)

    def __repr__(self) -> str:
        return f"<skill {self.name} at {self.dir}>"


def skill_tools(skills: Skills, *, session: str | None = None) -> list[ToolBase]:
    """The worker's tool set and, with `Skills(..., skill_writes=)`, its write tools, as
    AgentScope tools answering from a fresh snapshot in the conversation `session`; allowed
    without asking the user (the operator chose them for the worker); a failed call is an
    error result whose text says what exists, so the model corrects itself."""
    allow = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="a skillfs tool")
    reads = [(spec, True) for spec in tool_specs(skills.tool_set)]
    writes = [] if skills.skill_writes is None else write_tool_specs(skills.skill_writes)
    return [
        FunctionTool(
            _runner(skills, name, session),
            name=name,
            description=description,
            input_schema=schema,
            is_read_only=read_only,
            permission=allow,
        )
        for (name, description, schema), read_only in [*reads, *((w, False) for w in writes)]
    ]


def _runner(skills: Skills, name: str, session: str | None) -> Any:
    async def run(**arguments: Any) -> ToolChunk:
        snap = await skills.asnapshot(session=session)
        text, failed = await asyncio.to_thread(snap.tool_outcome, name, arguments)
        state = ToolResultState.ERROR if failed else ToolResultState.RUNNING
        return ToolChunk(content=[TextBlock(text=text)], state=state)

    return run
