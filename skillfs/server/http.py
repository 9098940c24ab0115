"""The server's HTTP port: one Starlette app served by uvicorn (docs/server.md, "The HTTP
port"). `/metrics`, `/healthz`, `/readyz` and `/status` answer first, then any mounted ASGI
app (the MCP endpoint, say), then the admin console at `/`.

uvicorn runs its own event loop in a thread of the server process (`HttpServer`), beside the
gRPC server: connections cost no thread, only the console's pages and live streams take one,
from their bounded pools.
"""

from __future__ import annotations

import html
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from skillfs.console.app import Console
from skillfs.console.serve import HttpServer
from skillfs.console.session import COOKIE
from skillfs.server.metrics import Metrics

__all__ = ["ASGIApp", "HttpPort", "Served"]

#: How long /readyz waits for a console thread before it says the server cannot serve.
READY_PROBE_SECONDS = 1.0


class Served(Protocol):
    """What the HTTP port reports of the server process."""

    @property
    def serving(self) -> bool: ...  # the store answered the last health check

    @property
    def started(self) -> float: ...

    @property
    def grpc_port(self) -> int: ...

    @property
    def metrics(self) -> Metrics: ...


class HttpPort:
    """The Starlette app of the HTTP port and the uvicorn server that runs it."""

    def __init__(
        self,
        server: Served,
        console: Console,
        *,
        services: tuple[str, ...] = (),
        mounts: Mapping[str, ASGIApp] | None = None,
        lifespans: Sequence[Callable[[], AbstractAsyncContextManager[None]]] = (),
    ) -> None:
        self.server = server
        self.console = console
        self.services = services
        routes: list[BaseRoute] = [
            _read_only(path, endpoint)
            for path, endpoint in (
                ("/metrics", self._metrics),
                ("/healthz", self._healthz),
                ("/readyz", self._readyz),
                ("/status", self._status),
            )
        ]
        for prefix, app in (mounts or {}).items():
            routes += _mounted(prefix, app)
        routes.append(Mount("", app=console))

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            """What mounted apps run for as long as the port serves (the MCP endpoint's
            sessions and watches)."""
            async with AsyncExitStack() as stack:
                for enter in lifespans:
                    await stack.enter_async_context(enter())
                yield

        self.app = Starlette(routes=routes, lifespan=lifespan)
        self._http: HttpServer | None = None

    def mount(self, prefix: str, app: ASGIApp) -> None:
        """Serve `app` under `prefix` (ASGI: the prefix becomes its `root_path`), after the
        probes and before the console; works while serving."""
        routes = self.app.router.routes
        routes[len(routes) - 1 : len(routes) - 1] = _mounted(prefix, app)

    def listen(
        self,
        host: str,
        port: int,
        *,
        certfile: Path | None = None,
        keyfile: Path | None = None,
        grace: float = 10.0,
    ) -> int:
        """Bind the port (raising OSError when it is taken); returns the port number."""
        self._http = HttpServer(
            self.app, host, port, certfile=certfile, keyfile=keyfile, grace=grace
        )
        return self._http.port

    def start(self) -> None:
        if self._http is not None:
            self._http.start()

    def stop(self, grace: float | None = None) -> None:
        """End the console's live streams, then let requests in flight finish (for up to
        `grace` seconds, default the one `listen` was given)."""
        self.console.close()
        if self._http is not None:
            self._http.stop(grace)

    # ------------------------------------------------------------------ endpoints

    async def _metrics(self, request: Request) -> Response:
        return Response(self.server.metrics.exposition(), media_type="text/plain; version=0.0.4")

    async def _healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def _readyz(self, request: Request) -> Response:
        """Ready while the store answers and a page would get a thread now: a server whose
        threads are all pinned is taken out of rotation although its store is fine."""
        if not self.server.serving:
            return PlainTextResponse("store unavailable\n", status_code=503)
        if not await self.console.ready(READY_PROBE_SECONDS):
            return PlainTextResponse("busy: no thread free to serve\n", status_code=503)
        return PlainTextResponse("ready\n")

    async def _status(self, request: Request) -> Response:
        """Up or down for anyone; the store, ports and uptime only to a signed-in operator."""
        signed_in = self.console.sessions.check(request.cookies.get(COOKIE)) is not None
        return HTMLResponse(self._status_page(signed_in))

    def _status_page(self, signed_in: bool) -> str:
        up = self.server.serving
        rows = {"store status": "answering" if up else "NOT answering"}
        if signed_in:
            tls = self._http is not None and self._http.tls
            rows = {
                "store": self.console.store.url,
                **rows,
                "gRPC": f"port {self.server.grpc_port} ({'TLS' if tls else 'plaintext'})",
                "uptime": f"{time.time() - self.server.started:.0f} s",
                "services": ", ".join(self.services),
            }
        rows["console"] = "at / (sign in with a token" + (")" if signed_in else " for details)")
        body = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows.items()
        )
        store = (
            f"<div class='store'>{html.escape(self.console.store.url)}</div>" if signed_in else ""
        )
        badge = "ok" if up else "error"
        # The console's stylesheet (the console is mounted at / of this port), so the page
        # looks like the rest of what an operator sees here.
        return (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<title>Status · skillfs server</title>"
            "<link rel='icon' href='/static/favicon.svg' type='image/svg+xml'>"
            "<link rel='stylesheet' href='/static/console.css'></head><body>"
            "<header class='topbar'><a class='brand' href='/'><span class='logo' "
            "aria-hidden='true'></span>skillfs<span class='brand-sub'>server</span></a>"
            f"{store}</header>"
            "<div class='login-wrap'><div class='card error-card'>"
            f"<h1>skillfs server <span class='badge {badge}'>"
            f"{'serving' if up else 'store down'}</span></h1>"
            f"<table class='table'>{body}</table>"
            "<p><a class='btn primary' href='/'>Console</a> "
            "<a class='btn ghost' href='/metrics'>/metrics</a> "
            "<a class='btn ghost' href='/readyz'>/readyz</a> "
            "<a class='btn ghost' href='/healthz'>/healthz</a></p>"
            "</div></div></body></html>"
        )


def _read_only(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
    """A GET/HEAD route that answers any other method 405 itself: the console's catch-all
    would otherwise take it (a POST to /healthz was "Signed out", or a 404 page)."""

    async def answer(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return PlainTextResponse(
                f"{path} answers GET and HEAD\n", status_code=405, headers={"allow": "GET, HEAD"}
            )
        return await endpoint(request)

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Route(path, answer, methods=methods)


def _mounted(prefix: str, app: ASGIApp) -> list[BaseRoute]:
    """`app` at `prefix` itself and below it: the console's catch-all would otherwise take
    the bare prefix (`/mcp`, the URL MCP clients are given)."""
    prefix = prefix.rstrip("/")
    return [Route(prefix, endpoint=app), Mount(prefix, app=app)]
