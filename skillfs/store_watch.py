"""Following a domain's change log (C8), for `Store.follow` and `Store.follow_domain`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from skillfs.engines.base import EMPTY, Engine
from skillfs.errors import StoreUnavailable
from skillfs.model import Change, Revision

log = logging.getLogger(__name__)


def follow_changes(
    engine: Engine,
    domain: str,
    since: Revision | None,
    timeout: float | None,
    poll: float,
    stop: threading.Event | None,
) -> Iterator[Change]:
    """Changes after `since` in order; a store outage is logged and waited out, since a
    follower's caller wants the changes, not the outage (docs/design.md §3, C8)."""
    end = None if timeout is None else time.monotonic() + timeout
    if since is None:
        since = engine.revisions([domain])[domain] or EMPTY
    while not (stop and stop.is_set()):
        wait = poll if end is None else min(poll, end - time.monotonic())
        if wait <= 0:
            return
        try:
            batch = engine.changes(domain, since, wait)
        except StoreUnavailable as exc:
            log.warning("follow %s: %s; retrying", domain, exc)
            time.sleep(min(wait, 0.5))
            continue
        for change in batch:
            since = change.revision
            if change.scope is not None or change.op == "reset":
                yield change  # else changes the token may not see (grpc://): skip them
