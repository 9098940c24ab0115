"""Live updates: Server-Sent Events of one agent's (or market's) revision, so every open page
shows commits as they land (docs/console.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from skillfs.console.call import Call
from skillfs.console.web import Response
from skillfs.errors import SkillfsError
from skillfs.model import Revision
from skillfs.names import check_domain

#: How often a live-update stream sends a comment, so proxies and the browser keep it open.
KEEPALIVE_SECONDS = 10.0


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _rev(rev: Revision | None) -> dict[str, Any] | None:
    return None if rev is None else {"epoch": rev.epoch, "counter": rev.counter}


def events(call: Call) -> Response:
    """The stream of one domain's changes, fed by `store.follow`."""
    domain = call.req.query.get("domain", "")
    check_domain(domain)
    call.require_domain(domain)
    store, stop = call.store, call.stopping

    def stream() -> Iterator[bytes]:
        yield b"retry: 3000\n\n"
        rev: Revision | None = None
        while not stop.is_set():
            try:
                rev = store.domain_revisions([domain])[domain]
                yield _sse("revision", {"revision": _rev(rev)})
                for change in store.follow_domain(
                    domain, rev, timeout=KEEPALIVE_SECONDS, stop=stop
                ):
                    if change.op == "reset":
                        break  # the log cannot say what changed: read the revision again
                    rev = change.revision
                    yield _sse(
                        "change",
                        {
                            "revision": _rev(rev),
                            "op": change.op,
                            "scope": str(change.scope) if change.scope else None,
                            "skill": change.skill,
                            "version": change.version,
                        },
                    )
                yield b": keep-alive\n\n"
            except SkillfsError as exc:
                yield _sse("trouble", {"message": str(exc)})
                stop.wait(2.0)

    return Response(
        stream(),
        content_type="text/event-stream",
        headers=[("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
    )
