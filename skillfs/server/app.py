"""The server process: gRPC (reads, admin, health, reflection), the HTTP port (status page,
/metrics, /healthz, /readyz, and the mount point of the admin console), TLS, JSON logs and
graceful shutdown (docs/design.md §6).

The server holds no state of its own beyond caches of immutable things, so any number of
them can run over one store; readiness follows the store (health SERVING only while it
answers), liveness only the process.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from pydantic import BaseModel, ConfigDict

from skillfs.auth import Tokens
from skillfs.console import make_app
from skillfs.errors import SkillfsError
from skillfs.proto import skillfs_pb2 as pb
from skillfs.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.admin import Admin
from skillfs.server.backend import Backend, watch_limits
from skillfs.server.http import ASGIApp, HttpPort
from skillfs.server.metrics import Metrics
from skillfs.server.reader import Reader
from skillfs.server.rpc import add_lenient
from skillfs.store import open_store

log = logging.getLogger("skillfs.server")

SERVICES = tuple(pb.DESCRIPTOR.services_by_name[n].full_name for n in ("SkillReader", "SkillAdmin"))
MiB = 1024 * 1024


class ServerConfig(BaseModel):
    """What `skillfs serve` takes; ports may be 0 (any free port, see `SkillfsServer.grpc_port`)."""

    model_config = ConfigDict(frozen=True)

    store: str
    grpc: str = "127.0.0.1:7070"
    http: str | None = "127.0.0.1:7080"
    tokens: Path | None = None  # else $SKILLFS_TOKENS
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Seconds between store checks of the health service.
    health_interval: float = 1.0
    #: Seconds in-flight calls get to finish on shutdown.
    grace: float = 10.0
    max_workers: int = 128
    #: Open Watch streams allowed, in all and per token (default: max_workers/2 and /4;
    #: beyond them a Watch is answered UNAVAILABLE, so unary calls always have threads).
    max_watches: int | None = None
    max_watches_per_token: int | None = None
    max_message_mib: int = 16


class SkillfsServer:
    """One server: `start()`, then `stop()` (or `serve()` to block until SIGTERM/SIGINT)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tokens = Tokens(config.tokens)
        self.store = open_store(config.store)
        self.metrics = Metrics()
        watches = watch_limits(config.max_workers, config.max_watches, config.max_watches_per_token)
        self.backend = Backend(self.store, self.tokens, self.metrics, watches)
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self.started = time.time()
        self.serving = False
        self._stop = threading.Event()
        self._stopped = threading.Event()
        limit = config.max_message_mib * MiB
        self.grpc = grpc.server(
            ThreadPoolExecutor(max_workers=config.max_workers, thread_name_prefix="skillfs-rpc"),
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=config.max_workers * 4,
        )
        add_lenient(self.grpc, pb_grpc.add_SkillReaderServicer_to_server, Reader(self.backend))
        add_lenient(self.grpc, pb_grpc.add_SkillAdminServicer_to_server, Admin(self.backend))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection(
            (
                *SERVICES,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            self.grpc,
        )
        self.grpc_port = self._bind_grpc(config)
        self.http: HttpPort | None = None
        self.http_port: int | None = None
        if config.http:
            self.console = make_app(self.store, self.tokens)
            self.http = HttpPort(self, self.console, services=SERVICES)
            self.http_port = self._listen_http(self.http, config)
        self._set_health(False)

    # ------------------------------------------------------------------ binding

    def _tls(self) -> tuple[bytes, bytes] | None:
        c = self.config
        if (c.tls_cert is None) != (c.tls_key is None):
            raise SkillfsError("TLS needs both --tls-cert and --tls-key")
        if c.tls_cert is None or c.tls_key is None:
            return None
        return c.tls_key.read_bytes(), c.tls_cert.read_bytes()

    def _bind_grpc(self, config: ServerConfig) -> int:
        pair = self._tls()
        port: int
        if pair is None:
            port = self.grpc.add_insecure_port(config.grpc)
        else:
            port = self.grpc.add_secure_port(config.grpc, grpc.ssl_server_credentials([pair]))
        if port == 0:
            raise SkillfsError(f"cannot listen on {config.grpc} for gRPC: is the port taken?")
        return port

    def _listen_http(self, http: HttpPort, config: ServerConfig) -> int:
        host, _, port = (config.http or "").rpartition(":")
        try:
            return http.listen(
                host or "127.0.0.1",
                int(port),
                certfile=config.tls_cert,
                keyfile=config.tls_key,
                grace=config.grace,
            )
        except OSError as exc:
            raise SkillfsError(f"cannot listen on {config.http} for HTTP: {exc}") from exc

    # ------------------------------------------------------------------ life cycle

    def start(self) -> SkillfsServer:
        self.grpc.start()
        threading.Thread(target=self._health_loop, name="skillfs-health", daemon=True).start()
        if self.http is not None:
            self.http.start()
        log.info(
            "serving",
            extra={
                "grpc_port": self.grpc_port,
                "http_port": self.http_port,
                "store": self.store.url,
            },
        )
        return self

    def stop(self, grace: float | None = None) -> None:
        """Graceful: report NOT_SERVING (load balancers stop sending), end watches, let calls
        in flight finish for up to `grace` seconds, then close the store."""
        if self._stop.is_set():
            self._stopped.wait()
            return
        self._stop.set()
        self.health.enter_graceful_shutdown()
        self.backend.close()
        self.grpc.stop(self.config.grace if grace is None else grace).wait()
        if self.http is not None:
            self.http.stop(self.config.grace if grace is None else grace)
        self.store.close()
        log.info("stopped", extra={"grpc_port": self.grpc_port})
        self._stopped.set()

    def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully; `ready` runs once serving."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: threading.Thread(target=self.stop).start())
        self.start()
        if ready is not None:
            ready()
        self._stopped.wait()

    def _set_health(self, up: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if up
            else (health_pb2.HealthCheckResponse.NOT_SERVING)
        )
        for name in ("", *SERVICES):
            self.health.set(name, status)
        self.metrics.store_up.set(1 if up else 0)
        if up != self.serving:
            log.info("store %s", "up" if up else "down", extra={"store": self.store.url})
        self.serving = up

    def _health_loop(self) -> None:
        """SERVING while the store answers a ping; a check every `health_interval` seconds."""
        while True:
            try:
                self.store.engine.ping()
                up = True
            except SkillfsError:
                up = False
            except Exception:
                log.exception("health check failed")
                up = False
            if self._stop.is_set():
                return
            self._set_health(up)
            if self._stop.wait(self.config.health_interval):
                return

    # ------------------------------------------------------------------ HTTP

    def mount(self, prefix: str, app: ASGIApp) -> None:
        """Serve an ASGI app under `prefix` on the HTTP port (skillfs/server/http.py)."""
        if self.http is not None:
            self.http.mount(prefix, app)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `extra` fields."""

    _PLAIN = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in self._PLAIN})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
