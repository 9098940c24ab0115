"""One budget for a unit of work that makes many store calls (a worker's step): every call
made inside `budget(seconds)` ends by the budget's end, however many retries, servers and
reads it takes (docs/runtime.md, "One budget per step").

The budget travels with the code that runs under it (a context variable), not through every
signature: the store's retries, the `grpc://` engine's per-call deadlines and etcd's
per-RPC deadlines each take what is left of it. Threads started inside a budget do not
inherit it (a watch thread waits on its own terms)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_END: ContextVar[float | None] = ContextVar("skillfs_budget_end", default=None)

#: The budget of a console page and of an MCP call (docs/server.md, "A short budget for the
#: server's own reads"): with the store down they answer "store unavailable" within 5 s (the
#: rest is rendering), well below the MCP clients' request timeouts, instead of waiting out
#: the store's `retry_for`.
SERVER_READS = 4.0


@contextlib.contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Everything inside ends within `seconds` (or within an enclosing budget, if sooner)."""
    token = _END.set(deadline(seconds))
    try:
        yield
    finally:
        _END.reset(token)


def within(seconds: float, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` under `budget(seconds)`: for work handed to another thread,
    which a budget set around the hand-over does not reach."""
    with budget(seconds):
        return fn(*args, **kwargs)


def deadline(seconds: float) -> float:
    """When (`time.monotonic()`) a call that may take up to `seconds` must end: `seconds`
    from now, or the end of the budget it runs under, whichever comes first."""
    end = time.monotonic() + seconds
    outer = _END.get()
    return end if outer is None else min(outer, end)


def left(seconds: float) -> float:
    """Seconds left for a call that may take up to `seconds` (`deadline`), never below 0."""
    return max(0.0, deadline(seconds) - time.monotonic())


def bounded() -> bool:
    """Whether the code runs under a budget (a worker's step)."""
    return _END.get() is not None
