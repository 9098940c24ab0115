"""The per-process, per-domain follower: one watch that keeps the manifests of the scopes this
process serves current, shared by every `Skills` of that agent (or market).

A snapshot asks `at(revision)` with the revision it just read from the store. When the cache is
at that revision the answer costs nothing (C3). When it is behind in the same epoch, the change
log says which scopes and skills moved; only those tracked here are reloaded, so another user's
edit never reloads this user's scope. A new epoch, or a revision that went back, drops
everything and reloads (C5). Whatever was loaded, the cache is replaced only by manifests
proven to be exactly the domain's state at the revision they are labelled with
(`cut.find_cut`), so a step never holds half of a commit nor anything committed after its
revision (C4). Between snapshots the store's change feed (`store.changes.feed`: one store
connection waiting for every domain the process follows, whoever follows it) hands each
follower its changes, and the follower does the same, then warms the store's blob cache with
the files that changed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from skillfs.api import Store
from skillfs.engines.base import EMPTY
from skillfs.errors import SkillfsError, StoreUnavailable
from skillfs.model import Change, Manifest, Revision, Scope, same_revision
from skillfs.runtime.cut import Key, find_cut
from skillfs.runtime.layers import LayerSkills
from skillfs.store.blobs import small_files
from skillfs.store.feed import Subscription
from skillfs.util import deadline

log = logging.getLogger(__name__)

#: The longest a step waits for another thread's sync of the same domain (within its budget:
#: a sync stuck on a hung store must not hold every step past theirs).
LOCK_WAIT = 60.0
#: Reads a sync may take before giving up. Each round reloads only the skills that a commit
#: landing between two reads left out of date, so only a write storm on them gets this far.
MAX_ROUNDS = 32


@dataclass(frozen=True, eq=False)
class _Cache:
    """The loaded scopes, exactly as of the domain's `revision`, and when that was observed:
    `time.monotonic()` when the newest store read it rests on returned — this process's own
    read, or the one whose changes it was handed (a watch, the server's hub), however much
    later they were applied."""

    revision: Revision | None
    scopes: Mapping[Scope, LayerSkills]
    observed_at: float


class Follower:
    """Keeps the tracked scopes of one domain (`agents/<id>` or `markets/<id>`) current."""

    def __init__(
        self,
        store: Store,
        domain: str,
        watch_timeout: float | None = None,
    ) -> None:
        self.store = store
        self.domain = domain
        #: The store's own wait by default (`Changes.wait`: 1 s on a store, 25 s on a skillfs
        #: server, whose wait ends early when there is news).
        self._watch_timeout = store.changes.wait if watch_timeout is None else watch_timeout
        self._empty = LayerSkills({}, store)  # the store reads its layers' files
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._cache = _Cache(None, {}, -float("inf"))
        self._refs: Counter[Scope] = Counter()
        self._prefetch: list[Manifest] = []
        self._ready: Revision | None = None  # the revision whose changed files are warm
        self._sub: Subscription | None = None  # on the store's feed, while tracking scopes
        #: `time.monotonic()` as of which the cache was known current (for max_staleness).
        self.verified_at = -float("inf")

    @property
    def watch_timeout(self) -> float:
        """The longest wait of the watch: how often it confirms the cache when nothing moves."""
        return self._watch_timeout

    @watch_timeout.setter
    def watch_timeout(self, seconds: float) -> None:
        self._watch_timeout = seconds
        sub = self._sub
        if sub is not None:
            sub.wait = seconds

    @property
    def revision(self) -> Revision | None:
        """The revision the cached scopes are exactly as of."""
        return self._cache.revision

    @property
    def ready(self) -> Revision | None:
        """The revision up to which the watch also warmed the changed files."""
        return self._ready

    # ------------------------------------------------------------------ tracking

    def track(self, scope: Scope) -> None:
        """Serve `scope` from this process; the store's watch follows the domain from the
        first scope on."""
        with self._lock:
            self._refs[scope] += 1
            if self._sub is not None:
                return
            # under the lock, so that an `untrack` racing it cannot unfollow after this follow
            self._sub = self.store.changes.feed.subscribe(
                self.domain,
                self.on_watch,
                since=self._cache.revision or EMPTY,
                wait=self._watch_timeout,
            )

    def untrack(self, scope: Scope) -> None:
        """Stop serving `scope` (its cache is dropped); the watch of the domain ends with the
        last scope."""
        with self._lock:
            self._refs[scope] -= 1
            if self._refs[scope] > 0:
                return
            del self._refs[scope]
            cache = self._cache
            if scope in cache.scopes:
                rest = {s: v for s, v in cache.scopes.items() if s != scope}
                self._cache = _Cache(cache.revision, rest, cache.observed_at)
            if not self._refs and self._sub is not None:
                self._sub.close()
                self._sub = None

    # ------------------------------------------------------------------ the snapshot path

    def at(
        self, revision: Revision | None, scopes: Sequence[Scope], read_started: float
    ) -> tuple[Revision | None, tuple[LayerSkills, ...]]:
        """The scopes exactly as of one revision, no earlier than `revision`, which a read
        begun at `read_started` (`time.monotonic()`) returned. Free when the cache is there."""
        cache = self._cache
        if same_revision(cache.revision, revision):
            found = tuple(cache.scopes.get(s) for s in scopes)
            if None not in found:
                # the cached object, so that callers comparing snapshots hit identity
                return cache.revision, found  # type: ignore[return-value]  # no None left
        if not self._lock.acquire(timeout=deadline.left(LOCK_WAIT) if deadline.bounded() else -1):
            raise StoreUnavailable(
                f"{self.domain}: another reader has been waiting on {self.store.url} for "
                "this step's whole budget; retry"
            )
        try:
            cache = self._cache = self._advance(revision, read_started, scopes)
            self.verified_at = max(self.verified_at, read_started)
            return cache.revision, tuple(cache.scopes[s] for s in scopes)
        finally:
            self._lock.release()

    def _advance(
        self, revision: Revision | None, read_started: float, scopes: Sequence[Scope]
    ) -> _Cache:
        cache = self._cache
        current = cache.revision
        missing = [s for s in scopes if s not in cache.scopes]

        def kept() -> _Cache:
            """The cache as it is, with the scopes it misses loaded at its revision."""
            if not missing:
                return cache
            return self._sync(cache, current, missing, seen_at=cache.observed_at)

        if same_revision(revision, current):
            return kept()
        if (
            revision is not None
            and current is not None
            and revision.epoch == current.epoch
            and revision.counter > current.counter
        ):
            return self._sync(cache, revision, scopes, seen_at=time.monotonic())
        if current is not None and read_started <= cache.observed_at:
            return kept()  # that read may predate our newer observation: ours is as new
        if current is not None:
            log.warning(
                "%s: revision %s after %s (new epoch or went back); reloading",
                self.domain,
                revision,
                current,
            )
        return self._sync(
            _Cache(revision, {}, read_started), revision, scopes, seen_at=read_started
        )

    # ------------------------------------------------------------------ consistent reloads

    def _sync(
        self,
        cache: _Cache,
        target: Revision | None,
        want: Sequence[Scope],
        first: Sequence[Change] | None = None,
        *,
        seen_at: float,
    ) -> _Cache:
        """A cache exactly at one revision, no earlier than `target`, holding `want` too.

        `cache` is exact at its revision; `first` is the log after it when already read;
        `seen_at` is when the read that handed them (or `target`) returned: the result's
        `observed_at` unless this reads the store itself.
        Reloads only what changed in the scopes held (and the wanted ones missing), then
        labels the result with `find_cut`, reading again what a concurrent commit left out
        of date. Runs under the lock."""
        since = cache.revision
        if since is None:  # the domain was never written: every scope is empty
            return _Cache(None, {**cache.scopes, **dict.fromkeys(want, self._empty)}, -1.0)
        held: dict[Scope, LayerSkills] = dict(cache.scopes)
        whole = [s for s in want if s not in held]
        edited: dict[Scope, dict[str, Manifest]] = {}
        loaded: dict[Key, int] = {}
        need: dict[Scope, set[str]] = {}
        changes: list[Change] = list(first or [])
        upto = changes[-1].revision if changes else target
        observed = seen_at
        for _ in range(MAX_ROUNDS):
            if need:
                need = self._take_known(need, changes, held, edited, loaded)
            if whole or need:
                self._load(whole, need, held, edited, loaded)
                upto = self.store.log_reads.revisions([self.domain])[self.domain]
                observed = time.monotonic()
            read = len(changes)
            reset = self._read_log(since, upto, changes)
            if len(changes) > read:
                observed = time.monotonic()
            if reset is not None:  # a new epoch, the log trimmed, the domain wiped: again
                log.warning("%s: reset to %s while reloading; reloading", self.domain, reset)
                if reset.epoch == "":
                    return _Cache(None, dict.fromkeys({*held, *want}, self._empty), -1.0)
                since, whole, target = reset, [*{*held, *edited, *want}], reset
                held, edited, loaded, need, changes = {}, {}, {}, {}, []
                continue
            assert upto is not None  # else _read_log reported a reset
            whole_scopes = [s for s in edited if s not in held]
            cut = find_cut(
                since, changes, held.keys() | edited.keys(), loaded, whole_scopes, target, upto
            )
            if isinstance(cut, Revision):
                scopes = {s: held[s] for s in held if s not in edited}
                scopes.update({s: LayerSkills(m, self.store) for s, m in edited.items()})
                return _Cache(cut, scopes, observed)
            whole, need = [], {}
            for scope, skill in cut:
                need.setdefault(scope, set()).add(skill)
        raise StoreUnavailable(
            f"{self.domain}: no consistent view after {MAX_ROUNDS} reads, its skills change "
            "faster than they can be read; retry"
        )

    def _load(
        self,
        whole: Sequence[Scope],
        need: Mapping[Scope, set[str]],
        held: Mapping[Scope, LayerSkills],
        edited: dict[Scope, dict[str, Manifest]],
        loaded: dict[Key, int],
    ) -> None:
        """Load whole scopes and some skills of others; tombstones count as versions."""
        work: list[tuple[Scope, Iterable[str] | None]] = [(s, None) for s in whole]
        work += [(s, sorted(skills)) for s, skills in need.items()]
        for scope, skills in work:
            if skills is None:
                found = self.store.log_reads.load_scope(scope)
                into = edited[scope] = {}
                skills = found
            else:
                found = self.store.log_reads.load_skills(scope, list(skills))
                if scope not in edited:
                    edited[scope] = dict(held[scope].manifests)
                into = edited[scope]
            for skill in skills:
                m = found.get(skill)
                loaded[(scope, skill)] = m.version if m is not None else 0
                if m is None or m.deleted:
                    into.pop(skill, None)
                else:  # keyed by the manifest's own string: the row's copy is not kept
                    into[m.skill if m.skill == skill else skill] = m
                    self._prefetch.append(m)

    def _take_known(
        self,
        need: Mapping[Scope, set[str]],
        changes: Sequence[Change],
        held: Mapping[Scope, LayerSkills],
        edited: dict[Scope, dict[str, Manifest]],
        loaded: dict[Key, int],
    ) -> dict[Scope, set[str]]:
        """Take from the engine the manifests it already holds at the version the log last
        wrote (a grpc:// watch's events carry them): exactly what a load would find live at
        that change, so the cut stays exact (C4). Returns what is left to load."""
        last: dict[Key, tuple[str, int]] = {}
        for c in changes:
            if c.scope is not None and c.skill is not None:
                last[(c.scope, c.skill)] = (c.op, c.version or 0)
        left: dict[Scope, set[str]] = {}
        reads = self.store.log_reads
        for scope, skills in need.items():
            for skill in skills:
                op, version = last.get((scope, skill), ("", 0))
                m = reads.known_manifest(scope, skill, version) if op == "put" else None
                if m is None:
                    left.setdefault(scope, set()).add(skill)
                    continue
                if scope not in edited:
                    edited[scope] = dict(held[scope].manifests)
                into = edited[scope]
                loaded[(scope, skill)] = m.version
                if m.deleted:
                    into.pop(skill, None)
                else:
                    into[skill] = m
                    self._prefetch.append(m)
        return left

    def _read_log(
        self, since: Revision, upto: Revision | None, into: list[Change]
    ) -> Revision | None:
        """Extend `into` (the log after `since`) until it reaches `upto`. Returns the revision
        to start over from when that cannot be done: a reset, or `upto` in another line."""
        if into and into[-1].op == "reset":
            return into[-1].revision
        if upto is None:
            return EMPTY
        if upto.epoch != since.epoch or upto.counter < since.counter:
            return upto
        for _ in range(MAX_ROUNDS):
            last = into[-1].revision if into else since
            if last.counter >= upto.counter:
                return None
            page = self.store.log_reads.changes(self.domain, last, 0)
            if page and page[-1].op == "reset":
                return page[-1].revision
            if not page:  # the log lags the revision read: ask again
                time.sleep(0.001)
            into.extend(page)
        raise StoreUnavailable(f"{self.domain}: the change log did not reach {upto}; retry")

    # ------------------------------------------------------------------ the watch

    def on_watch(
        self, before: Revision, changes: list[Change], started: float, returned: float
    ) -> None:
        """The store's feed found `changes` after `before` (none: nothing new as of
        `started`; the wait came back at `returned`). Where the cache is elsewhere (a
        snapshot moved it, or the feed followed the domain from further on), it reads the
        log between itself and the end of `changes` instead. Errors propagate: the feed
        logs them, and the per-step revision check keeps every step correct."""
        with self._lock:
            cache = self._cache
            here = cache.revision or EMPTY
            if same_revision(here, before):
                self._apply(cache, changes, changes, returned)
                self.verified_at = max(self.verified_at, started)
            elif changes and cache.scopes:
                last = changes[-1].revision
                if here.epoch != last.epoch or here.counter < last.counter:
                    self._apply(cache, changes, None, returned)
                    self.verified_at = max(self.verified_at, returned)
        self._done()

    def _apply(
        self,
        cache: _Cache,
        changes: Sequence[Change],
        first: Sequence[Change] | None,
        seen_at: float,
    ) -> None:
        """Move the cache past `changes` (`first`: the log right after it, when that is
        what they are), read by a store call that returned at `seen_at`. Runs under the
        lock."""
        if changes and cache.revision is not None:
            self._cache = self._sync(cache, changes[-1].revision, (), first=first, seen_at=seen_at)
        elif changes:  # the domain was created, or the watch began before the first load
            # load what is held or tracked: a snapshot is about to ask for a tracked scope, and
            # the files are then warmed by this pass, not at whatever event comes next
            reset = changes[-1].revision
            want = [*cache.scopes, *(s for s in self._refs if s not in cache.scopes)]
            self._cache = self._sync(_Cache(reset, {}, -1.0), reset, want, seen_at=seen_at)

    def _done(self) -> None:
        """Warm the changed files, then tell `wait_for` how far the cache is."""
        with self._lock:
            prefetch, self._prefetch = self._prefetch, []
            ready = self._cache.revision
        self._warm(prefetch)
        if not same_revision(ready, self._ready):
            with self._lock:
                self._ready = ready
                self._changed.notify_all()

    def _warm(self, manifests: Sequence[Manifest]) -> None:
        """Read the changed skills' small files into the store's blob LRU, off the hot path."""
        entries = small_files(e for m in manifests for e in m.files.values())
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

    def wait_past(self, seen: Revision | None, timeout: float, until: Callable[[], bool]) -> None:
        """Block until the watch moves past `seen` (a `ready` read earlier), `until()` holds
        (looked at when `wake` is called) or `timeout` passes: what lets a server tell its
        clients of an edit as soon as it lands."""
        with self._changed:
            self._changed.wait_for(lambda: until() or not same_revision(self._ready, seen), timeout)

    def wake(self) -> None:
        """Let every `wait_past` look at its `until` again (a view closing ends its wait)."""
        with self._changed:
            self._changed.notify_all()


def follower_for(store: Store, domain: str) -> Follower:
    """The one follower of `domain` for this store object in this process."""
    return store.local(Follower, domain)
