"""What a `Skills` worker holds, and letting go of it: when the worker is closed, or else
when it and every snapshot it returned are garbage (docs/runtime.md, "Closing a worker").

A worker made from a URL (`Skills("redis://…", …)`) opened that store itself: it holds a
watch thread and the store's connections until it is closed. One that is dropped unclosed
has them released when it is collected, with a `ResourceWarning` as an unclosed file or
socket gives, instead of keeping them for as long as the process lives. Nothing here refers
to the worker, so neither the watch thread nor a reference cycle keeps it alive.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Sequence

from skillfs.api import Store
from skillfs.model import Scope
from skillfs.runtime.follower import Follower
from skillfs.runtime.recovery import Recovery
from skillfs.runtime.usage import UsageRecorder


class Lease:
    """Referenced by a worker and by each snapshot it returns: a snapshot reads files through
    the worker's store, so what the worker holds is released only once all of them are gone."""

    __slots__ = ("__weakref__",)


class Held:
    """A worker's scopes in the process's followers, its recovery probe, and the store it
    opened itself (with the usage recorder made on it), released once."""

    def __init__(
        self,
        plan: Sequence[tuple[Follower, Sequence[Scope]]],
        recovery: Recovery,
        usage: UsageRecorder,
        opened: Store | None,
        *,
        own_usage: bool,
        what: str,
    ) -> None:
        self._plan = plan
        self._recovery = recovery
        self._usage = usage
        #: The store the worker opened from a URL: closed with it. A store the caller passed
        #: in is the caller's to close.
        self.opened = opened
        self._own_usage = own_usage  # the recorder made on `opened`: its thread ends with it
        self._what = what
        self._lock = threading.Lock()
        self.tracking = False
        self.closed = False

    def lease(self) -> Lease:
        """The lease whose collection releases what is held unless `release` ran first."""
        lease = Lease()
        weakref.finalize(lease, self._collected).atexit = False  # exit closes it all anyway
        return lease

    def track(self) -> None:
        """Serve the worker's scopes from the followers (again, after a `release`)."""
        with self._lock:
            if not self.tracking:
                for follower, scopes in self._plan:
                    for scope in scopes:
                        follower.track(scope)
                self.tracking = True

    def release(self) -> None:
        """Untrack the scopes, stop the probe, write the pending usage counts and close the
        store the worker opened."""
        with self._lock:
            if self.tracking:
                for follower, scopes in self._plan:
                    for scope in scopes:
                        follower.untrack(scope)
                self.tracking = False
            closing, self.closed = self.opened is not None and not self.closed, True
        self._plan[0][0].wake()
        self._recovery.close()
        if closing and self._own_usage:
            self._usage.close()
        else:
            self._usage.flush()
        if closing and self.opened is not None:
            self.opened.close()

    def _collected(self) -> None:
        """The worker and its snapshots are garbage. If it opened its store and was not
        closed, say so and release: in a thread of its own, since a collection may happen in
        any thread at any point (in the watch thread holding a follower's lock, say, which
        the release takes). A worker over a store passed in keeps its scopes in the followers
        until closed, as before: dropping one costs the next worker of that user no reload."""
        if self.opened is None or self.closed:
            return
        warnings.warn(
            f"unclosed {self._what}: its store was closed when it was collected; "
            "call close() or use `with Skills(...)`",
            ResourceWarning,
            stacklevel=1,  # the collector called this: no caller of the user's to point at
        )
        threading.Thread(target=self.release, name="skillfs-release", daemon=True).start()
