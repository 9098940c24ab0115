"""A threaded HTTP server for the console, from the stdlib.

Each request gets a thread, so the live-update streams (one long request per open page) do
not block other pages. Good for one team's operators; behind a proxy or under load, mount the
WSGI app in the HTTP server of your choice instead.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import make_server

from skillfs.console.app import Console
from skillfs.console.web import QuietHandler, ThreadingWSGIServer


class ConsoleServer:
    """The console listening on (host, port) in a background thread."""

    def __init__(self, app: Console, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self._server = make_server(
            host, port, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler
        )
        address = self._server.server_address
        self.host, self.port = str(address[0]), int(address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="skillfs-console", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ConsoleServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the live-update streams, then stop accepting requests."""
        self.app.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(app: Console, host: str = "127.0.0.1", port: int = 0) -> ConsoleServer:
    """Start serving `app` in the background; `port=0` picks a free port (see `.url`)."""
    return ConsoleServer(app, host, port).start()
