"""Live updates: Server-Sent Events of one agent's (or market's) revision, so every open page
shows commits as they land (docs/console.md, "Live updates").

A stream shows the token only what it may read: a change in a scope it may not read moves the
revision and names nothing. The session is checked again before every event and keep-alive,
so a stream ends when its operator signs out or the token is revoked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import Response, StreamingResponse

from skillfs.auth import Level
from skillfs.console.call import Call
from skillfs.errors import SkillfsError
from skillfs.model import Change, Revision
from skillfs.model.names import check_domain

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


def _after(change: Change, rev: Revision | None, shown: set[Change] | None) -> bool:
    """Whether `change` is news to a stream that stands at `rev` (it may be handed one it
    already showed): a later revision's, or `rev`'s and not in `shown`, the changes shown at
    `rev` (one commit's changes share its revision: a rename's two, a commit of several
    skills). None: `rev` was read from the store, and its page shows all of its changes."""
    if rev is None or change.op == "reset" or change.revision.epoch != rev.epoch:
        return True
    if change.revision.counter != rev.counter:
        return change.revision.counter > rev.counter
    return shown is not None and change not in shown


def events(call: Call) -> Response:
    """The stream of one domain's changes, fed by the console's one follower (`Feed`)."""
    domain = call.query.get("domain", "")
    check_domain(domain)
    call.require_domain(domain)
    store, live, recheck = call.store, call.live, call.recheck

    def current() -> Revision | None:
        return store.domain_revisions([domain])[domain]

    async def stream() -> AsyncIterator[bytes]:
        with live.slot(domain) as sub:
            if sub is None:
                yield f"retry: {BUSY_RETRY_MS}\n\n".encode()
                yield _sse("trouble", {"message": "too many live pages open; retrying later"})
                return
            yield b"retry: 3000\n\n"
            rev: Revision | None = None
            shown: set[Change] | None = None  # the changes shown at `rev` (`_after`)
            subscribed = False
            fresh = True  # read the revision (at the start, and after a reset)
            while not sub.stopped:
                session = recheck()
                if session is None:
                    yield _sse("signed-out", {"message": "your session ended: sign in again"})
                    return
                if fresh:
                    try:
                        if subscribed:
                            rev = await live.pool.run(current)
                        else:
                            rev = await live.pool.run(live.feed.subscribe, sub)
                            subscribed = True
                    except SkillfsError as exc:
                        yield _sse("trouble", {"message": str(exc)})
                        await asyncio.sleep(TROUBLE_PAUSE)
                        continue
                    fresh, shown = False, None
                    yield _sse("revision", {"revision": _rev(rev)})
                    continue
                change = await sub.next(KEEPALIVE_SECONDS)
                if change is None:
                    if not sub.stopped:
                        yield b": keep-alive\n\n"
                    continue
                if isinstance(change, str) or change.op == "reset":  # OVERFLOW, or a reset:
                    fresh = True  # what changed is not known: read the revision again
                    continue
                if not _after(change, rev, shown):
                    continue
                if shown is None or change.revision != rev:
                    shown = set()
                rev = change.revision
                shown.add(change)
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

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    if call.request.method == "HEAD":  # headers only: a stream would hold the connection
        return Response(media_type="text/event-stream", headers=headers)
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
