"""The plumbing every RPC of the server runs through: the caller's token, the request checked
to be the method's message, the error raised turned into a status the client reads back as
the same skillfs error (`skillfs.remote.wire`), cut to a size gRPC can deliver, and the
call timed for /metrics. Handlers run on grpc.aio's event loop; what blocks on the store runs
in the backend's one bounded executor (docs/server.md, "The serving model")."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar, cast

import grpc
from pydantic import ValidationError

from skillfs.auth import Level, Principal, Tokens
from skillfs.engines.base import VersionMismatch
from skillfs.errors import InvalidArgument, InvalidPath, SkillfsError
from skillfs.model import Scope
from skillfs.remote import wire
from skillfs.server.metrics import Metrics
from skillfs.store.quotas import acting_as

log = logging.getLogger("skillfs.server")
T = TypeVar("T")
_SHA = re.compile(r"[0-9a-f]{64}")


#: Error messages are cut to this many characters (gRPC refuses trailers over 16 KiB, and a
#: message listing every skill id or every finding of a broken SKILL.md could exceed them).
MAX_DETAILS = 4096
#: Each trailing metadata value is cut to this many characters, for the same reason.
MAX_META = 512


class Busy(Exception):
    """This server sheds the call: a cap named in the message is reached. Answered
    RESOURCE_EXHAUSTED without skillfs metadata, which the `grpc://` engine takes as "this
    server is busy" and tries the next server (docs/server.md, "Limits")."""


def summarized(text: str, limit: int = MAX_DETAILS) -> str:
    """`text`, or its head and how much was left out, so that an error always fits in a
    status a client can receive (gRPC's metadata limit is 16 KiB)."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 60]}… ({len(text) - limit + 60} more characters left out)"


#: When (`time.monotonic()`) the call being served must be answered: its client's deadline.
#: The store work the call runs (`Backend.run`) retries no longer than that.
CALL_END: ContextVar[float | None] = ContextVar("skillfs_call_end", default=None)


@contextlib.asynccontextmanager
async def call(
    tokens: Tokens, metrics: Metrics, method: str, context: grpc.aio.ServicerContext
) -> AsyncIterator[Principal]:
    """Authenticate, run the handler, and turn what it raised into a status (the message
    says what to do, trailing metadata names the skillfs error for the client)."""
    start = time.perf_counter()
    status = grpc.StatusCode.OK
    who = "-"
    failure: tuple[grpc.StatusCode, list[tuple[str, str]], str] | None = None
    remaining = context.time_remaining()
    CALL_END.set(None if remaining is None else time.monotonic() + remaining)
    try:
        principal = tokens.authenticate(bearer(context))
        who = principal.name
        with acting_as(principal.credential()):  # the token the call's commits are charged to
            yield principal
    except (SkillfsError, VersionMismatch) as exc:
        status, meta = wire.status_of(exc)
        failure = (status, meta, str(exc))
    except Busy as exc:  # no skillfs metadata: the client tries another server
        status = grpc.StatusCode.RESOURCE_EXHAUSTED
        failure = (status, [], str(exc))
    except ValidationError as exc:  # a field that breaks the models' rules
        status, meta = wire.status_of(InvalidPath(""))
        failure = (status, meta, f"malformed request: {_first_error(exc)}")
    except (asyncio.CancelledError, grpc.aio.AbortError):
        status = grpc.StatusCode.CANCELLED  # the client went away, or the server stops
        raise
    except Exception:
        if context.done():  # the client went away mid-stream
            status = grpc.StatusCode.CANCELLED
            raise
        log.exception("internal error in %s", method, extra={"method": method, "token": who})
        status = grpc.StatusCode.INTERNAL
        failure = (status, [], f"internal error in {method}: see the server log")
    finally:
        seconds = time.perf_counter() - start
        metrics.observe(method, status.name, seconds)
        if failure is not None and status != grpc.StatusCode.INTERNAL:
            log.info(
                "%s failed: %s",
                method,
                summarized(failure[2], 400),
                extra={"method": method, "code": status.name, "token": who},
            )
    if failure is not None:
        trailers = tuple((k, summarized(v, MAX_META)) for k, v in failure[1])
        await context.abort(failure[0], summarized(failure[2]), trailing_metadata=trailers)


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"


class Malformed:
    """What a request that is not the method's protobuf message decodes to, so the handler
    answers INVALID_ARGUMENT (gRPC itself would answer INTERNAL)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def lenient(decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decoder(data: bytes) -> Any:
        try:
            return decode(data)
        except Exception as exc:  # google.protobuf.message.DecodeError, untyped here
            return Malformed(exc)

    return decoder


class GenericOnly:
    """A server as a generated `add_..._to_server` sees it, whose methods are found by name
    only. grpc.aio's main loop waits on one pending future per *registered* method for each
    call it takes, so every registered method costs every call (the echo server of the
    fleet benchmark registers 14, skillfs had 33: ~1.3x its CPU per call): only the
    SkillReader's, the fleet's hot path, are registered (docs/server.md, "Sizing")."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Left to the generic handler the generated code adds first."""


def add_lenient(
    server: grpc.aio.Server,
    add_to_server: Callable[[Any, Any], None],
    servicer: object,
    *,
    registered: bool = False,
) -> None:
    """Register a servicer (with its generated `add_..._to_server`) with lenient request
    decoders (see `Malformed`); `registered` for the hot path's service (see `GenericOnly`)."""
    captured: list[tuple[str, dict[str, grpc.RpcMethodHandler]]] = []

    class Capture:
        def add_generic_rpc_handlers(self, handlers: object) -> None:
            pass

        def add_registered_method_handlers(
            self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
        ) -> None:
            captured.append((service, handlers))

    add_to_server(servicer, Capture())
    for service, handlers in captured:
        fixed = {
            name: h._replace(request_deserializer=lenient(h.request_deserializer))
            for name, h in handlers.items()
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, fixed),))
        if registered:
            server.add_registered_method_handlers(service, fixed)


def well_formed(request: Any) -> Any:
    """The request; INVALID_ARGUMENT for a message that did not decode."""
    if isinstance(request, Malformed):
        raise InvalidArgument(f"malformed request: not the method's message ({request.error})")
    return request


async def messages(request: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A client stream's messages as they arrive, each checked by `well_formed`: nothing is
    buffered here, so a handler can check each message before it reads the next."""
    async for message in request:
        yield well_formed(message)


def budget(context: grpc.aio.ServicerContext) -> int:
    """The bytes of items one message of a collection carries for this caller: bounded for a
    caller of protocol 2, one message as protocol 1 sent for others (`remote.wire.BUDGET`)."""
    protocol = wire.protocol_of(context.invocation_metadata())
    return wire.BUDGET if protocol >= 2 else wire.UNBOUNDED


def bearer(context: grpc.aio.ServicerContext) -> str | None:
    """The token the call carries, if any."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


Method = Callable[[Any, Any, Any, Principal], T]


def unary(fn: Method[T]) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[T]]:
    """A unary handler of a servicer with a `backend`: authorized on the event loop (as
    `on_loop`), its body (which blocks on the store) run in the backend's one bounded
    executor."""

    @functools.wraps(fn)
    async def in_executor(self: Any, request: Any, context: Any, principal: Principal) -> T:
        return cast(T, await self.backend.run(fn, self, request, context, principal))

    return on_loop(in_executor)


def on_loop(
    fn: Method[Awaitable[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[T]]:
    """A handler whose body is a coroutine on the event loop (it awaits what it needs from
    the store itself): no executor hand-off for the call as a whole. A client-streaming one
    reads `messages(request)` (the request is then the stream, which `well_formed` passes
    through), so an idle stream holds no thread."""

    @functools.wraps(fn)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        backend = self.backend
        async with call(backend.tokens, backend.metrics, fn.__name__, context) as principal:
            return await fn(self, well_formed(request), context, principal)
        raise AssertionError("unreachable: call() returns or aborts")

    return handler


def streaming(
    fn: Method[AsyncIterator[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[T]]:
    """A server-streaming handler (an async generator), run under `call`: a stream the client
    does not read waits on the event loop, holding no thread."""

    @functools.wraps(fn)
    async def handler(
        self: Any, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[T]:
        backend = self.backend
        async with call(backend.tokens, backend.metrics, fn.__name__, context) as principal:
            async for item in fn(self, well_formed(request), context, principal):
                yield item

    return handler


def allowed(principal: Principal, level: Level, scope: str) -> Scope:
    """The scope a request names, once the token is known to have `level` on it."""
    parsed = wire.scope_from(scope)
    principal.require(level, parsed)
    return parsed


def expected(message: Any) -> int | None:
    """A request's optional `expected_version`; None (no check) when it is not set."""
    return int(message.expected_version) if message.HasField("expected_version") else None


def check_sha(sha: str) -> str:
    if not _SHA.fullmatch(sha):
        raise InvalidArgument(f"invalid SHA-256 {sha!r}: give 64 lowercase hex digits")
    return sha
