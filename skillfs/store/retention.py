"""History retention and garbage collection of blobs: what a store drops, and when
(docs/design.md §2). `Store.prune` and `Store.gc` run these over the store's engine."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from skillfs.engines.base import CommitOp, Engine
from skillfs.errors import InvalidArgument
from skillfs.model import GcReport, Manifest, Scope, VersionSummary
from skillfs.store import name_register
from skillfs.store.quotas import Recount, usage_bytes
from skillfs.store.tables import Tables

log = logging.getLogger(__name__)


class HistoryPolicy(BaseModel):
    """A replaced version is kept while it is among the newest `keep_versions` or younger
    than `keep_days`, or while a label names it (docs/governance.md, "Labels and pins");
    older ones are dropped after a commit and by `gc()`."""

    model_config = ConfigDict(frozen=True)

    keep_versions: int = 50
    keep_days: float = 30.0

    def of(self, entry: str) -> HistoryPolicy:
        """The policy of one entry: a scope's name register keeps a few versions whatever
        their age (they hold nothing but their number, `store.name_register`)."""
        if name_register.is_register(entry):
            return HistoryPolicy(keep_versions=name_register.KEPT_VERSIONS, keep_days=0)
        return self


def _to_drop(
    policy: HistoryPolicy,
    now: float,
    history: Sequence[Manifest | VersionSummary],
    live: Manifest | None,
) -> list[int]:
    """The versions of a history (newest first) the policy no longer keeps: never one a label
    of the live version names."""
    cutoff = now - policy.keep_days * 86400
    labelled = {held.version for held in live.labels.values()} if live is not None else set()
    return [
        m.version
        for m in history[policy.keep_versions :]
        if m.committed_at < cutoff and m.version not in labelled
    ]


def prune(engine: Engine, policy: HistoryPolicy, now: float, scope: Scope, skill: str) -> int:
    """Drop the versions of a skill the policy no longer keeps; how many were dropped."""
    history = engine.history_summaries(scope, skill)
    if len(history) <= policy.keep_versions:
        return 0
    live = engine.load_skills(scope, [skill]).get(skill)  # its labels keep their versions
    drop = _to_drop(policy, now, history, live)
    if drop:
        engine.drop_history(scope, skill, drop)
    return len(drop)


def gc(
    tables: Tables,
    policy: HistoryPolicy,
    clock: Callable[[], float],
    domains: Iterable[str],
    grace: float,
    progress: Callable[[str, int], None] | None = None,
) -> GcReport:
    """Mark every blob a live or kept manifest references, then sweep the rest that no
    publisher touched since the mark started minus `grace` (re-checked atomically).

    The mark reads each scope whole, as stored: its live manifests, then the history of all
    its skills (`Engine.scope_history`, one round trip where the store allows), so its round
    trips grow with the scopes and with what it drops, not with the skills; a stored file
    table's chunks are marked with the files they list (`Tables.references`, each chunk once).
    The sweep reads the blob index in pages (`blob_shas`) and deletes only the unreferenced
    blobs, one call each."""
    engine = tables.inner
    started = clock()
    referenced: set[str] = set()
    dropped = 0
    for domain in domains:
        counted = engine.quota_used(domain)  # before the mark reads: see Recount.deltas
        recount = Recount()
        for scope in engine.scopes(domain):
            live = engine.load_scope(scope)
            histories = engine.scope_history(scope, sorted(live))
            now = clock()
            for skill, current in live.items():
                history = histories.get(skill, [])
                drop = _to_drop(policy.of(skill), now, history, current)
                if drop:
                    engine.drop_history(scope, skill, drop)
                    dropped += len(drop)
                    gone = set(drop)
                    history = [m for m in history if m.version not in gone]
                tables.references([current, *history], referenced)  # staged too
                kept = [*reversed(history), current]
                if not name_register.is_register(skill):  # the store's own: no quota counts it
                    recount.skill(scope, list(zip(kept, tables.footprints(kept), strict=True)))
                if progress:
                    progress("mark", 1)
        if counted is not None:
            if domain.startswith("agents/"):
                _count_usage(engine, domain.split("/", 1)[1], recount)
            engine.adjust_quota(domain, recount.deltas(counted))
    seen = deleted = 0
    cutoff = started - grace
    for digest in engine.blob_shas():
        seen += 1
        if digest not in referenced and engine.delete_blob_if_idle(digest, cutoff):
            deleted += 1
        if progress:
            progress("sweep", 1)
    return GcReport(
        blobs_seen=seen,
        blobs_referenced=len(referenced),
        blobs_deleted=deleted,
        history_dropped=dropped,
    )


def _count_usage(engine: Engine, agent: str, recount: Recount) -> None:
    """An agent's usage counters into its scopes' counts: a user's into the user's scope,
    the rest (loads without a user, drops' records, ids no scope may have) into the shared
    scope."""
    for user, skill in engine.usage_detail(agent):
        try:
            scope = Scope.user(agent, user) if user else Scope.shared(agent)
        except InvalidArgument:
            scope = Scope.shared(agent)
        recount.usage(scope, usage_bytes([(user, skill)]))


def prune_after_commit(
    engine: Engine, policy: HistoryPolicy, now: float, ops: Sequence[CommitOp]
) -> None:
    """Retention after a commit, amortized: a skill's history grows by one per version, so
    reading its summaries (bounded by the policy, whatever the skill's size) once every
    `keep_versions` versions keeps it within twice the policy at 1/keep_versions of a read per
    publish (gc() applies the policy to every skill). The commit has landed: a failure here
    is logged, never reported as the commit's."""
    for op in ops:
        own = policy.of(op.manifest.skill)
        older = op.manifest.version - 1
        if older > own.keep_versions and older % max(own.keep_versions, 1) == 0:
            try:
                prune(engine, own, now, op.scope, op.manifest.skill)
            except Exception as exc:  # the commit landed, whatever this says
                log.warning(
                    "history retention skipped for %s/%s: %s", op.scope, op.manifest.skill, exc
                )
