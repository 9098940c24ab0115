"""Skills for LangChain 1.x agents (`pip install skillfs[langchain]`).

```python
skills = Skills(store, "support-bot", "alice")
agent = create_agent(model, system_prompt="You are support.", middleware=[SkillsMiddleware(skills)])
```

At every model call the middleware takes a fresh snapshot of the worker's view and appends its
prompt block to the system message (docs/runtime.md), so an operator's edit shows at the
agent's next step, and an unchanged view gives a byte-identical system message (prompt caches
stay warm). Its tools are the worker's tool set (`Skills(..., tools=)`; by default
`load_skill_through_path`, `read_skill` and `search_skills`), each answering from a fresh
snapshot, offered to the model only while the view holds a skill. With
`Skills(..., skill_writes="draft" | "live")` the write tools `propose_skill` and
`skill_manage` follow, always offered (docs/governance.md).

A run's thread (`config={"configurable": {"thread_id": ...}}`) is its session
(docs/runtime.md, "Sessions"): what the model disables or loads there stays there. A host tool
registered bindable (`Skills(..., host_tools=[HostTool(name=..., bindable=True)])`) is left
out of the model's tools until a skill loaded in the thread binds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.config import get_config

from skillfs.runtime import PromptOptions, Skills, Snapshot
from skillfs.runtime.model_tools import tool_specs
from skillfs.runtime.skill_writes import write_tool_specs


class SkillsMiddleware(AgentMiddleware):
    """The skills block in the system message and the skill tools, over one (agent, user)
    view; each thread is a session of the worker (docs/runtime.md, "Sessions")."""

    def __init__(self, skills: Skills, *, prompt: PromptOptions | None = None) -> None:
        super().__init__()
        self.skills = skills
        self.prompt = prompt
        reads = tool_specs(skills.tool_set)
        writes = [] if skills.skill_writes is None else write_tool_specs(skills.skill_writes)
        self.tools: list[BaseTool] = [self._tool(*spec) for spec in [*reads, *writes]]
        self._reads = {name for name, _, _ in reads}
        self._bindable = {t.name for t in skills.host_tools if t.bindable}

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_skills(request, self.skills.snapshot(session=thread_id())))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        snap = await self.skills.asnapshot(session=thread_id())
        return await handler(self._with_skills(request, snap))

    def _with_skills(self, request: ModelRequest, snap: Snapshot) -> ModelRequest:
        """`request` with the snapshot's block after its system message; without the read
        tools while the view is empty (nothing they could name), nor the bindable host
        tools the thread's skills have not bound."""
        block = snap.prompt(self.prompt)
        changes: dict[str, Any] = {}
        if block:
            held = request.system_message.content_blocks if request.system_message else []
            text = f"\n\n{block}" if held else block
            changes["system_message"] = SystemMessage(
                content_blocks=[*held, {"type": "text", "text": text}]
            )
        hidden = self._bindable.difference(snap.bound_tools)
        if not snap.model_skills:
            hidden |= self._reads
        if hidden:
            changes["tools"] = [t for t in request.tools if _name(t) not in hidden]
        return request.override(**changes) if changes else request

    def _tool(self, name: str, description: str, schema: dict[str, Any]) -> BaseTool:
        """A LangChain tool running `name` on a fresh snapshot; a failed call is the tool's
        error result (status "error"), its text saying what exists, so the model corrects
        itself."""

        def run(**arguments: Any) -> str:
            snap = self.skills.snapshot(session=thread_id())
            text, failed = snap.tool_outcome(name, arguments)
            if failed:
                raise ToolException(text)
            return text

        async def arun(**arguments: Any) -> str:
            snap = await self.skills.asnapshot(session=thread_id())
            text, failed = await asyncio.to_thread(snap.tool_outcome, name, arguments)
            if failed:
                raise ToolException(text)
            return text

        return StructuredTool(
            name=name,
            description=description,
            args_schema=schema,
            func=run,
            coroutine=arun,
            handle_tool_error=True,
        )


def thread_id() -> str | None:
    """The thread of the run being served (LangGraph's `configurable.thread_id`), the
    session of the worker; None outside a run or without one: the worker's own session."""
    try:
        config = get_config()
    except RuntimeError:  # not inside a run
        return None
    value = config.get("configurable", {}).get("thread_id")
    return None if value is None else str(value)


def _name(tool: Any) -> str | None:
    """A tool's name as a request holds it: a LangChain tool, or a provider's dict."""
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict):
        name = tool.get("name") or tool.get("function", {}).get("name")
        return name if isinstance(name, str) else None
    return None
