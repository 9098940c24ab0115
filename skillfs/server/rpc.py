"""The plumbing every RPC of the server runs through: the caller's token, the request checked
to be the method's message, the error raised turned into a status the client reads back as
the same skillfs error (`skillfs.engines.grpc_wire`), and the call timed for /metrics."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import grpc
from pydantic import ValidationError

from skillfs.auth import Level, Principal, Tokens
from skillfs.engines import grpc_wire as wire
from skillfs.engines.base import VersionMismatch
from skillfs.errors import InvalidPath, SkillfsError
from skillfs.model import Scope
from skillfs.server.metrics import Metrics

log = logging.getLogger("skillfs.server")
T = TypeVar("T")
_SHA = re.compile(r"[0-9a-f]{64}")


class Busy(Exception):
    """This server sheds the call (UNAVAILABLE without skillfs metadata): the client takes it
    as a transport failure and tries the next server, or retries later."""


@contextlib.contextmanager
def call(
    tokens: Tokens, metrics: Metrics, method: str, context: grpc.ServicerContext
) -> Iterator[Principal]:
    """Authenticate, run the handler, and turn what it raised into a status (the message
    says what to do, trailing metadata names the skillfs error for the client)."""
    start = time.perf_counter()
    status = grpc.StatusCode.OK
    who = "-"
    failure: tuple[grpc.StatusCode, list[tuple[str, str]], str] | None = None
    try:
        principal = tokens.authenticate(bearer(context))
        who = principal.name
        yield principal
    except (SkillfsError, VersionMismatch) as exc:
        status, meta = wire.status_of(exc)
        failure = (status, meta, str(exc))
    except Busy as exc:  # no skillfs metadata: the client tries another server
        status = grpc.StatusCode.UNAVAILABLE
        failure = (status, [], str(exc))
    except ValidationError as exc:  # a field that breaks the models' rules
        status, meta = wire.status_of(InvalidPath(""))
        failure = (status, meta, f"malformed request: {_first_error(exc)}")
    except Exception:
        if not context.is_active():  # the client went away mid-stream
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
                failure[2],
                extra={"method": method, "code": status.name, "token": who},
            )
    if failure is not None:
        context.set_trailing_metadata(failure[1])
        context.abort(failure[0], failure[2])


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


def add_lenient(
    server: grpc.Server, add_to_server: Callable[[Any, Any], None], servicer: object
) -> None:
    """Register a servicer (with its generated `add_..._to_server`) with lenient request
    decoders (see `Malformed`)."""
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
        server.add_registered_method_handlers(service, fixed)


def _well_formed(request: Any) -> Any:
    """The request, or for a client stream an iterator over its messages; INVALID_ARGUMENT
    for a message that did not decode."""
    if isinstance(request, Malformed):
        raise InvalidPath(f"malformed request: not the method's message ({request.error})")
    if isinstance(request, Iterator):
        return (_well_formed(m) for m in request)
    return request


def bearer(context: grpc.ServicerContext) -> str | None:
    """The token the call carries, if any."""
    for key, value in context.invocation_metadata():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


Method = Callable[[Any, Any, grpc.ServicerContext, Principal], T]


def unary(fn: Method[T]) -> Callable[[Any, Any, grpc.ServicerContext], T]:
    """A unary (or client-streaming) handler of a servicer with a `backend`, run under `call`."""

    @functools.wraps(fn)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> T:
        backend = self.backend
        with call(backend.tokens, backend.metrics, fn.__name__, context) as principal:
            return fn(self, _well_formed(request), context, principal)
        raise AssertionError("unreachable: call() returns or aborts")

    return handler


def streaming(fn: Method[Iterable[T]]) -> Callable[[Any, Any, grpc.ServicerContext], Iterator[T]]:
    """A server-streaming handler of a servicer with a `backend`, run under `call`."""

    @functools.wraps(fn)
    def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[T]:
        backend = self.backend
        with call(backend.tokens, backend.metrics, fn.__name__, context) as principal:
            yield from fn(self, _well_formed(request), context, principal)

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
        raise InvalidPath(f"invalid SHA-256 {sha!r}: give 64 lowercase hex digits")
    return sha
