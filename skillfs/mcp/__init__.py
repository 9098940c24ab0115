"""skillfs over the Model Context Protocol: the MCP Skills extension and the skill tools
(docs/integrations.md), on the official `mcp` SDK.

`run_stdio` serves one (agent, user) view on stdin/stdout (`skillfs mcp`); `McpHttp` is the
streamable-HTTP endpoint a server mounts at `/mcp`, its views chosen by bearer tokens.
"""

from __future__ import annotations

from skillfs.mcp.http import McpHttp
from skillfs.mcp.server import build_server
from skillfs.mcp.stdio import run_stdio
from skillfs.mcp.views import View, ViewKey, Views

__all__ = ["McpHttp", "View", "ViewKey", "Views", "build_server", "run_stdio"]
