"""The MCP endpoint over streamable HTTP, for a server to mount at `/mcp`.

```python
mcp = McpHttp(store, tokens)
app = Starlette(routes=[Mount("/mcp", app=mcp)], lifespan=lambda app: mcp.lifespan())
```

Requests carry the same bearer tokens as gRPC (`skillfs.auth.Tokens`). The view is
(agent, user[, markets][, environment][, pins][, tools]) from the query string
(`/mcp?agent=support-bot&user=alice&market=team&environment=prod&pin=stable&tools=saa`) or the
headers `X-Skillfs-Agent`, `X-Skillfs-User`, `X-Skillfs-Market`, `X-Skillfs-Environment`,
`X-Skillfs-Pin`, `X-Skillfs-Tools` (the environment staged rollouts see, the labels the view
is pinned to: docs/governance.md; the model tools' set: docs/runtime.md, "Tool sets"); a
token granted one user's scope needs neither agent nor user. The token must be allowed to
read every scope of the view, so a token for alice can never read bob's files, whatever URI it
asks for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qs

from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Message, Receive, Scope, Send

from skillfs.api import Store
from skillfs.auth import Level, Principal, Tokens, Unauthenticated
from skillfs.errors import PermissionDenied, SkillfsError
from skillfs.mcp.server import build_server
from skillfs.mcp.views import SESSION_HEADER, ViewKey, Views
from skillfs.model import Scope as SkillScope
from skillfs.model.names import check_id
from skillfs.model.pins import Pins
from skillfs.runtime.model_tools import check_tool_set
from skillfs.util.lru import Lru

#: Where the resolved view travels from the ASGI layer to the MCP handlers, and the check
#: of whether the request's token may still read it.
VIEW_KEY = "skillfs.mcp.view"
ALLOWED_KEY = "skillfs.mcp.allowed"
#: Sessions whose token is remembered (the oldest is forgotten: its requests then go to the
#: SDK as they come, which answers an unknown session 404).
MAX_SESSIONS = 10_000
#: How long `close()` waits for the sessions to end (it must not hold a server's stop).
CLOSE_SECONDS = 2.0


class McpHttp:
    """An ASGI app serving MCP over streamable HTTP; run `lifespan()` around it."""

    def __init__(
        self,
        store: Store,
        tokens: Tokens,
        *,
        page_size: int = 100,
        ttl_ms: int = 0,
        max_views: int = 1000,
    ) -> None:
        self.store = store
        self.tokens = tokens
        views = Views(store, _resolved, max_views=max_views, allowed=_allowed)
        self.server = build_server(views, page_size=page_size, ttl_ms=ttl_ms)
        self._manager: StreamableHTTPSessionManager | None = None
        #: session id -> the name of the token that opened it (MCP's guidance: bind a session
        #: to its user, so that another token can neither use nor end it).
        self._owners: Lru[str, str] = Lru(MAX_SESSIONS)
        self._loop: asyncio.AbstractEventLoop | None = None  # the one serving the endpoint

    def close(self) -> None:
        """End every session, its open GET stream included (a client holds one for as long as
        its session lasts), so that a server's graceful stop is not held for them until its
        grace runs out (each was then cancelled, and logged as an error). Any thread."""
        loop, manager = self._loop, self._manager
        if loop is None or manager is None or loop.is_closed():
            return

        async def end() -> None:
            # The SDK has no public handle on its sessions; `terminate` is how it ends one.
            for transport in list(manager._server_instances.values()):
                await transport.terminate()

        with contextlib.suppress(Exception):  # a session already gone, the loop stopping
            asyncio.run_coroutine_threadsafe(end(), loop).result(CLOSE_SECONDS)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Sessions and the views' watches live inside this: enter it in the app's lifespan."""
        manager = StreamableHTTPSessionManager(app=self.server)
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if self._manager is None:
            await _reply(send, 503, "the MCP endpoint is not running (enter McpHttp.lifespan())")
            return
        self._loop = asyncio.get_running_loop()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            principal = self.tokens.authenticate(headers.get("authorization"))
            key = view_for(principal, headers, query)
        except Unauthenticated as exc:
            await _reply(send, 401, str(exc), {"www-authenticate": 'Bearer realm="skillfs"'})
            return
        except PermissionDenied as exc:
            await _reply(send, 403, str(exc))
            return
        except (SkillfsError, ValueError) as exc:
            await _reply(send, 400, str(exc))
            return

        def still() -> bool:
            """The token, looked up again: revoked or narrowed, its session hears no more."""
            try:
                again = self.tokens.authenticate(headers.get("authorization"))
                return view_for(again, headers, query) == key
            except (SkillfsError, ValueError):
                return False

        scope = {**scope, VIEW_KEY: key, ALLOWED_KEY: still}
        session = headers.get(SESSION_HEADER)
        if session is not None:
            owner = self._owners.get(session)
            if owner is not None and owner != principal.name:  # as the SDK answers a stranger
                await _reply(send, 404, "Session not found")
                return
            await self._manager.handle_request(scope, receive, send)
            return

        async def opened(message: Message) -> None:
            """The session a new request opened (its response's header) is this token's."""
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", ()):
                    if name.decode("latin-1").lower() == SESSION_HEADER:
                        self._owners.put(value.decode("latin-1"), principal.name)
            await send(message)

        await self._manager.handle_request(scope, receive, opened)


def _from_request(ctx: ServerRequestContext[Any, Any], key: str) -> Any:
    """What `__call__` put in this request's ASGI scope under `key`."""
    if ctx.request is None:
        raise PermissionDenied("an MCP request over HTTP must come through McpHttp")
    return ctx.request.scope[key]


def _resolved(ctx: ServerRequestContext[Any, Any]) -> ViewKey:
    """The view `__call__` resolved for this request."""
    key: ViewKey = _from_request(ctx, VIEW_KEY)
    return key


def _allowed(ctx: ServerRequestContext[Any, Any]) -> Callable[[], bool]:
    """The check `__call__` made for this request's token and view."""
    still: Callable[[], bool] = _from_request(ctx, ALLOWED_KEY)
    return still


def view_for(principal: Principal, headers: dict[str, str], query: str) -> ViewKey:
    """The view a request asks for, checked against the token's grants."""
    params = parse_qs(query)

    def values(name: str) -> list[str]:
        header = headers.get(f"x-skillfs-{name}")
        sent = [v.strip() for v in header.split(",")] if header else []
        query = params.get(name)
        if query and sent and [v for v in query if v] != [v for v in sent if v]:
            raise ValueError(
                f"the URL says {name}={','.join(query)} and the X-Skillfs-{name.title()} "
                f"header {','.join(sent)}: give the {name} one way"
            )
        return [v for v in (query or sent) if v]

    agents, users, envs = values("agent"), values("user"), values("environment")
    tools = values("tools")
    if len(agents) > 1 or len(users) > 1 or len(envs) > 1 or len(tools) > 1:
        raise ValueError(
            "give one agent, one user, at most one environment and one tool set per MCP URL"
        )
    if not agents or not users:
        own = sorted(
            {(g.ident, g.user) for g in principal.grants if g.part == "user" and g.ident and g.user}
        )
        if len(own) != 1:
            raise ValueError(
                f"token {principal.name!r} does not name one user: add ?agent=AGENT&user=USER "
                "to the MCP endpoint URL (or the X-Skillfs-Agent and X-Skillfs-User headers)"
            )
        agents, users = agents or [own[0][0] or ""], users or [own[0][1] or ""]
    key = ViewKey(
        check_id("agent", agents[0]),
        check_id("user", users[0]),
        tuple(check_id("market", m) for m in values("market")),
        check_id("environment", envs[0]) if envs else "",
        Pins.parse(values("pin")),
        check_tool_set(tools[0]) if tools else "default",
    )
    scopes = [
        SkillScope.user(key.agent, key.user),
        SkillScope.shared(key.agent),
        *(SkillScope.market(m) for m in key.markets),
    ]
    for each in scopes:
        principal.require(Level.read, each)
    return key


async def _reply(
    send: Send, status: int, message: str, extra: dict[str, str] | None = None
) -> None:
    body = json.dumps({"error": message}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.encode(), v.encode()) for k, v in (extra or {}).items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
