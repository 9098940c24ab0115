"""The store's core: the logic every engine shares, written once on top of `Engine`'s
primitives — reads, `commit` and its shorthands, retention and GC (docs/architecture.md, "The
core and its namespaces").

Every write ends in the `Committer` (`store.committer`), which holds it to every rule
(`store.rules`) before one atomic engine step that compares versions. Beside it: the
file-table rules (`store.limits`), blob chunks, ranges and cache (`store.blobs`), history
retention and GC (`store.retention`), following the change log (`store.changes`). The core
knows nothing of governance: `skillfs.api.Store`, what `open_store()` returns, composes it
with the governance services as namespaces.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ParamSpec, Self, TypeVar

from skillfs.engines.base import Charge, Engine, MiB
from skillfs.errors import InvalidArgument, NotFound, StoreUnavailable
from skillfs.model import (
    Access,
    CommitResult,
    FileEntry,
    GcReport,
    Manifest,
    Put,
    Remove,
    Revision,
    Scope,
    VersionSummary,
)
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.names import DRAFTS, check_domain, check_entry, is_hidden_dir, normalize_path
from skillfs.model.ops import DEFAULT, Command, FileValue, WriteOptions
from skillfs.remote.hints import hints_of
from skillfs.spec.profiles import Profiles
from skillfs.store import name_register
from skillfs.store.blobs import Blobs
from skillfs.store.changes import Changes, domain_of
from skillfs.store.committer import Committer, out_of_time
from skillfs.store.limits import Limits
from skillfs.store.locals import Locals
from skillfs.store.log_reads import LogReads
from skillfs.store.quotas import inline, settled, usage_forgotten
from skillfs.store.retention import HistoryPolicy, gc, prune
from skillfs.store.tables import Tables
from skillfs.util.deadline import deadline

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")


class StoreCore:
    """Reads and writes of docs/design.md §2 over any engine: one `Committer` for every
    write, one `Blobs` for file bytes, one `Changes` for following the change log."""

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
        profiles: Sequence[str] | None = None,
    ) -> None:
        #: Big file tables in chunks (store.tables) above a store's engine; a grpc:// engine
        #: leaves them to its server.
        self._tables = Tables(engine, lambda: self.clock()) if engine.table_chunks else None
        self.engine: Engine = self._tables or engine
        self.actor = actor
        #: The store's own host profiles (docs/validation.md, "Host profiles"): what a scope
        #: that names none of its own accepts (`store.host_profiles`).
        self.profiles = Profiles.of_store(profiles)
        self.limits = limits or Limits()
        self.history_policy = history_policy or HistoryPolicy()
        self.gc_grace = gc_grace
        self.retry_for = retry_for
        self.clock = clock
        self.blobs = Blobs(self.engine, self.retrying, blob_cache_bytes)
        self.changes = Changes(self.engine)
        #: Single-attempt reads for followers of the log (the runtime, the server).
        self.log_reads = LogReads(self.engine)
        self._locals = Locals()
        self.committer = Committer(
            engine=self.engine,
            blobs=self.blobs,
            limits=self.limits,
            history_policy=self.history_policy,
            clock=lambda: self.clock(),
            retry_for=retry_for,
            retrying=self.retrying,
            missing=self.missing,
            markets=self.markets,
            footprint=self._tables.footprint if self._tables else inline,
            actor=actor,
            profiles=self.profiles,
        )

    @property
    def url(self) -> str:
        return self.engine.url

    @property
    def max_ops(self) -> int | None:
        """The most skills one atomic commit may change on this store (one of the engine's
        entries is kept for the scope's name register); None: no limit."""
        return name_register.room(self.engine.max_ops)

    def access(self, scope: Scope) -> Access:
        """What the caller may do in `scope`, asked before work a refusal would waste: everything
        on a store reached directly, the token's grants on a skillfs server (grpc://)."""
        return hints_of(self.engine).access(scope)

    def local(self, kind: Callable[[Self, str], T], name: str) -> T:
        """The one `kind(self, name)` of this store object in this process: the runtime's
        follower of a domain, its usage recorder of an agent. Closed with the store; a forked
        child makes its own."""
        return self._locals.get(lambda n: kind(self, n), kind, name)

    def close(self) -> None:
        self._locals.close()
        self.changes.close()
        self.engine.close()

    def __enter__(self) -> Self:
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
        options = WriteOptions(actor=actor, message=message, commit_id=commit_id)
        return self.commit(
            [Put(scope, skill, files, expected_version)], options=options, strict=strict
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
        options = WriteOptions(actor=actor, message=message, commit_id=commit_id)
        return self.commit([Remove(scope, skill, expected_version)], options=options)

    def rollback(
        self,
        scope: Scope,
        skill: str,
        version: int,
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """Publish a new version whose files equal those of `version` (`options`: who, why,
        the version it replaces, as `commit`; the message defaults to the rollback)."""
        old = self.manifest(scope, skill, version=version)
        if old.deleted or not old.files:  # a deletion, a staged-only skill, a hiding entry
            what = (
                "is a deletion" if old.deleted else "holds no live files (staged only, or hiding)"
            )
            raise NotFound(f"version {version} of {scope}/{skill} {what}: pick another version")
        put = Put(scope, skill, dict(old.files), options.expected_version)
        said = options.or_message(f"rollback to version {version}")
        return self.commit([put], options=said, strict=strict)

    def commit(
        self,
        changes: Sequence[Command],
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """Several writes of one agent (or one market), all or nothing (docs/design.md §2):
        Puts and Removes, and any governed command (skillfs.model.ops). Each is held to every
        rule of the Committer.

        `strict` is the admin surfaces' policy (docs/design.md §7): a skill with error findings
        is refused with InvalidSkill carrying them, before anything is uploaded. `options` say
        who made the change and why (default: this store's `actor`) and the commit's id; each
        command carries the version it expects, so `options.expected_version` is not read."""
        return self.committer.commit(changes, options, strict=strict)

    def retrying(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
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

    def charge_token(self, domain: str, n: int, write: str) -> Charge | None:
        """`Committer.charge_token`: a token's write outside a commit, charged to it."""
        return self.committer.charge_token(domain, n, write)

    def refund(self, domain: str, charge: Charge, n: int) -> None:
        """Give back `n` bytes of a `charge_token` the write did not use."""
        if n > 0:
            self.retrying(self.engine.adjust_quota, domain, {charge.key: -n})

    def settle_usage(self, domain: str, charge: Charge, used: int) -> None:
        """A batch of usage counters charged as `charge`, of which `used` bytes were new: the
        rest given back, the used part kept through GC (`quotas.settled`)."""
        self.retrying(self.engine.adjust_quota, domain, settled(charge, used))

    def forget_usage(self, domain: str) -> None:
        """Every token gets back what its usage counters in `domain` took (all of them were
        dropped). A client of a skillfs server leaves it to the server, which drops them."""
        used = self.retrying(self.engine.quota_used, domain)
        deltas = usage_forgotten(used or {})
        if deltas:
            self.retrying(self.engine.adjust_quota, domain, deltas)

    # ------------------------------------------------------------------ history retention

    def prune(self, scope: Scope, skill: str) -> int:
        """Apply this store's history policy to one skill now; how many versions it dropped."""
        return prune(self.engine, self.history_policy.of(skill), self.clock(), scope, skill)

    def gc(
        self, grace: float | None = None, progress: Callable[[str, int], None] | None = None
    ) -> GcReport:
        """Prune every skill's history, then sweep the blobs nothing references that no
        publisher touched within `grace` seconds (default `gc_grace`). A client of a skillfs
        server has the server run it (`Engine.gc`)."""
        grace = self.gc_grace if grace is None else grace
        if self._tables is None:
            report = self.engine.gc(grace)
            if report is None:
                raise InvalidArgument(
                    f"store {self.url} cannot collect its blobs through this engine: open the "
                    "store by its URL to run gc"
                )
            return report
        domains = self.retrying(self.engine.stored_domains)
        return gc(self._tables, self.history_policy, self.clock, domains, grace, progress)

    # ------------------------------------------------------------------ reads

    def manifests(
        self, scope: Scope, skills: Sequence[str] | None = None, *, deleted: bool = False
    ) -> dict[str, Manifest]:
        """A scope's live skills (or those of `skills`) in one round trip; `deleted`: tombstones."""
        loaded = (
            self.entries(scope)
            if skills is None
            else self.retrying(self.engine.load_skills, scope, list(skills))
        )
        return {k: m for k, m in loaded.items() if m.deleted == deleted}

    def entries(self, scope: Scope) -> dict[str, Manifest]:
        """Every manifest of a scope, tombstones and side entries included, in one round trip
        (not the name register: the store's own, `store.name_register`)."""
        return name_register.hidden(self.retrying(self.engine.load_scope, scope))

    def manifest(self, scope: Scope, skill: str, version: int | None = None) -> Manifest:
        """The latest manifest, or the given version from history (a deletion's too, as
        `history` lists it)."""
        check_entry(skill)
        live = self.retrying(self.engine.load_skills, scope, [skill]).get(skill)
        if version is None or (live is not None and live.version == version):
            if live is None or (live.deleted and version is None):
                raise self.missing(scope, skill)
            return live
        found = self.retrying(self.engine.history_version, scope, skill, version)
        if found is not None:
            return found
        if live is None:
            raise self.missing(scope, skill)
        older = self.retrying(self.engine.history_summaries, scope, skill)
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
        live = self.retrying(self.engine.load_skills, scope, [skill]).get(skill)
        older = self.retrying(self.engine.history, scope, skill)
        if live is None and not older:
            raise self.missing(scope, skill)
        return ([live] if live else []) + older

    def versions(self, scope: Scope, skill: str) -> list[VersionSummary]:
        """Every kept version of a skill without its file table, newest first, the live one
        (or its tombstone) first: what a history listing shows, small whatever the skill's
        size; `manifest(scope, skill, version=)` reads one whole."""
        live = self.retrying(self.engine.load_skills, scope, [skill]).get(skill)
        older = self.retrying(self.engine.history_summaries, scope, skill)
        if live is None and not older:
            raise self.missing(scope, skill)
        return ([live.summary()] if live else []) + older

    def read(self, scope: Scope, skill: str, path: str, version: int | None = None) -> bytes:
        m = self.manifest(scope, skill, version)
        return self.read_entry(file_of(m, scope, path))

    def read_entry(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes:
        """A file's bytes (or the range [start, end)), reading only the chunks it covers."""
        return self.blobs.read(entry, start, end)

    def read_entries(self, entries: Iterable[FileEntry]) -> dict[str, bytes]:
        """Many files' bytes by SHA-256, the uncached ones in one batched round trip."""
        return self.blobs.read_many(entries)

    # ------------------------------------------------------------------ revisions

    def revision(self, target: str | Scope) -> Revision | None:
        """The revision of an agent (by id) or of a scope's domain; None if never written."""
        domain = domain_of(target)
        return self.retrying(self.engine.revisions, [domain])[domain]

    def revisions(self, targets: Sequence[str | Scope]) -> dict[str, Revision | None]:
        """Several agents' or scopes' revisions read together, keyed by domain."""
        return self.domain_revisions([domain_of(t) for t in targets])

    def domain_revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """Several domains' revisions read together (C3's one round trip)."""
        return self.retrying(self.engine.revisions, [check_domain(d) for d in domains])

    # ------------------------------------------------------------------ listings

    def agents(self) -> list[str]:
        domains = self.retrying(self.engine.domains)
        return [d.split("/", 1)[1] for d in domains if d.startswith("agents/")]

    def markets(self) -> list[str]:
        domains = self.retrying(self.engine.domains)
        return [d.split("/", 1)[1] for d in domains if d.startswith("markets/")]

    def scopes(self, target: str | Scope) -> list[Scope]:
        return self.retrying(self.engine.scopes, domain_of(target))

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
                    "of an older skillfs: split it into entries first (store.drafts.split_legacy, "
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


def file_of(m: Manifest, scope: Scope, path: str) -> FileEntry:
    """The table entry of `path` in `m`; NotFound naming the files it has."""
    entry = m.files.get(normalize_path(path))
    if entry is None:
        raise NotFound(
            f"{scope}/{m.skill} (version {m.version}) has no file {path!r}; files: "
            + ", ".join(sorted(m.files))
        )
    return entry
