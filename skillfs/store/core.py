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
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from skillfs.engines.base import Engine, MiB, VersionMismatch
from skillfs.errors import Conflict, InvalidPath, NotFound, StoreUnavailable
from skillfs.model import (
    Access,
    CommitResult,
    File,
    FileEntry,
    Finding,
    Manifest,
    Put,
    Remove,
    Scope,
    VersionSummary,
)
from skillfs.model.names import (
    SIDE_DIRS,
    check_entry,
    check_live_name,
    entry_name,
    is_hidden_dir,
    normalize_path,
    side_entry,
)
from skillfs.spec.skill_md import SKILL_MD, inspect_skill
from skillfs.store.blobs import Blobs
from skillfs.store.changes import Following, Watcher
from skillfs.store.commit import (
    Prepared,
    already_committed,
    check_shape,
    file_table,
    in_history,
    next_ops,
    ours,
    refuse_errors,
)
from skillfs.store.curate import Curation
from skillfs.store.drafts import Drafts
from skillfs.store.governance import check_commit_id, check_message
from skillfs.store.limits import Limits
from skillfs.store.opening import open_engine
from skillfs.store.retention import GcReport, HistoryPolicy, gc, prune, prune_after_commit
from skillfs.store.rollouts import Rollouts
from skillfs.store.usage import Usage
from skillfs.util.deadline import bounded, deadline

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
        files: Mapping[str, File | bytes | FileEntry],
        expected_version: int | None = None,
        *,
        commit_id: str | None = None,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Replace a skill's whole file set (one-skill `commit`)."""
        return self.commit(
            [
                Put(
                    scope,
                    skill,
                    dict(files) if isinstance(files, Mapping) else files,
                    expected_version,
                )
            ],
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
        changes: Sequence[Put | Remove],
        *,
        commit_id: str | None = None,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Several skills of one agent (or one market), all or nothing (docs/design.md §2).

        `strict` is the admin surfaces' policy (docs/design.md §7): a skill with error findings
        is refused with InvalidSkill carrying them, before anything is uploaded. `actor` and
        `message` say who made the change and why (default: this store's `actor`)."""
        domain = self.check_commit([(ch.scope, ch.skill) for ch in changes])
        prepared = self._prepared(changes, strict=strict, actor=actor, message=message)
        return self._commit(domain, prepared, commit_id or uuid.uuid4().hex)

    def _prepared(
        self,
        changes: Sequence[Put | Remove],
        *,
        strict: bool,
        actor: str | None,
        message: str,
        bases: Mapping[tuple[Scope, str], int] | None = None,
    ) -> list[Prepared]:
        """Everything a commit does before its atomic step: files checked against the limits,
        hashed and inspected, the strict policy applied, the new blobs uploaded. A staged
        candidate (`store.rollouts`) is prepared here too."""
        for ch in changes:
            if not isinstance(ch, Put):
                continue
            if ch.skill in SIDE_DIRS:
                raise InvalidPath(
                    f"{ch.skill!r} holds one entry per skill: write {ch.skill}/<name> "
                    "(docs/governance.md)"
                )
            if side_entry(ch.skill) is None:
                check_live_name(ch.skill)  # `_x`, `.x`: a directory no worker reads as a skill
            elif not ch.files:
                raise InvalidPath(f"skill {ch.skill!r} has no files")
        now = self.clock()
        blobs: dict[str, bytes] = {}  # the new bytes of every Put, uploaded together
        tables = [
            None if isinstance(ch, Remove) else file_table(self.limits, ch, blobs, now)
            for ch in changes
        ]
        who = {"actor": self.who(actor), "message": check_message(message)}
        prepared = self._based(
            [
                self._prepare(ch, t, blobs).model_copy(update=who)
                for ch, t in zip(changes, tables, strict=True)
            ],
            bases,
        )
        if strict:
            for p in prepared:
                refuse_errors(p.skill, p.findings)
        refs = {e.sha256 for t in tables if t for e in t.values()} - blobs.keys()
        self._blobs.upload(blobs, refs, now)
        return prepared

    def check_commit(self, targets: Sequence[tuple[Scope, str]], domain: str | None = None) -> str:
        """The shape every commit must have, whoever built it (`store.commit.check_shape`);
        returns the domain."""
        return check_shape(targets, domain, self.max_ops)

    def _prepare(
        self, change: Put | Remove, entries: dict[str, FileEntry] | None, blobs: dict[str, bytes]
    ) -> Prepared:
        """A change after validation: a Put's SKILL.md inspected."""
        frontmatter, findings = (
            (None, []) if entries is None else self.inspect(change.skill, entries, blobs)
        )
        return Prepared(
            scope=change.scope,
            skill=change.skill,
            expected_version=change.expected_version,
            files=None if entries is None else dict(sorted(entries.items())),
            frontmatter=frontmatter,
            findings=findings,
        )

    def inspect(
        self,
        skill: str,
        files: Mapping[str, FileEntry],
        unstored: Mapping[str, bytes] | None = None,
    ) -> tuple[dict[str, Any] | None, list[Finding]]:
        """A skill's frontmatter and findings as its SKILL.md says, read once per write; the
        other files are named but not read. `unstored` holds bytes not uploaded yet."""
        texts = dict.fromkeys(files, b"")
        entry = files.get(SKILL_MD)
        if entry is not None:
            texts[SKILL_MD] = (unstored or {}).get(entry.sha256) or self.read_entry(entry)
        return inspect_skill(entry_name(skill), texts)

    def _commit(self, domain: str, prepared: list[Prepared], commit_id: str) -> CommitResult:
        check_commit_id(commit_id)
        end = deadline(self.retry_for)
        unsure = False  # a commit was sent and its answer lost: it may have landed
        for attempt in range(1000):
            current: dict[tuple[Scope, str], Manifest] = {}
            for scope in {p.scope for p in prepared}:
                skills = [p.skill for p in prepared if p.scope == scope]
                loaded = self._retrying(self.engine.load_skills, scope, skills)
                current.update({(scope, k): m for k, m in loaded.items()})
            landed = ours(prepared, current, commit_id)
            if not landed and unsure:
                landed = in_history(self.engine, self._retrying, prepared, commit_id)
            if not landed:
                try:
                    ops = next_ops(prepared, current, commit_id, self.clock())
                except Conflict:  # against our own commit, another writer's on top? (C6)
                    if unsure or not in_history(self.engine, self._retrying, prepared, commit_id):
                        raise
                    landed = True
            if landed:
                return already_committed(
                    self.engine, self._retrying, domain, prepared, current, commit_id
                )
            started = time.monotonic()
            try:
                revision = self.engine.commit(domain, ops)
            except VersionMismatch:
                if time.monotonic() > end:
                    break
                time.sleep(min(0.001 * 2**attempt, 0.05))
                continue
            except StoreUnavailable:
                if _out_of_time(end, started):
                    raise
                unsure = True
                time.sleep(min(0.05 * 2**attempt, 1.0, max(end - time.monotonic(), 0.0)))
                continue
            prune_after_commit(self.engine, self.history_policy, self.clock(), ops)
            return CommitResult(
                revision=revision,
                commit_id=commit_id,
                versions={op.manifest.skill: op.manifest.version for op in ops},
            )
        raise Conflict(
            f"gave up after {self.retry_for:.0f}s of concurrent writers to the same skills; retry",
        )

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
                if _out_of_time(end, started):
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
                raise NotFound(self._no_skill(scope, skill))
            return live
        found = self._retrying(self.engine.history_version, scope, skill, version)
        if found is not None:
            return found
        if live is None:
            raise NotFound(self._no_skill(scope, skill))
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
            raise NotFound(self._no_skill(scope, skill))
        return ([live] if live else []) + older

    def versions(self, scope: Scope, skill: str) -> list[VersionSummary]:
        """Every kept version of a skill without its file table, newest first, the live one
        (or its tombstone) first: what a history listing shows, small whatever the skill's
        size; `manifest(scope, skill, version=)` reads one whole."""
        live = self._retrying(self.engine.load_skills, scope, [skill]).get(skill)
        older = self._retrying(self.engine.history_summaries, scope, skill)
        if live is None and not older:
            raise NotFound(self._no_skill(scope, skill))
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

    def skills(self, scope: Scope) -> list[str]:
        """A scope's live skills; its drafts and archived skills (`_drafts/`, `.archive/`) are
        not skills (docs/design.md §1)."""
        return sorted(k for k in self.manifests(scope) if not is_hidden_dir(k))


def _out_of_time(end: float, started: float) -> bool:
    """Whether a failed attempt begun at `started` leaves no time for another before `end`:
    none is left, or, under a step's budget, less than the failed one took (a store that
    hangs makes every attempt wait out the client's timeout, which would pass the budget;
    one that refuses fails fast and is tried until `end`). Outside a budget a last attempt
    may run past `end` (a lock held for a while is waited out, as before)."""
    now = time.monotonic()
    return now >= end or (bounded() and end - now < now - started)


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
