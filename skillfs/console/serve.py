"""An ASGI app served by uvicorn, on its own event loop in a background thread.

The console alone (`serve(app)`, for one team's use and for tests) and the server's HTTP port
(`skillfs.server.http`) both run this way. Connections are served by the event loop, so an
idle or slow client costs a socket, not a thread, and a TLS handshake that never completes
blocks nobody else (docs/console.md, "The HTTP stack").
"""

from __future__ import annotations

import math
import socket
import threading
import time
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from skillfs.console.app import Console

#: The largest request head (request line and headers) a client may send, in bytes.
MAX_HEAD = 64 * 1024
#: Seconds an idle keep-alive connection stays open after a response.
KEEP_ALIVE = 5


def _graceful(grace: float) -> int:
    """uvicorn's graceful timeout in whole seconds; at 0 it reports every stop as timed out."""
    return max(1, math.ceil(grace))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, so a taken port fails here, in the caller's thread, and `port=0`
    is known (`getsockname`) before anything serves."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class HttpServer:
    """`app` listening on (host, port), TLS when given a certificate and key."""

    def __init__(
        self,
        app: ASGIApp,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        certfile: Path | None = None,
        keyfile: Path | None = None,
        grace: float = 5.0,
    ) -> None:
        self.grace = grace
        self.tls = certfile is not None
        self.config = uvicorn.Config(
            app,
            http="h11",
            loop="asyncio",
            lifespan="auto",  # the app runs what mounted apps need (server/http.py)
            log_config=None,  # the process's logging (JSON lines) stays as it is
            access_log=False,
            server_header=False,
            proxy_headers=False,  # no client decides it came over HTTPS
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
            h11_max_incomplete_event_size=MAX_HEAD,
            timeout_keep_alive=KEEP_ALIVE,
            timeout_graceful_shutdown=_graceful(grace),
        )
        self.config.load()  # a bad certificate fails here, not in the thread
        self.sock = bind(host, port)
        address = self.sock.getsockname()
        self.host, self.port = str(address[0]), int(address[1])
        self.server = uvicorn.Server(self.config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="skillfs-http"
        )
        self._thread.daemon = True

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def start(self) -> HttpServer:
        """Serve in the background; returns once the port answers."""
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server on port {self.port} did not start")
            time.sleep(0.005)
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let requests in flight finish for up to `grace` seconds."""
        if grace is not None:
            self.grace = grace
            self.config.timeout_graceful_shutdown = _graceful(grace)
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(self.grace + 5)
        self.sock.close()


class ConsoleServer(HttpServer):
    """The console alone on (host, port); `stop()` ends its live-update streams first."""

    def __init__(self, app: Console, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(app, host, port)
        self.app = app

    def start(self) -> ConsoleServer:
        super().start()
        return self

    def stop(self, grace: float | None = None) -> None:
        self.app.close()
        super().stop(grace)

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(app: Console, host: str = "127.0.0.1", port: int = 0) -> ConsoleServer:
    """Start serving `app` in the background; `port=0` picks a free port (see `.url`)."""
    return ConsoleServer(app, host, port).start()
