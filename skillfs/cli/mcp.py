"""`skillfs mcp`: the MCP Skills extension on stdin/stdout, for desktop hosts
(docs/integrations.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from skillfs.cli.common import (
    AgentOption,
    EnvironmentOption,
    MarketsOption,
    PinsOption,
    StoreOption,
    TokenOption,
    command,
    connect,
    pins_of,
)


@command("mcp", "Serve")
def mcp(
    agent: AgentOption,
    user: Annotated[
        str, typer.Option("--user", "-u", metavar="USER", show_default=False, help="User id.")
    ],
    markets: MarketsOption = None,
    environment: EnvironmentOption = None,
    pins: PinsOption = None,
    skill_writes: Annotated[
        str | None,
        typer.Option(
            "--skill-writes",
            metavar="draft|live",
            show_default=False,
            help="Add propose_skill and skill_manage: the host's model writes skills to the "
            "user's scope as drafts for review, or live (docs/governance.md).",
        ),
    ] = None,
    tools: Annotated[
        str,
        typer.Option(
            "--tools",
            metavar="default|harness9|saa",
            help="The model tools offered: the default set, harness9's use_skill, or Spring AI "
            "Alibaba's read_skill and disable_skill (docs/runtime.md, 'Tool sets').",
        ),
    ] = "default",
    store_url: StoreOption = None,
    token: TokenOption = None,
) -> None:
    """Serve the skills of (agent, user) over MCP on stdin/stdout: skills/list, skills/get,
    skill:// resources and the skill tools, fresh at every request."""
    from skillfs.mcp import run_stdio  # the MCP SDK is imported only by this command
    from skillfs.runtime.model_tools import check_tool_set
    from skillfs.runtime.skill_writes import check_mode

    writes = check_mode(skill_writes)  # before the store is opened: a typo says so at once
    tool_set = check_tool_set(tools)
    pinned = pins_of(pins)  # a bad one is a usage error before the store is opened
    store = connect(store_url, token)
    run_stdio(store, agent, user, markets or [], environment, writes, pinned, tool_set)
