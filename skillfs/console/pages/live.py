"""Live updates: Server-Sent Events of one agent's (or market's) revision, so every open page
shows commits as they land (docs/console.md, "Live updates").

A stream shows the token only what it may read: a change in a scope it may not read moves the
revision and names nothing. The session is checked again before every event and keep-alive,
so a stream ends when its operator signs out or the token is revoked.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import Response, StreamingResponse

from skillfs.auth import Level
from skillfs.console.call import Call
from skillfs.errors import SkillfsError
from skillfs.model import Change, Revision
from skillfs.names import check_domain
from skillfs.store import Store

#: How often a live-update stream sends a comment, so proxies and the browser keep it open;
#: also the longest a stream goes without checking its session again.
KEEPALIVE_SECONDS = 10.0
#: How long a browser waits before reconnecting when every stream slot is taken.
BUSY_RETRY_MS = 30_000
#: Seconds between tries while the store does not answer.
TROUBLE_PAUSE = 2.0


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _rev(rev: Revision | None) -> dict[str, Any] | None:
    return None if rev is None else {"epoch": rev.epoch, "counter": rev.counter}


def _next_change(
    store: Store, domain: str, since: Revision | None, stop: threading.Event
) -> Change | None:
    """The first change after `since`, or None after a keep-alive's wait (runs in the pool)."""
    for change in store.follow_domain(domain, since, timeout=KEEPALIVE_SECONDS, stop=stop):
        return change
    return None


def events(call: Call) -> Response:
    """The stream of one domain's changes, fed by `store.follow_domain`."""
    domain = call.query.get("domain", "")
    check_domain(domain)
    call.require_domain(domain)
    store, live, recheck = call.store, call.live, call.recheck

    def current() -> Revision | None:
        return store.domain_revisions([domain])[domain]

    async def stream() -> AsyncIterator[bytes]:
        with live.slot() as stop:
            if stop is None:
                yield f"retry: {BUSY_RETRY_MS}\n\n".encode()
                yield _sse("trouble", {"message": "too many live pages open; retrying later"})
                return
            yield b"retry: 3000\n\n"
            rev: Revision | None = None
            fresh = True  # read the revision (at the start, and after a reset)
            while not stop.is_set():
                session = recheck()
                if session is None:
                    yield _sse("signed-out", {"message": "your session ended: sign in again"})
                    return
                try:
                    if fresh:
                        rev = await live.pool.run(current)
                        fresh = False
                        yield _sse("revision", {"revision": _rev(rev)})
                        continue
                    change = await live.pool.run(_next_change, store, domain, rev, stop)
                except SkillfsError as exc:
                    yield _sse("trouble", {"message": str(exc)})
                    fresh = True
                    await asyncio.sleep(TROUBLE_PAUSE)
                    continue
                if change is None:
                    yield b": keep-alive\n\n"
                    continue
                if change.op == "reset":
                    fresh = True  # the log cannot say what changed: read the revision again
                    continue
                rev = change.revision
                session = recheck()  # the grants as of now, not as of the wait's start
                if session is None:
                    continue  # signed out while waiting: the loop says so, naming nothing
                if change.scope is None or not session.principal.may(Level.read, change.scope):
                    yield _sse("revision", {"revision": _rev(rev)})
                    continue
                yield _sse(
                    "change",
                    {
                        "revision": _rev(rev),
                        "op": change.op,
                        "scope": str(change.scope),
                        "skill": change.skill,
                        "version": change.version,
                    },
                )

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
