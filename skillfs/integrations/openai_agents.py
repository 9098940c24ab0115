"""Skills for the OpenAI Agents SDK (`pip install skillfs[openai-agents]`).

```python
kit = AgentSkills(Skills(store, "support-bot", "alice"), base="You are a support agent.")
agent = Agent(name="support", instructions=kit.instructions, tools=kit.tools)
```

The SDK calls `instructions` at every model turn: each call takes a fresh snapshot and returns
its prompt block (docs/runtime.md), so an edit shows at the next turn, and an unchanged view
gives byte-identical instructions (prompt caches stay warm). The tools of the worker's tool set
(`Skills(..., tools=)`; by default `load_skill_through_path`, `read_skill` and `search_skills`)
answer from a fresh snapshot too, and are disabled while the view holds no skill. With
`Skills(..., skill_writes="draft" | "live")` the write tools
`propose_skill` and `skill_manage` follow, always enabled (docs/governance.md).

The SDK has no conversation id of its own (a run's context is the host's object), so
`session=` maps a run's context to the worker's session (docs/runtime.md, "Sessions"): the
skills a conversation loaded, the tools they bound and the skills it disabled stay with it
across its runs and never reach another conversation of the same user. Without it, every run
shares the worker's own session.

```python
kit = AgentSkills(skills, session=lambda ctx: ctx.context.conversation_id)
```
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from skillfs.runtime import PromptOptions, Skills, Snapshot
from skillfs.runtime.model_tools import tool_specs
from skillfs.runtime.skill_writes import write_tool_specs


class AgentSkills:
    """Dynamic instructions and function tools over one (agent, user) view."""

    def __init__(
        self,
        skills: Skills,
        *,
        base: str = "",
        prompt: PromptOptions | None = None,
        session: Callable[[RunContextWrapper[Any]], str | None] | None = None,
    ) -> None:
        self.skills = skills
        self.base = base
        self.prompt = prompt
        self.session = session
        self.tools: list[FunctionTool] = [
            FunctionTool(
                name=name,
                description=description,
                params_json_schema=schema,
                on_invoke_tool=self._invoker(name),
                # strict mode wants every property required; Spring AI Alibaba's
                # read_skill names a skill by any one of three
                strict_json_schema=schema["required"] == list(schema["properties"]),
                is_enabled=self._has_skills,
            )
            for name, description, schema in tool_specs(skills.tool_set)
        ]
        if skills.skill_writes is not None:  # `files` is a map: not strict-mode JSON schema
            self.tools += [
                FunctionTool(
                    name=name,
                    description=description,
                    params_json_schema=schema,
                    on_invoke_tool=self._invoker(name),
                    strict_json_schema=False,
                )
                for name, description, schema in write_tool_specs(skills.skill_writes)
            ]

    async def instructions(self, ctx: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        """`base`, then the skills block of a fresh snapshot (nothing when there are none)."""
        block = (await self._snapshot(ctx)).prompt(self.prompt)
        return "\n\n".join(part for part in (self.base, block) if part)

    async def _has_skills(self, ctx: RunContextWrapper[Any], agent: Any) -> bool:
        return bool((await self._snapshot(ctx)).model_skills)

    async def _snapshot(self, ctx: RunContextWrapper[Any]) -> Snapshot:
        """A fresh snapshot in the run's conversation's session."""
        return await self.skills.asnapshot(session=self.session(ctx) if self.session else None)

    def _invoker(self, name: str) -> Any:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            # Errors come back as text, so the model reads the ids or paths that exist.
            snap = await self._snapshot(ctx)
            return await asyncio.to_thread(snap.call_tool, name, arguments)

        return invoke
