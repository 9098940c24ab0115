"""The server process: gRPC (reads, admin, health, reflection), the HTTP port (status page,
/metrics, /healthz, /readyz, and the mount point of the admin console), TLS, JSON logs and
graceful shutdown (docs/design.md §6).

The server holds no state of its own beyond caches of immutable things, so any number of
them can run over one store; readiness follows the store (health SERVING only while it
answers), liveness only the process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
import ssl
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import grpc
from grpc_health.v1 import _async as health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from pydantic import BaseModel, ConfigDict

from skillfs.api import open_store
from skillfs.auth import Tokens
from skillfs.console import make_app
from skillfs.errors import SkillfsError
from skillfs.mcp.http import McpHttp
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.admin import Admin
from skillfs.server.backend import Backend, Caps
from skillfs.server.curator import CurateConfig, Curator
from skillfs.server.grpc_wakeups import drain_wakeups
from skillfs.server.http import ASGIApp, HttpPort
from skillfs.server.metrics import Metrics
from skillfs.server.reader import Reader
from skillfs.server.rpc import GenericOnly, add_lenient
from skillfs.store.limits import Limits

log = logging.getLogger("skillfs.server")

SERVICES = tuple(pb.DESCRIPTOR.services_by_name[n].full_name for n in ("SkillReader", "SkillAdmin"))
MiB = 1024 * 1024

T = TypeVar("T")
#: Store connections beyond the executor's threads: the HTTP side's threads and the health
#: check use the store too, so no thread ever waits on the pool (docs/server.md).
POOL_EXTRA = 48
#: Calls gRPC's core holds for the event loop at least (its defaults: 1,000, 3,000).
PENDING = 3000
#: Seconds between two writes of the views' usage counts.
USAGE_INTERVAL = 5.0
#: Collections of a generation between two of the next older one (CPython's default: 10).
#: Calls in flight at a collection are promoted, and at a fleet's load the promoted set off a
#: full collection every few seconds that stopped the event loop for 100-220 ms
#: (docs/server.md, "The serving model"); collecting older generations less often promotes less.
GC_OLDER_EVERY = 100


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
    #: Threads for blocking store calls (the one executor); the store's connection pool
    #: (Redis, PostgreSQL) is sized from it, max_workers + POOL_EXTRA, so no thread waits
    #: on the pool.
    max_workers: int = 64
    #: Calls in flight (streams included) before gRPC answers RESOURCE_EXHAUSTED itself;
    #: default: every cap's streams plus 4 unary calls per thread.
    max_concurrent_rpcs: int | None = None
    caps: Caps = Caps()
    max_message_mib: int = 16
    #: Curation by one elected server per interval (docs/governance.md); None: off.
    curate: CurateConfig | None = None
    #: The store's limits, its quotas among them (docs/security.md, "Quotas"); the same on
    #: every server of a deployment.
    limits: Limits = Limits()


class SkillfsServer:
    """One server: `start()`, then `stop()` (or `serve()` to block until SIGTERM/SIGINT)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tokens = Tokens(config.tokens)
        self.store = open_store(
            sized_store_url(config.store, config.max_workers + POOL_EXTRA), limits=config.limits
        )
        try:
            self.curator = Curator(self.store, config.curate) if config.curate else None
        except SkillfsError:
            self.store.close()
            raise
        self.metrics = Metrics()
        self.backend = Backend(
            self.store, self.tokens, self.metrics, config.max_workers, config.caps
        )
        self.started = time.time()
        self.serving = False
        #: Whether grpc.aio's wake-up reader reads every pending byte (grpc_wakeups).
        self.drains_wakeups = False
        self._stop = threading.Event()
        self._stopped = threading.Event()
        # gRPC runs on its own event loop in one thread (docs/server.md, "The serving model").
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="skillfs-grpc", daemon=True
        )
        self._loop_thread.start()
        try:
            self.health: health.HealthServicer = self._await(self._make_grpc())
            self.grpc_port = self._bind_grpc(config)
        except BaseException:  # a port taken, a TLS file unreadable: leave nothing running
            self._loop.call_soon_threadsafe(self._loop.stop)
            self.backend.executor.shutdown(wait=False)
            self.store.close()
            raise
        self.http: HttpPort | None = None
        self.http_port: int | None = None
        if config.http:
            self.console = make_app(self.store, self.tokens)
            self.mcp = McpHttp(self.store, self.tokens)
            self.http = HttpPort(
                self,
                self.console,
                services=SERVICES,
                mounts={"/mcp": self.mcp},
                lifespans=[self.mcp.lifespan],
            )
            self.http_port = self._listen_http(self.http, config)
        self._await(self._health(False))

    def _await(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `work` on the gRPC event loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    async def _make_grpc(self) -> health.HealthServicer:
        """The aio server (made on its loop) with the services, health and reflection."""
        config = self.config
        limit = config.max_message_mib * MiB
        caps = config.caps
        concurrent = config.max_concurrent_rpcs or (
            caps.max_watches + caps.max_streams + 4 * config.max_workers
        )
        self.grpc = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 0),
                # Calls that arrived but that the event loop has not taken yet: gRPC's core
                # cancels them past 1,000 (at random) and 3,000 by default, so a fleet's burst
                # of Watch or ReadFile calls lost hundreds as CANCELLED, logged nowhere
                # (docs/benchmarks.md, the fleet). Every call the server would admit may wait.
                ("grpc.server.max_pending_requests", max(concurrent, PENDING)),
                ("grpc.server.max_pending_requests_hard_limit", max(concurrent, PENDING)),
            ],
            maximum_concurrent_rpcs=concurrent,
        )
        reader = pb_grpc.add_SkillReaderServicer_to_server
        add_lenient(self.grpc, reader, Reader(self.backend), registered=True)
        add_lenient(self.grpc, pb_grpc.add_SkillAdminServicer_to_server, Admin(self.backend))
        servicer = QuietHealth()
        by_name = GenericOnly(self.grpc)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, by_name)
        names = (
            *SERVICES,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
            reflection.aio.ReflectionServicer(names), by_name
        )
        return servicer

    # ------------------------------------------------------------------ binding

    def _tls(self) -> tuple[bytes, bytes] | None:
        c = self.config
        if (c.tls_cert is None) != (c.tls_key is None):
            raise SkillfsError("TLS needs both --tls-cert and --tls-key")
        if c.tls_cert is None or c.tls_key is None:
            return None
        try:  # gRPC's own refusal is a C-core log line, and a failed bind (read as a taken port)
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                c.tls_cert, c.tls_key
            )
        except ssl.SSLError as exc:
            raise SkillfsError(
                f"TLS: {c.tls_cert} and {c.tls_key} are not a PEM certificate and its private key "
                f"({exc.reason or exc}); give the files of one pair"
            ) from None
        return c.tls_key.read_bytes(), c.tls_cert.read_bytes()

    def _bind_grpc(self, config: ServerConfig) -> int:
        pair = self._tls()
        port: int
        try:
            if pair is None:
                port = self.grpc.add_insecure_port(config.grpc)
            else:
                creds = grpc.ssl_server_credentials([pair])
                port = self.grpc.add_secure_port(config.grpc, creds)
        except RuntimeError:  # grpc.aio raises where the sync server answered 0
            port = 0
        if port == 0:
            raise SkillfsError(
                f"cannot listen on {config.grpc} for gRPC: is the port taken, and is the host "
                "an address of this machine?"
            )
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
        self._await(self._start_grpc())
        if self.http is not None:
            self.http.start()
        if self.curator is not None:
            self.curator.start()
        log.info(
            "serving",
            extra={
                "grpc_port": self.grpc_port,
                "http_port": self.http_port,
                "store": self.store.url,
            },
        )
        return self

    async def _start_grpc(self) -> None:
        await self.grpc.start()
        self.drains_wakeups = drain_wakeups(asyncio.get_running_loop())
        if not self.drains_wakeups:
            log.info("grpc.aio's wake-up reader not found: a large fan-out delays new calls")
        self.backend.start()
        self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def _stop_grpc(self, grace: float) -> None:
        """NOT_SERVING, end the watches, let calls in flight finish for `grace` seconds."""
        await self.health.enter_graceful_shutdown()
        self._health_task.cancel()
        await self.backend.close()
        await self.grpc.stop(grace)
        await self.backend.run(self.backend.views.flush_usage)

    def stop(self, grace: float | None = None) -> None:
        """Graceful: report NOT_SERVING (load balancers stop sending), end watches and the HTTP
        port's streams (the console's, MCP's), let calls and requests in flight on both ports
        finish for up to `grace` seconds, then close the store."""
        if self._stop.is_set():
            self._stopped.wait()
            return
        self._stop.set()
        grace = self.config.grace if grace is None else grace
        if self.curator is not None:
            self.curator.stop()
        http: threading.Thread | None = None
        if self.http is not None:  # its long streams end at once; both ports drain together
            self.mcp.close()
            http = threading.Thread(target=self.http.stop, args=(grace,), name="skillfs-http-stop")
            http.start()
        self._await(self._stop_grpc(grace))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(5)
        self.backend.executor.shutdown(wait=False, cancel_futures=True)
        if http is not None:
            http.join()
        self.store.close()
        log.info("stopped", extra={"grpc_port": self.grpc_port})
        self._stopped.set()

    def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully; `ready` runs once serving."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: threading.Thread(target=self.stop).start())
        self.start()
        settle_gc()
        if ready is not None and not self._stop.is_set():  # (a signal during the start)
            ready()
        # Woken twice a second: a signal the kernel hands to another of the process's threads
        # (gRPC's, uvicorn's) only flags it, and Python runs the handler when this thread
        # next runs Python code; an untimed wait never did (1 SIGTERM in ~10 was left waiting).
        while not self._stopped.wait(0.5):
            pass

    async def _health(self, up: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if up
            else (health_pb2.HealthCheckResponse.NOT_SERVING)
        )
        for name in ("", *SERVICES):
            await self.health.set(name, status)
        self.metrics.store_up.set(1 if up else 0)
        self.serving = up

    async def _health_loop(self) -> None:
        """SERVING while the store answers a ping; a check every `health_interval` seconds.
        The views' usage counts are written from here too, every USAGE_INTERVAL seconds."""
        flushed = time.monotonic()
        said: bool | None = None  # what the log said last: the first check is said too
        while True:
            try:
                await self.backend.run(self.store.engine.ping)
                up = True
            except SkillfsError:
                up = False
            except Exception:
                log.exception("health check failed")
                up = False
            await self._health(up)
            if up != said:
                level = logging.INFO if up else logging.WARNING
                log.log(level, "store %s", "up" if up else "down", extra={"store": self.store.url})
                said = up
            if time.monotonic() - flushed >= USAGE_INTERVAL:
                flushed = time.monotonic()
                try:
                    await self.backend.run(self.backend.views.flush_usage)
                except Exception as exc:  # kept for the next try (UsageRecorder.flush)
                    log.warning("usage not written: %s", exc)
            await asyncio.sleep(self.config.health_interval)

    # ------------------------------------------------------------------ HTTP

    def mount(self, prefix: str, app: ASGIApp) -> None:
        """Serve an ASGI app under `prefix` on the HTTP port (skillfs/server/http.py)."""
        if self.http is not None:
            self.http.mount(prefix, app)


class QuietHealth(health.HealthServicer):  # type: ignore[misc]  # untyped upstream
    """grpc.health.v1 on grpc.aio; `List`, which upstream leaves unimplemented with an ERROR
    traceback logged per call (any client could flood the log), answers UNIMPLEMENTED."""

    async def List(self, request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Health/List is not implemented")


def settle_gc() -> None:
    """Leave what a serving process loaded at start (modules, schemas: most of its objects)
    out of every later collection, and collect the older generations less often: the event
    loop stops for as long as a collection runs."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(gc.get_threshold()[0], GC_OLDER_EVERY, GC_OLDER_EVERY)


def sized_store_url(url: str, connections: int) -> str:
    """A Redis or PostgreSQL store URL whose connection pool holds `connections` (unless the
    URL says; PostgreSQL's pool opens them as they are needed); other stores are not pooled
    that way and are returned as given."""
    parts = urlsplit(url)
    if parts.scheme.startswith("redis"):
        option = "max_connections"
    elif parts.scheme in ("postgresql", "postgres"):
        option = "pool_size"
    else:
        return url
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if option in query:
        if int(query[option]) < connections:
            raise SkillfsError(
                f"the store URL's {option}={query[option]} is below the "
                f"{connections} connections the server's threads may use: raise it, or drop "
                "it and let the server size the pool (max_workers + POOL_EXTRA)"
            )
        return url
    query[option] = str(connections)
    return parts._replace(query=urlencode(query)).geturl()


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
