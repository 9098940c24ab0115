"""`Skills`: one worker's (agent, user) view of its layers, and a fresh snapshot per step.

`snapshot()` reads the revisions of the agent and its markets in one store call, asks the
followers for the scopes as of those revisions (free when their caches are current), checks
disk and Git layers by their own means, and returns the previous snapshot object itself when
nothing it depends on moved (C3). Layer states are immutable objects that change identity
when their content changes, so "did anything change" is a handful of `is` comparisons.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import operator
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

from skillfs.api import Store, open_store
from skillfs.errors import InvalidArgument, SkillfsError, StoreFailed, StoreUnavailable
from skillfs.model import Revision, Scope
from skillfs.model.names import check_id
from skillfs.model.pins import Pins
from skillfs.runtime.bound_tools import Binder, HostTool, check_host_tools
from skillfs.runtime.follower import LOCK_WAIT, Follower, follower_for
from skillfs.runtime.fsspec_dir import FsspecDir
from skillfs.runtime.git_repo import GitRepo
from skillfs.runtime.held import Held
from skillfs.runtime.layers import (
    Layer,
    LayerSkills,
    Market,
    Problem,
    SkillInfo,
    StoreScope,
    merge,
)
from skillfs.runtime.model_tools import ToolSet, check_tool_set
from skillfs.runtime.recovery import Recovery
from skillfs.runtime.sessions import MAX_SESSIONS, Sessions, Tracked
from skillfs.runtime.skill_writes import SkillWriter, WriteMode, check_mode
from skillfs.runtime.snapshot import MergedSkills, Snapshot
from skillfs.runtime.typed import TypedReadings
from skillfs.runtime.usage import UsageRecorder, recorder_for
from skillfs.util.deadline import bounded, budget, left

log = logging.getLogger("skillfs.runtime")


class _Reported:
    """Market domains already reported missing for a store object in this process: a typo
    is said once, not per step (`store.local`)."""

    def __init__(self, _store: Store, _name: str) -> None:
        self.domains: set[str] = set()


def _identical(a: tuple[LayerSkills, ...], b: tuple[LayerSkills, ...]) -> bool:
    """Did no layer change? Layer states are immutable, so identity says it."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


class Skills:
    """The skills a worker for (agent, user) sees: `layers` lowest first (docs/design.md §1: a
    project-global directory, then marketplaces), then the agent-shared and per-user scopes.

    With `max_staleness` (seconds), a snapshot skips the store round trip while every
    follower's watch confirmed its cache within that many seconds: zero round trips for a
    bounded delay in seeing an edit (it gives up C3). Off by default.

    `environment` (e.g. "prod") is what this worker declares to staged rollouts: a skill's
    candidate reaches it where the rule lists that environment (docs/governance.md).

    `pins` hold this worker on labelled versions (docs/governance.md, "Labels and pins"): a
    `Pins`, or a label for every store layer (`pins="stable"`). A skill its pin's label names
    is served at that version until the label moves; one without the label at its head.

    `followers` (a domain's follower) and `usage` (the agent's recorder) replace the store's
    own (`follower_for`, `store.local`): the server flushes its views' usage itself, so a
    view starts no thread (docs/server.md); a test gives a follower it feeds by hand.

    `skill_writes` ("draft" or "live"; off by default) adds the tools `propose_skill` and
    `skill_manage` to every snapshot: the agent writes skills to this user's scope, as
    drafts for review or live (docs/governance.md, "Agent-written skills").

    `tools` names the tool set the model is given: "default", or a host's ("harness9",
    "saa"; docs/runtime.md, "Tool sets").

    A snapshot is of one conversation's session (`snapshot(session=)`, a thread or run id;
    docs/runtime.md, "Sessions"): the skills its model loaded and disabled. The worker keeps
    `max_sessions` of them, the least recently used forgotten first; without an id, a
    snapshot is of the worker's own session.

    `host_tools` registers the host's own tools, each marked bindable or not: a bindable one
    is offered in a session (`snap.host_tools`) only while a skill its model loaded there
    names it in `allowed-tools`, from a layer in `trusted_layers` (labels; by default the
    agent-shared scope and the markets, never the user's scope; docs/runtime.md, "Tools
    bound to skills").

    Close it (`close()`, or `with Skills(...) as skills:`): that releases its scopes and,
    when `store` was a URL, closes the store it opened. A store object you pass in is yours
    to close. One dropped unclosed is released when it and its snapshots are collected
    (with a ResourceWarning when it had opened its store)."""

    def __init__(
        self,
        store: Store | str,
        agent_id: str,
        user_id: str,
        layers: Sequence[FsspecDir | GitRepo | Market] = (),
        *,
        max_staleness: float | None = None,
        environment: str | None = None,
        pins: Pins | str | None = None,
        followers: Callable[[str], Follower] | None = None,
        usage: UsageRecorder | None = None,
        skill_writes: WriteMode | None = None,
        tools: ToolSet = "default",
        max_sessions: int = MAX_SESSIONS,
        host_tools: Sequence[HostTool] = (),
        trusted_layers: Collection[str] | None = None,
    ) -> None:
        self.skill_writes = check_mode(skill_writes)
        #: The tools the model is given (runtime/model_tools.py).
        self.tool_set = check_tool_set(tools)
        #: The worker's own session, and those named by the host (runtime/sessions.py).
        self._session = Tracked()
        self._sessions = Sessions(max_sessions)
        self.agent_id = check_id("agent", agent_id)
        self.user_id = check_id("user", user_id)
        self.environment = None if environment is None else check_id("environment", environment)
        self.max_staleness = max_staleness
        for layer in layers:
            if not isinstance(layer, FsspecDir | GitRepo | Market):
                raise InvalidArgument(
                    f"layer {layer!r} is not a LocalDir, FsspecDir, GitRepo or Market: "
                    "the agent-shared and per-user scopes are added on top by themselves"
                )
        self.layers: tuple[Layer, ...] = (
            *layers,
            StoreScope(Scope.shared(agent_id)),
            StoreScope(Scope.user(agent_id, user_id)),
        )
        stored = [x.label for x in self.layers if x.scope is not None]
        self.pins = Pins.given(pins).check_layers(stored)
        dirs = [layer.source_dir for layer in self.layers]
        if len(set(dirs)) != len(dirs):
            twice = sorted({d for d in dirs if dirs.count(d) > 1})
            raise InvalidArgument(
                f"two layers share the name {', '.join(twice)}: give them distinct name=..."
            )
        self._binder = Binder(check_host_tools(host_tools), self._trusted(trusted_layers))
        opened = None  # the store this worker opened itself (the arguments checked first)
        if isinstance(store, Store):
            self.store = store
        else:
            self.store = opened = open_store(store)
        self._writer = (
            None
            if self.skill_writes is None
            else SkillWriter(self.store, self.agent_id, self.user_id, self.skill_writes)
        )
        # Store layers grouped by domain: one follower each, the agent's domain first.
        plan: dict[str, tuple[list[Scope], list[int]]] = {f"agents/{agent_id}": ([], [])}
        for i, each in enumerate(self.layers):
            if each.scope is not None:
                scopes, idx = plan.setdefault(each.scope.domain, ([], []))
                scopes.append(each.scope)
                idx.append(i)
        self._domains = list(plan)
        follower_of = followers or (lambda d: follower_for(self.store, d))
        self._plan = [(follower_of(d), *group) for d, group in plan.items()]
        if max_staleness is not None:  # the watches must confirm at least that often
            for follower, _, _ in self._plan:
                follower.watch_timeout = min(follower.watch_timeout, max(max_staleness / 2, 0.01))
        self._usage: UsageRecorder = usage or recorder_for(self.store, agent_id)
        self._readings = self.store.local(TypedReadings, "typed readings")
        self._disk = [
            (i, x) for i, x in enumerate(self.layers) if isinstance(x, FsspecDir | GitRepo)
        ]
        self._lock = threading.Lock()
        # no reference to self: a collected worker must not be kept alive by its probe
        probe = functools.partial(self.store.domain_revisions, list(self._domains))
        self._recovery = Recovery(probe, log, f"worker {self!r}")
        self._held = Held(
            [(f, scopes) for f, scopes, _ in self._plan],
            self._recovery,
            self._usage,
            opened,
            own_usage=opened is not None and usage is None,
            what=repr(self),
        )
        self._lease = self._held.lease()
        self._confirmed = -float("inf")  # when the last store round trip started
        # The merged view of the layer states last seen, shared by every session.
        self._states: tuple[LayerSkills, ...] = ()
        self._view: tuple[list[SkillInfo], list[Problem]] | None = None
        self._seen: dict[str, Revision | None] = {}
        #: The merged skills of `_view` with nothing hidden: shared by the sessions that hid
        #: nothing, so their prompt and tools are computed once.
        self._shared: MergedSkills | None = None

    def __repr__(self) -> str:
        env = f", environment={self.environment}" if self.environment else ""
        pins = f", pins={self.pins.describe()}" if self.pins else ""
        return f"Skills({self.store.url}, {self.agent_id}/{self.user_id}{env}{pins})"

    @property
    def host_tools(self) -> tuple[HostTool, ...]:
        """The host's tools as registered (`host_tools=`), in that order."""
        return self._binder.tools

    def _trusted(self, labels: Collection[str] | None) -> frozenset[str]:
        """The labels of the layers whose skills may bind host tools: `labels` checked, or
        the shared scope and the markets; never the user's scope, where users and agents
        write (a skill there would widen the agent's tools)."""
        user = self.layers[-1].label
        if labels is None:
            return frozenset(x.label for x in self.layers if isinstance(x, Market)) | {
                self.layers[-2].label
            }
        if isinstance(labels, str):
            raise InvalidArgument(f"trusted_layers={labels!r}: give a list of layer labels")
        known = [x.label for x in self.layers]
        for label in labels:
            if label == user:
                raise InvalidArgument(
                    f"trusted_layers: {label!r} is the user's scope, where users and agents "
                    "write skills; its skills never bind host tools"
                )
            if label not in known:
                raise InvalidArgument(
                    f"trusted_layers: no layer is labelled {label!r}; layers: {', '.join(known)}"
                )
        return frozenset(labels)

    @property
    def followers(self) -> list[Follower]:
        """The watches this worker's store layers are served from (agent first, then markets)."""
        return [f for f, _, _ in self._plan]

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, *, allow_stale: bool = False, session: str | None = None) -> Snapshot:
        """The skills for the next reasoning step (C3-C5), within one budget: the store's
        `retry_for` for every store call the step makes (docs/runtime.md), as the
        conversation `session` changed them (its id; None: the worker's own session).

        With `allow_stale`, a store outage returns the last snapshot marked `stale` instead
        of raising StoreUnavailable (docs/design.md §7: only where the caller asked for it),
        within the budget; once the outage is known, at once, while a background probe
        watches for the store's return. A store that fails (StoreFailed: a corrupt file, a
        full disk) counts as an outage here: the worker goes on with what it has. Under a
        caller's budget (a console page, an MCP call) the wait for another thread's snapshot
        of this worker ends with it too."""
        if not self._lock.acquire(timeout=left(LOCK_WAIT) if bounded() else -1):
            raise StoreUnavailable(
                f"store unavailable: {self.store.url} did not answer another snapshot of "
                f"{self!r} within this call's budget; retry"
            )
        try:
            if self._held.closed and self._held.opened is not None:
                raise SkillfsError(
                    f"{self!r} is closed, and so is the store it opened: make a new Skills"
                )
            self._held.track()
            sess = self._session if session is None else self._sessions.get(session)
            if allow_stale and self._view is not None and self._recovery.down:
                return self._of_session(sess, self._states, self._seen)._replace(stale=True)
            try:
                with budget(self.store.retry_for):
                    snap = self._snapshot(sess)
            except (StoreUnavailable, StoreFailed) as exc:  # a store down, or failing
                if allow_stale and self._view is not None:
                    self._recovery.failed(exc)
                    return self._of_session(sess, self._states, self._seen)._replace(stale=True)
                raise
            self._recovery.recovered()
            return snap
        finally:
            self._lock.release()

    def wait_changed(self, token: str, timeout: float, *, session: str | None = None) -> Snapshot:
        """Block until the view (of `session`, as `snapshot`) differs from the one whose
        token is `token`, `timeout` passes or the worker is closed, and return the snapshot
        then. Woken by the agent's watch as soon as it sees a change; markets, disk and Git
        layers are looked at about every second."""
        deadline = time.monotonic() + timeout
        while True:
            agent = self._plan[0][0]
            seen = agent.ready
            snap = self.snapshot(session=session)
            left = deadline - time.monotonic()
            if snap.token != token or left <= 0:
                return snap
            agent.wait_past(seen, min(left, 1.0), until=lambda: not self._held.tracking)
            if not self._held.tracking:  # closed meanwhile: end now, tracking nothing again
                return snap

    async def asnapshot(self, *, allow_stale: bool = False, session: str | None = None) -> Snapshot:
        """`snapshot()` for asyncio code, run in a worker thread (the store clients block)."""
        return await asyncio.to_thread(self.snapshot, allow_stale=allow_stale, session=session)

    def _snapshot(self, sess: Tracked) -> Snapshot:
        started = time.monotonic()
        revisions: dict[str, Revision | None]
        if self._fresh_enough(started):
            revisions = {f.domain: f.revision for f, _, _ in self._plan}
            read_started = -float("inf")  # ask nothing: take each follower as it is
        else:
            revisions = self.store.domain_revisions(self._domains)  # the one round trip (C3)
            read_started = self._confirmed = started
        states: list[LayerSkills | None] = [None] * len(self.layers)
        seen: dict[str, Revision | None] = {}
        for follower, scopes, idx in self._plan:
            rev, got = follower.at(revisions[follower.domain], scopes, read_started)
            seen[follower.domain] = rev
            for i, state in zip(idx, got, strict=True):
                states[i] = state
        self._warn_missing(seen)
        for i, layer in self._disk:
            states[i] = layer.state()
        now = cast(tuple[LayerSkills, ...], tuple(states))  # every slot is filled above
        if self._view is None or not _identical(now, self._states):
            pairs = list(zip(self.layers, now, strict=True))
            self._view = merge(pairs, self.user_id, self.environment, self.pins)
            self._states, self._shared = now, None
        self._seen = seen
        return self._of_session(sess, now, seen)

    def _of_session(
        self, sess: Tracked, now: tuple[LayerSkills, ...], seen: dict[str, Revision | None]
    ) -> Snapshot:
        """The snapshot of `sess` over the merged view of the layer states `now`: its last
        one itself while nothing it depends on moved (C3)."""
        last, session = sess.last, sess.session
        hidden = session.hidden
        if last is not None and _identical(now, sess.states):
            merged = last.merged
            if merged.hidden != hidden:  # the model disabled a skill: same skills
                merged = MergedSkills(last.skills, self._readings, hidden)
            bound = self._bound(sess, merged)
            if merged is last.merged and bound == last.bound_tools:
                if last.revisions == seen and not last.stale:
                    return last  # nothing moved: the same object, prompt and tools included
                snap = last._replace(revisions=seen, stale=False)
            else:
                snap = last._replace(
                    merged=merged,
                    revisions=seen,
                    stale=False,
                    bound_tools=bound,
                    host_tools=self._binder.offered(bound),
                )
        else:
            assert self._view is not None  # merged before any session's snapshot
            skills, problems = self._view
            merged = self._merged(skills, hidden)
            if last is not None and last.merged.token == merged.token:
                merged = last.merged  # same skills: keep the prompt and tools computed for them
            bound = self._bound(sess, merged)
            snap = Snapshot(
                merged,
                agent_id=self.agent_id,
                user_id=self.user_id,
                revisions=seen,
                problems=problems,
                usage=self._usage,
                writer=self._writer,
                lease=self._lease,
                tool_set=self.tool_set,
                session=session,
                bound_tools=bound,
                host_tools=self._binder.offered(bound),
            )
        sess.last, sess.states = snap, now
        return snap

    def _bound(self, sess: Tracked, merged: MergedSkills) -> tuple[str, ...]:
        """The host tools the session's loaded skills bind, among those still in its view:
        its last snapshot's while the skills and the loads are the same objects (no
        frontmatter is read again at a step where nothing moved)."""
        if not self._binder.bindable:
            return ()
        loaded = sess.session.keep_loaded(merged.model_ids)
        last = sess.last
        if last is not None and last.merged is merged and loaded is sess.bound_from:
            return last.bound_tools
        sess.bound_from = loaded
        return self._binder.bound(merged.by_id[i] for i in sorted(loaded))

    def _merged(self, skills: list[SkillInfo], hidden: frozenset[str]) -> MergedSkills:
        if hidden:
            return MergedSkills(skills, self._readings, hidden)
        if self._shared is None:
            self._shared = MergedSkills(skills, self._readings)
        return self._shared

    def _warn_missing(self, seen: dict[str, Revision | None]) -> None:
        """A market that was never written is most likely a typo (`Market("typo")`): its layer
        is empty. Say so once per process and market, naming the markets that exist."""
        missing = [d for d, r in seen.items() if r is None and d.startswith("markets/")]
        if not missing:
            return  # every step: nothing more than this look
        reported = self.store.local(_Reported, "missing markets").domains
        for domain in missing:
            if domain in reported:
                continue
            reported.add(domain)
            known = ", ".join(self.store.markets()) or "none"
            log.warning(
                "market %r does not exist in %s: its layer is empty (markets: %s)",
                domain.split("/", 1)[1],
                self.store.url,
                known,
            )

    def _fresh_enough(self, now: float) -> bool:
        if self.max_staleness is None or self._view is None:
            return False
        return all(
            now - max(f.verified_at, self._confirmed) <= self.max_staleness
            for f, _, _ in self._plan
        )

    # ------------------------------------------------------------------ life cycle

    def flush_usage(self) -> None:
        """Write the pending load counts now (they are written in the background anyway)."""
        self._usage.flush()

    def close(self) -> None:
        """Release this worker's scopes from the followers, write its pending counts, and
        close the store it opened from a URL (a store passed in stays open: the caller's)."""
        with self._lock:
            self._held.release()

    def __enter__(self) -> Skills:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
