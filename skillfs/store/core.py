"""The store: the logic every engine shares, written once on top of `Engine`'s primitives.

Publishing hashes and validates the files, uploads the blobs the store lacks, then commits
the new manifests in one atomic engine step that compares versions. `Store` is the one
public class; its parts live beside it: the file-table rules (`store.limits`), the steps of a
commit that need no store (`store.commit`), blob chunks, ranges and cache (`store.blobs`),
history retention and GC (`store.retention`), following the change log (`store.changes`).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from skillfs.engines.base import Engine, MiB
from skillfs.errors import NotFound, StoreUnavailable
from skillfs.model import (
    Access,
    CommitResult,
    FileEntry,
    Finding,
    Manifest,
    Put,
    Remove,
    Scope,
    VersionSummary,
)
from skillfs.model.entry import DRAFTS, EntryKind, EntryRef
from skillfs.model.names import check_entry, is_hidden_dir, normalize_path
from skillfs.model.ops import Command, FileValue, WriteOptions
from skillfs.store import rules
from skillfs.store.blobs import Blobs
from skillfs.store.changes import Following, Watcher
from skillfs.store.committer import Committer, out_of_time
from skillfs.store.curate import Curation
from skillfs.store.drafts import Drafts
from skillfs.store.limits import Limits
from skillfs.store.opening import open_engine
from skillfs.store.retention import GcReport, HistoryPolicy, gc, prune
from skillfs.store.rollouts import Rollouts
from skillfs.store.usage import Usage
from skillfs.util.deadline import deadline

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")


class Store(Following, Rollouts, Drafts, Curation, Usage):
    """The public API of docs/design.md §2 over any engine; governed change (disable,
    audit, ...) from `Governance`, staged rollout from `Rollouts`, archive / restore from
    `SideEntries`, propose / approve / reject from `Drafts`, usage counts from `Usage`,
    curation from `Curation` (docs/governance.md)."""

    def __init__(
        self,
        engine: Engine,
        *,
        limits: Limits | None = None,
        history_policy: HistoryPolicy | None = None,
        gc_grace: float = 3600.0,
        blob_cache_bytes: int = 64 * MiB,
        retry_for: float = 10.0,
        clock: Callable[[], float] = time.time,
        actor: str | None = None,
    ) -> None:
        self.engine = engine
        self.actor = actor
        self.limits = limits or Limits()
        self.history_policy = history_policy or HistoryPolicy()
        self.gc_grace = gc_grace
        self.retry_for = retry_for
        self.clock = clock
        self._blobs = Blobs(engine, self._retrying, blob_cache_bytes)
        self._watches: list[Watcher] = []  # `watched_by`
        self.committer = Committer(
            engine=engine,
            blobs=self._blobs,
            limits=self.limits,
            history_policy=self.history_policy,
            clock=lambda: self.clock(),
            retry_for=retry_for,
            retrying=self._retrying,
            missing=self.missing,
            markets=self.markets,
            actor=actor,
        )

    @property
    def url(self) -> str:
        return self.engine.url

    @property
    def max_ops(self) -> int | None:
        """The most skills one atomic commit may change on this store; None: no limit."""
        return self.engine.max_ops

    def access(self, scope: Scope) -> Access:
        """What the caller may do in `scope`, asked before work a refusal would waste: everything
        on a store reached directly, the token's grants on a skillfs server (grpc://)."""
        return self.engine.access(scope)

    def close(self) -> None:
        self._close_watches()
        self.engine.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def publish(
        self,
        scope: Scope,
        skill: str,
        files: Mapping[str, FileValue],
        expected_version: int | None = None,
        *,
        commit_id: str | None = None,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Replace a skill's whole file set (one-skill `commit`)."""
        return self.commit(
            [Put(scope, skill, files, expected_version)],
            commit_id=commit_id,
            strict=strict,
            actor=actor,
            message=message,
        )

    def delete(
        self,
        scope: Scope,
        skill: str,
        expected_version: int | None = None,
        *,
        commit_id: str | None = None,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        return self.commit(
            [Remove(scope, skill, expected_version)],
            commit_id=commit_id,
            actor=actor,
            message=message,
        )

    def rollback(
        self,
        scope: Scope,
        skill: str,
        version: int,
        expected_version: int | None = None,
        *,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Publish a new version whose files equal those of `version`."""
        old = self.manifest(scope, skill, version=version)
        if old.deleted or not old.files:  # a deletion, a staged-only skill, a hiding entry
            what = (
                "is a deletion" if old.deleted else "holds no live files (staged only, or hiding)"
            )
            raise NotFound(f"version {version} of {scope}/{skill} {what}: pick another version")
        message = message or f"rollback to version {version}"
        return self.publish(
            scope, skill, dict(old.files), expected_version, strict=strict, actor=actor,
            message=message,
        )  # fmt: skip

    def commit(
        self,
        changes: Sequence[Command],
        *,
        commit_id: str | None = None,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Several writes of one agent (or one market), all or nothing (docs/design.md §2):
        Puts and Removes, and any governed command (skillfs.model.ops). Each is held to every
        rule of the Committer.

        `strict` is the admin surfaces' policy (docs/design.md §7): a skill with error findings
        is refused with InvalidSkill carrying them, before anything is uploaded. `actor` and
        `message` say who made the change and why (default: this store's `actor`)."""
        options = WriteOptions(actor=actor, message=message, commit_id=commit_id)
        return self.committer.commit(changes, options, strict=strict)

    def check_commit(self, targets: Sequence[tuple[Scope, str]], domain: str | None = None) -> str:
        """The shape every commit must have, whoever built it (`rules.check_shape`); returns
        the domain."""
        return rules.check_shape(targets, domain, self.max_ops)

    def inspect(
        self,
        skill: str,
        files: Mapping[str, FileEntry],
        unstored: Mapping[str, bytes] | None = None,
    ) -> tuple[dict[str, Any] | None, list[Finding]]:
        """A skill's frontmatter and findings as its SKILL.md says, read once per write; the
        other files are named but not read. `unstored` holds bytes not uploaded yet."""
        return self.committer.inspect(skill, files, unstored)

    def who(self, actor: str | None = None) -> str:
        """The actor a commit is recorded by: `actor`, else the store's, else the default."""
        return self.committer.who(actor)

    def _retrying(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Retry an idempotent engine call while the store is unavailable, up to `retry_for`
        or the end of the budget it runs under (`skillfs.util.deadline`), whichever is first."""
        end = deadline(self.retry_for)
        delay = 0.05
        while True:
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            except StoreUnavailable:
                if out_of_time(end, started):
                    raise
                time.sleep(min(delay, end - time.monotonic()))
                delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------------ history retention

    def prune(self, scope: Scope, skill: str) -> int:
        """Apply this store's history policy to one skill now; how many versions it dropped."""
        return prune(self.engine, self.history_policy, self.clock(), scope, skill)

    def gc(
        self, grace: float | None = None, progress: Callable[[str, int], None] | None = None
    ) -> GcReport:
        """Prune every skill's history, then sweep the blobs nothing references that no
        publisher touched within `grace` seconds (default `gc_grace`)."""
        domains = self._retrying(self.engine.stored_domains)
        grace = self.gc_grace if grace is None else grace
        return gc(self.engine, self.history_policy, self.clock, domains, grace, progress)

    # ------------------------------------------------------------------ reads

    def manifests(
        self, scope: Scope, skills: Sequence[str] | None = None, *, deleted: bool = False
    ) -> dict[str, Manifest]:
        """A scope's live skills (or those of `skills`) in one round trip; `deleted`: tombstones."""
        loaded = (
            self.entries(scope)
            if skills is None
            else self._retrying(self.engine.load_skills, scope, list(skills))
        )
        return {k: m for k, m in loaded.items() if m.deleted == deleted}

    def entries(self, scope: Scope) -> dict[str, Manifest]:
        """Every manifest of a scope, tombstones and side entries included, in one round trip."""
        return self._retrying(self.engine.load_scope, scope)

    def manifest(self, scope: Scope, skill: str, version: int | None = None) -> Manifest:
        """The latest manifest, or the given version from history (a deletion's too, as
        `history` lists it)."""
        check_entry(skill)
        live = self._retrying(self.engine.load_skills, scope, [skill]).get(skill)
        if version is None or (live is not None and live.version == version):
            if live is None or (live.deleted and version is None):
                raise self.missing(scope, skill)
            return live
        found = self._retrying(self.engine.history_version, scope, skill, version)
        if found is not None:
            return found
        if live is None:
            raise self.missing(scope, skill)
        older = self._retrying(self.engine.history_summaries, scope, skill)
        kept = ", ".join(str(v) for v in [live.version, *(m.version for m in older)])
        raise NotFound(
            f"version {version} of {scope}/{skill} is not kept (current version {live.version}); "
            f"kept versions: {kept}"
        )

    def resolve(self, scope: Scope, skill: str) -> tuple[Scope, Manifest] | None:
        """One skill as `scope` sees it: a user scope's own skill, else its agent's shared
        skill of that name (docs/design.md §1); None when neither has it. Every surface that
        shows or edits "what this user has" asks here."""
        own = self.manifests(scope, [skill]).get(skill)
        if own is not None:
            return scope, own
        if scope.kind != "user" or scope.agent_id is None:
            return None
        shared = Scope.shared(scope.agent_id)
        found = self.manifests(shared, [skill]).get(skill)
        return (shared, found) if found is not None else None

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        """Every kept version of a skill, whole, newest first, the live one (or its tombstone)
        first. A listing reads `versions` instead."""
        live = self._retrying(self.engine.load_skills, scope, [skill]).get(skill)
        older = self._retrying(self.engine.history, scope, skill)
        if live is None and not older:
            raise self.missing(scope, skill)
        return ([live] if live else []) + older

    def versions(self, scope: Scope, skill: str) -> list[VersionSummary]:
        """Every kept version of a skill without its file table, newest first, the live one
        (or its tombstone) first: what a history listing shows, small whatever the skill's
        size; `manifest(scope, skill, version=)` reads one whole."""
        live = self._retrying(self.engine.load_skills, scope, [skill]).get(skill)
        older = self._retrying(self.engine.history_summaries, scope, skill)
        if live is None and not older:
            raise self.missing(scope, skill)
        return ([live.summary()] if live else []) + older

    def read(self, scope: Scope, skill: str, path: str, version: int | None = None) -> bytes:
        m = self.manifest(scope, skill, version)
        return self.read_entry(self.entry(m, scope, path))

    @staticmethod
    def entry(m: Manifest, scope: Scope, path: str) -> FileEntry:
        norm = normalize_path(path)
        entry = m.files.get(norm)
        if entry is None:
            raise NotFound(
                f"{scope}/{m.skill} (version {m.version}) has no file {path!r}; files: "
                + ", ".join(sorted(m.files))
            )
        return entry

    def read_entry(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes:
        """A file's bytes (or the range [start, end)), reading only the chunks it covers."""
        return self._blobs.read(entry, start, end)

    def read_cached(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes | None:
        """`read_entry` when the file is in this process's blob cache, else None: no store
        call, so an event loop may ask (the server's ReadFile)."""
        return self._blobs.read_cached(entry, start, end)

    def read_entries(self, entries: Iterable[FileEntry]) -> dict[str, bytes]:
        """Many files' bytes by SHA-256, the uncached ones in one batched round trip."""
        return self._blobs.read_many(entries)

    def read_blob(self, sha: str, start: int = 0, end: int | None = None) -> bytes:
        """A range of a blob known only by its hash (the server's global readers)."""
        return self._blobs.read_unsized(sha, start, end)

    def put_blob(self, sha: str, data: bytes, now: float) -> None:
        """Store one blob's bytes, already hashed to `sha`, in the engine's chunks."""
        self._blobs.put(sha, data, now)

    # ------------------------------------------------------------------ listings

    def agents(self) -> list[str]:
        domains = self._retrying(self.engine.domains)
        return [d.split("/", 1)[1] for d in domains if d.startswith("agents/")]

    def markets(self) -> list[str]:
        domains = self._retrying(self.engine.domains)
        return [d.split("/", 1)[1] for d in domains if d.startswith("markets/")]

    def scopes(self, target: str | Scope) -> list[Scope]:
        return self._retrying(self.engine.scopes, self._domain_of(target))

    def users(self, agent: str) -> list[str]:
        return sorted(s.user_id for s in self.scopes(agent) if s.user_id is not None)

    def missing(self, scope: Scope, entry: str, *, below: bool = False) -> NotFound:
        """The NotFound of `entry`, naming what `scope` holds of its kind: the skills, the
        drafts or the archived skills (`below`: the agent's shared scope and the markets were
        looked at too)."""
        ref = EntryRef.parse(entry)
        held = [(EntryRef.parse(k), m) for k, m in self.entries(scope).items()]
        names = sorted(r.name for r, m in held if r.kind is ref.kind and not m.deleted)
        if ref.is_skill:
            names = [n for n in names if not is_hidden_dir(n)]
        shown = ", ".join(names[:50]) + (" …" if len(names) > 50 else "") if names else "none"
        if ref.kind is EntryKind.DRAFT:
            if any(
                r.kind is EntryKind.LEGACY and r.name == DRAFTS and not m.deleted
                and any(p.startswith(f"{ref.name}/") for p in m.files)
                for r, m in held
            ):  # fmt: skip
                return NotFound(
                    f"the draft {ref.name!r} in {scope} is held in the single `_drafts` manifest "
                    "of an older skillfs: split it into entries first (store.split_legacy, "
                    "`skillfs drafts split`), then review it"
                )
            return NotFound(f"no draft {ref.name!r} in {scope}; drafts there: {shown}")
        if ref.kind is EntryKind.ARCHIVED:
            return NotFound(f"no archived skill {ref.name!r} in {scope}; archived there: {shown}")
        where = " (nor its agent's shared scope or any market)" if below else ""
        return NotFound(f"skill {entry!r} does not exist in {scope}{where}; skills there: {shown}")

    def skills(self, scope: Scope) -> list[str]:
        """A scope's live skills; its drafts and archived skills (`_drafts/`, `.archive/`) are
        not skills (docs/design.md §1)."""
        return sorted(k for k in self.manifests(scope) if not is_hidden_dir(k))


#: The keyword options `Store` takes (the rest of open_store's options go to the engine).
_STORE_OPTIONS = frozenset(inspect.signature(Store).parameters) - {"engine"}


def open_store(url: str | None = None, **options: Any) -> Store:
    """A store by URL (docs/design.md §2); `$SKILLFS_STORE` or the embedded SQLite file when
    None. Every surface opens its store here.

    Options go to `Store` (limits, history_policy, gc_grace, blob_cache_bytes, retry_for)
    or to the engine (e.g. `token` for grpc://)."""
    store_opts = {k: v for k, v in options.items() if k in _STORE_OPTIONS}
    engine_opts = {k: v for k, v in options.items() if k not in _STORE_OPTIONS}
    return Store(open_engine(url, **engine_opts), **store_opts)
