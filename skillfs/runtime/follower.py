"""The per-process, per-domain follower: one watch that keeps the manifests of the scopes this
process serves current, shared by every `Skills` of that agent (or market).

A snapshot asks `at(revision)` with the revision it just read from the store. When the cache is
at that revision the answer costs nothing (C3); when it is behind in the same epoch the change
log says which scopes and skills moved, and only those tracked here are reloaded, so another
user's edit never reloads this user's scope; a new epoch, or a revision that went back, drops
everything and reloads (C5). Between snapshots a background thread follows the change log and
applies the same updates, then warms the store's blob cache with the files that changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from skillfs.errors import SkillfsError, StoreUnavailable
from skillfs.model import Change, FileEntry, Manifest, Revision, Scope
from skillfs.runtime.layers import LayerSkills
from skillfs.store import Store

log = logging.getLogger(__name__)

#: Files up to this size are read into the blob cache when their skill changes.
PREFETCH_FILE_BYTES = 256 * 1024
#: At most this many bytes are prefetched after one batch of changes.
PREFETCH_BATCH_BYTES = 8 * 1024 * 1024
#: What `changes()` is asked from when the domain had no revision yet: any real one differs.
_NO_REVISION = Revision(epoch="", counter=0)


def _same(a: Revision | None, b: Revision | None) -> bool:
    """Revision equality without pydantic's generic `__eq__` (on every step's hot path)."""
    if a is None or b is None:
        return a is b
    return a.counter == b.counter and a.epoch == b.epoch


class StoreReader:
    """Reads a store scope's files through the store's blob LRU."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def read(self, entry: FileEntry) -> bytes:
        return self._store.read_entry(entry)

    def read_many(self, entries: Iterable[FileEntry]) -> Mapping[str, bytes]:
        return self._store.read_entries(entries)


@dataclass(frozen=True, eq=False)
class _Cache:
    """The domain's revision, the loaded scopes as of it, and when that was observed
    (`time.monotonic()` at the end of the store call that returned it)."""

    revision: Revision | None
    scopes: Mapping[Scope, LayerSkills]
    observed_at: float


class Follower:
    """Keeps the tracked scopes of one domain (`agents/<id>` or `markets/<id>`) current."""

    def __init__(self, store: Store, domain: str, watch_timeout: float = 1.0) -> None:
        self.store = store
        self.domain = domain
        self.watch_timeout = watch_timeout
        self._reader = StoreReader(store)
        self._empty = LayerSkills({}, self._reader)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._cache = _Cache(None, {}, -float("inf"))
        self._refs: Counter[Scope] = Counter()
        self._prefetch: list[Manifest] = []
        self._ready: Revision | None = None  # the revision whose changed files are warm
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        #: `time.monotonic()` as of which the cache was known current (for max_staleness).
        self.verified_at = -float("inf")

    @property
    def revision(self) -> Revision | None:
        """The revision the cached scopes are current as of."""
        return self._cache.revision

    @property
    def ready(self) -> Revision | None:
        """The revision up to which the watch also warmed the changed files."""
        return self._ready

    # ------------------------------------------------------------------ tracking

    def track(self, scope: Scope) -> None:
        """Serve `scope` from this process; starts the watch with the first scope."""
        with self._lock:
            self._refs[scope] += 1
            if self._thread is None or not self._thread.is_alive():
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._watch,
                    args=(self._stop,),
                    name=f"skillfs-follow {self.domain}",
                    daemon=True,
                )
                self._thread.start()

    def untrack(self, scope: Scope) -> None:
        """Stop serving `scope` (its cache is dropped); the watch ends with the last scope."""
        with self._lock:
            self._refs[scope] -= 1
            if self._refs[scope] > 0:
                return
            del self._refs[scope]
            cache = self._cache
            if scope in cache.scopes:
                rest = {s: v for s, v in cache.scopes.items() if s != scope}
                self._cache = _Cache(cache.revision, rest, cache.observed_at)
            if not self._refs:
                self._stop.set()
                self._thread = None

    # ------------------------------------------------------------------ the snapshot path

    def at(
        self, revision: Revision | None, scopes: Sequence[Scope], read_started: float
    ) -> tuple[Revision | None, tuple[LayerSkills, ...]]:
        """The scopes as of at least `revision`, which a read begun at `read_started`
        (`time.monotonic()`) returned. Free when the cache is already there."""
        cache = self._cache
        if _same(cache.revision, revision):
            found = tuple(cache.scopes.get(s) for s in scopes)
            if None not in found:
                # the cached object, so that callers comparing snapshots hit identity
                return cache.revision, found  # type: ignore[return-value]  # no None left
        with self._lock:
            cache = self._advance(revision, read_started)
            missing = [s for s in scopes if s not in cache.scopes]
            if missing:
                loaded = dict(cache.scopes)
                for s in missing:
                    loaded[s] = self._load(s) if cache.revision is not None else self._empty
                    self._prefetch.extend(loaded[s].manifests.values())
                cache = _Cache(cache.revision, loaded, cache.observed_at)
            self._cache = cache
            self.verified_at = max(self.verified_at, read_started)
            return cache.revision, tuple(cache.scopes[s] for s in scopes)

    def _advance(self, revision: Revision | None, read_started: float) -> _Cache:
        cache = self._cache
        current = cache.revision
        if _same(revision, current):
            return cache
        if (
            revision is not None
            and current is not None
            and revision.epoch == current.epoch
            and revision.counter > current.counter
        ):
            changes = self.store.engine.changes(self.domain, current, 0)
            done = time.monotonic()
            cache = self._apply(cache, changes, done)
            now = cache.revision
            if now is not None and now.epoch == revision.epoch and now.counter >= revision.counter:
                return cache
            log.warning("%s: change log did not reach %s; reloading", self.domain, revision)
        elif current is not None and read_started <= cache.observed_at:
            return cache  # that read may predate our newer observation: keep the newer one
        elif current is not None:
            log.warning(
                "%s: revision %s after %s (new epoch or went back); reloading",
                self.domain,
                revision,
                current,
            )
        return _Cache(revision, {}, read_started)

    # ------------------------------------------------------------------ applying changes

    def _load(self, scope: Scope) -> LayerSkills:
        return LayerSkills(self.store.manifests(scope), self._reader)

    def _apply(self, cache: _Cache, changes: Sequence[Change], observed_at: float) -> _Cache:
        """Reload the skills that changed in loaded scopes; ignore the others (other users)."""
        if not changes:
            return cache
        last = changes[-1]
        if last.op == "reset":
            return _Cache(last.revision, {}, observed_at)
        touched: dict[Scope, set[str]] = {}
        for c in changes:
            if c.scope is not None and c.scope in cache.scopes and c.skill is not None:
                touched.setdefault(c.scope, set()).add(c.skill)
        scopes = dict(cache.scopes)
        for scope, skills in touched.items():
            loaded = self.store.engine.load_skills(scope, sorted(skills))
            manifests = dict(scopes[scope].manifests)
            for skill in skills:
                m = loaded.get(skill)
                if m is None or m.deleted:
                    manifests.pop(skill, None)
                else:
                    manifests[skill] = m
                    self._prefetch.append(m)
            scopes[scope] = LayerSkills(manifests, self._reader)
        return _Cache(last.revision, scopes, observed_at)

    # ------------------------------------------------------------------ the background watch

    def _watch(self, stop: threading.Event) -> None:
        """Follow the change log until stopped. Errors are logged and retried, never fatal:
        a dead watch would leave every step to catch up by itself."""
        delay = 0.05
        while not stop.is_set():
            try:
                self._follow_once()
                delay = 0.05
            except Exception as exc:
                if stop.is_set():
                    return  # closed while waiting: the store may be closed under it
                log.warning("follow %s: %s; retrying in %.2fs", self.domain, exc, delay)
                stop.wait(delay)
                delay = min(delay * 2, 2.0)

    def _follow_once(self) -> None:
        cache = self._cache
        started = time.monotonic()
        changes = self.store.engine.changes(
            self.domain, cache.revision or _NO_REVISION, self.watch_timeout
        )
        done = time.monotonic()
        with self._lock:
            if self._cache is cache:  # else a snapshot moved it meanwhile: ask from there
                self._cache = self._apply(cache, changes, done)
                self.verified_at = max(self.verified_at, started)
        if changes and changes[-1].op == "reset":
            self._refill()
        with self._lock:
            prefetch, self._prefetch = self._prefetch, []
            ready = self._cache.revision
        self._warm(prefetch)
        if ready != self._ready:
            with self._lock:
                self._ready = ready
                self._changed.notify_all()

    def _refill(self) -> None:
        """After a reset, load the tracked scopes again so the next step finds them warm."""
        with self._lock:
            cache = self._cache
            missing = [s for s in self._refs if s not in cache.scopes]
        if not missing or cache.revision is None:
            return
        try:
            loaded = {s: self._load(s) for s in missing}
        except StoreUnavailable as exc:
            log.warning("reload of %s after a reset: %s; the next step will load", self.domain, exc)
            return
        with self._lock:
            if self._cache is cache:  # else a snapshot moved on: it loads what it needs
                self._cache = _Cache(cache.revision, {**cache.scopes, **loaded}, cache.observed_at)
                for state in loaded.values():
                    self._prefetch.extend(state.manifests.values())

    def _warm(self, manifests: Sequence[Manifest]) -> None:
        """Read the changed skills' small files into the store's blob LRU, off the hot path."""
        budget = PREFETCH_BATCH_BYTES
        entries: list[FileEntry] = []
        for m in manifests:
            for e in m.files.values():
                if e.size <= PREFETCH_FILE_BYTES and e.size <= budget:
                    entries.append(e)
                    budget -= e.size
        if entries:
            try:
                self.store.read_entries(entries)
            except SkillfsError as exc:  # a load will read (or report) it when asked
                log.warning("prefetch for %s: %s", self.domain, exc)

    def wait_for(self, revision: Revision, timeout: float) -> bool:
        """Block until the cache holds `revision` (same epoch, at least its counter) and the
        changed files are warm; False on timeout. For tests, benchmarks and readiness probes."""

        def there() -> bool:
            r = self._ready
            return r is not None and r.epoch == revision.epoch and r.counter >= revision.counter

        with self._changed:
            return self._changed.wait_for(there, timeout)


_followers: weakref.WeakKeyDictionary[Store, dict[str, Follower]] = weakref.WeakKeyDictionary()
_followers_lock = threading.Lock()


def follower_for(store: Store, domain: str) -> Follower:
    """The one follower of `domain` for this store object in this process."""
    with _followers_lock:
        per_store = _followers.setdefault(store, {})
        f = per_store.get(domain)
        if f is None:
            f = per_store[domain] = Follower(store, domain)
        return f


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts its own followers."""
    _followers.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
