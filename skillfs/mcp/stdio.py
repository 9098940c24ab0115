"""`skillfs mcp`: one (agent, user) view served on stdin/stdout, for desktop hosts."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server

from skillfs.api import Store
from skillfs.mcp.server import build_server
from skillfs.mcp.views import ViewKey, Views
from skillfs.model.names import check_id
from skillfs.model.pins import Pins
from skillfs.runtime.model_tools import ToolSet
from skillfs.runtime.skill_writes import WriteMode


def run_stdio(
    store: Store,
    agent: str,
    user: str,
    markets: Sequence[str] = (),
    environment: str | None = None,
    skill_writes: WriteMode | None = None,
    pins: Pins | None = None,
    tools: ToolSet = "default",
) -> None:
    """Serve until stdin closes. Every request sees the same view, fresh at each request,
    through the model tools of the set `tools` (docs/runtime.md, "Tool sets"); `skill_writes`
    adds the write tools (docs/governance.md, "Agent-written skills")."""
    key = ViewKey(
        check_id("agent", agent),
        check_id("user", user),
        tuple(check_id("market", m) for m in markets),
        check_id("environment", environment) if environment else "",
        pins or Pins(),
        tools,
    )
    server = build_server(Views(store, lambda ctx: key, skill_writes=skill_writes))

    async def main() -> None:
        options = server.create_initialization_options(
            NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
        )
        async with stdio_server() as (read, write):
            await server.run(read, write, options)

    anyio.run(main)
