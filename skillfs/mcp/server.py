"""The MCP server: the Skills extension (`skills/list`, `skills/get`, `skill://` resources,
`resources/directory/read`), the skill tools and skills as prompts (`prompts/list`,
`prompts/get`), on the official `mcp` SDK's low-level
`Server` (docs/integrations.md says why not FastMCP).

One `Server` serves stdio (`skillfs mcp`) and streamable HTTP (`skillfs/mcp/http.py`), both
protocol eras: the handshake era (`initialize`, ≤ 2025-11-25) and 2026-07-28 (`server/discover`).
Each request answers from one fresh snapshot of its view (skillfs/mcp/views.py).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from skillfs.errors import InvalidArgument, NotFound, PermissionDenied, SkillfsError
from skillfs.mcp import catalog, prompts
from skillfs.mcp.catalog import EXTENSION, BadUri
from skillfs.mcp.views import View, Views, conversation, sessionless
from skillfs.runtime.model_tools import CONVERSATION_TOOLS
from skillfs.spec.skill_md import SKILL_MD
from skillfs.util.deadline import SERVER_READS, within

Ctx = ServerRequestContext[Any, Any]


class ListSkillsParams(types.PaginatedRequestParams):
    """`skills/list`: a cursor, as every paginated list."""


class GetSkillParams(types.RequestParams):
    """`skills/get`: the URI of a skill's SKILL.md."""

    uri: str


class DirectoryReadParams(types.PaginatedRequestParams):
    """`resources/directory/read`: a skill directory's URI."""

    uri: str


def build_server(views: Views, *, page_size: int = 100, ttl_ms: int = 0) -> Server[Any]:
    """The MCP server over `views`. `ttl_ms` is the caching hint on skill listings: 0 by
    default, since skillfs promises an edit at the next step; a host may cache anyway and
    rely on list-changed notifications."""
    hints = {"ttlMs": ttl_ms, "cacheScope": "private"}  # a view is one user's

    async def view_of(ctx: Ctx) -> View:
        try:
            return views.view(ctx)
        except (PermissionDenied, NotFound, ValueError) as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from exc

    async def snapshot(ctx: Ctx) -> tuple[View, Any]:
        view = await view_of(ctx)
        try:
            return view, await view.snapshot(conversation(ctx))
        except SkillfsError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from exc

    async def list_skills(ctx: Ctx, params: ListSkillsParams) -> dict[str, Any]:
        _, snap = await snapshot(ctx)
        items, more = _page(catalog.servable(snap), params.cursor, page_size)
        result: dict[str, Any] = {"skills": [catalog.entry(*item) for item in items], **hints}
        if more:
            result["nextCursor"] = more
        return result

    async def get_skill(ctx: Ctx, params: GetSkillParams) -> dict[str, Any]:
        _, snap = await snapshot(ctx)
        s, path = _call(catalog.parse, snap, params.uri)
        if path != SKILL_MD:
            raise _invalid(f"{params.uri} is not a SKILL.md URI; use {catalog.uri(s.id, SKILL_MD)}")
        typed = snap.typed()[s.id]
        why = catalog.not_servable(s, typed)
        if why is not None:
            raise _invalid(
                f"skill {s.id!r} is not served as an MCP skill: {why}; its files stay readable "
                "with resources/read and the read_skill tool"
            )
        return {"skill": catalog.entry(s, typed), **hints}

    async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        _, snap = await snapshot(ctx)
        items, more = _page(snap.skills, params.cursor if params else None, page_size)
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=catalog.uri(s.id, SKILL_MD),
                    name=s.name,
                    description=s.description,
                    mime_type="text/markdown",
                    size=s.files[SKILL_MD].size,
                )
                for s in items
            ],
            next_cursor=more,
        )

    async def list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template="skill://{skill_id}/{path*}",
                    name="skill file",
                    description="A file of a skill, by its path inside the skill.",
                )
            ]
        )

    async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        _, snap = await snapshot(ctx)
        s, path = _call(catalog.file_of, snap, params.uri)
        data = await anyio.to_thread.run_sync(within, SERVER_READS, snap.read_bytes, s.id, path)
        mime = catalog.mime_type(path)
        text = catalog.as_text(data)
        content: types.TextResourceContents | types.BlobResourceContents
        if text is not None:
            content = types.TextResourceContents(uri=params.uri, mime_type=mime, text=text)
        else:
            content = types.BlobResourceContents(
                uri=params.uri, mime_type=mime, blob=catalog.b64(data)
            )
        return types.ReadResourceResult(contents=[content])

    async def read_directory(ctx: Ctx, params: DirectoryReadParams) -> dict[str, Any]:
        _, snap = await snapshot(ctx)
        children = _call(catalog.directory, snap, params.uri)
        items, more = _page(children, params.cursor, page_size)
        return {"resources": items, **({"nextCursor": more} if more else {})}

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        _, snap = await snapshot(ctx)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"], description=t["description"], input_schema=t["input_schema"]
                )
                for t in snap.tools(style="anthropic")
                if not (t["name"] in CONVERSATION_TOOLS and sessionless(ctx))
            ]
        )

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        if params.name in CONVERSATION_TOOLS and sessionless(ctx):
            text, failed = (
                f"Error: {params.name} changes a conversation, and this request belongs to "
                "none (an MCP request without a session: protocol 2026-07-28). Connect with a "
                "session (protocol 2025-11-25 over HTTP, or stdio) to use it.",
                True,
            )
        else:
            try:
                _, snap = await snapshot(ctx)
            except MCPError as exc:  # a tool's failure is its result, which the model reads
                text, failed = f"Error: {exc.error.message}", True
            else:
                text, failed = await anyio.to_thread.run_sync(
                    within, SERVER_READS, snap.tool_outcome, params.name, params.arguments or {}
                )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )

    async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        _, snap = await snapshot(ctx)
        items, more = _page(prompts.invocable(snap), params.cursor if params else None, page_size)
        return types.ListPromptsResult(
            prompts=[prompts.prompt(s) for s in items], next_cursor=more, ttl_ms=ttl_ms
        )

    async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> Any:
        _, snap = await snapshot(ctx)
        try:
            s = prompts.skill_of(snap, params.name)
            text = await anyio.to_thread.run_sync(
                within, SERVER_READS, snap.invoke, s.id, params.arguments or {}
            )
        except (NotFound, InvalidArgument) as exc:
            raise _invalid(str(exc)) from exc
        except SkillfsError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from exc
        return prompts.result(s, text)

    async def listen(ctx: Ctx, params: Any) -> Any:
        view, _ = await snapshot(ctx)  # the view's changes are told from here on (its watch's base)
        return await view.serve_listen(ctx, params, views.check(ctx))

    @contextlib.asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with views.running():
            yield {}

    server: Server[Any] = Server(
        "skillfs",
        version=importlib.metadata.version("skillfs"),
        lifespan=lifespan,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_subscriptions_listen=listen,
    )
    server.add_request_handler("skills/list", ListSkillsParams, list_skills)
    server.add_request_handler("skills/get", GetSkillParams, get_skill)
    server.add_request_handler("resources/directory/read", DirectoryReadParams, read_directory)
    server.extensions[EXTENSION] = {"directoryRead": True}
    server.middleware.append(_advertise_on_initialize)
    return server


async def _advertise_on_initialize(ctx: Ctx, call_next: Callable[[Ctx], Awaitable[Any]]) -> Any:
    """The 2025-11-25 `ServerCapabilities` has no `extensions`, so the SDK drops it from the
    `initialize` result; put it back for handshake-era hosts (the ext-skills specification's
    capability), and say that resources, tools and prompts send list-changed notifications."""
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        caps = result.setdefault("capabilities", {})
        caps.setdefault("extensions", {})[EXTENSION] = {"directoryRead": True}
        for kind in ("resources", "tools", "prompts"):
            if isinstance(caps.get(kind), dict):
                caps[kind]["listChanged"] = True
    return result


def _invalid(message: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=message)


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except BadUri as exc:
        raise _invalid(str(exc)) from exc


def _page(items: Any, cursor: str | None, size: int) -> tuple[list[Any], str | None]:
    return _call(catalog.page, items, cursor, size)  # type: ignore[no-any-return]
