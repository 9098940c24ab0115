"""The store: the logic every engine shares, written once on top of `Engine`'s primitives.

Publishing hashes and validates the files, uploads the blobs the store lacks, then commits
the new manifests in one atomic engine step that compares versions. Reads go through an
in-process LRU of blobs, which is always safe because blobs are immutable.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from skillfs.engines import open_engine
from skillfs.engines.base import EMPTY, CommitOp, Engine, MiB, VersionMismatch
from skillfs.errors import (
    Conflict,
    InvalidPath,
    InvalidSkill,
    NotFound,
    StoreUnavailable,
    TooLarge,
)
from skillfs.lru import Lru
from skillfs.model import (
    MTIME_MAX,
    MTIME_MIN,
    Access,
    Change,
    CommitResult,
    File,
    FileEntry,
    Finding,
    Manifest,
    Put,
    Remove,
    Revision,
    Scope,
)
from skillfs.names import check_domain, check_id, check_skill_name, is_hidden_dir, normalize_path
from skillfs.skill_md import inspect_skill

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")

SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".rb", ".pl", ".js", ".mjs")


class Limits(BaseModel):
    """Size limits; an over-limit write raises TooLarge before anything is written."""

    model_config = ConfigDict(frozen=True)

    max_file_size: int = 64 * MiB
    max_skill_size: int = 256 * MiB
    max_files: int = 10_000


class HistoryPolicy(BaseModel):
    """A replaced version is kept while it is among the newest `keep_versions` or younger
    than `keep_days`; older ones are dropped after a commit and by `gc()`."""

    model_config = ConfigDict(frozen=True)

    keep_versions: int = 50
    keep_days: float = 30.0


class GcReport(BaseModel):
    blobs_seen: int
    blobs_referenced: int
    blobs_deleted: int
    history_dropped: int


def default_mode(path: str, data: bytes) -> int:
    """A file written without a mode is executable when it looks like a script
    (docs/design.md §4)."""
    return 0o755 if data.startswith(b"#!") or path.endswith(SCRIPT_SUFFIXES) else 0o644


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def refuse_errors(skill: str, findings: Sequence[Finding]) -> None:
    """The strict surfaces' rule (docs/design.md §7): a skill with error findings is refused,
    with the findings, unless the caller forces it (and so does not call this)."""
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise InvalidSkill(
            f"{skill} breaks the Agent Skills spec: "
            + "; ".join(e.message for e in errors)
            + " (fix it, or force the write to store it with these findings)",
            list(errors),
        )


class _Prepared(BaseModel):
    """One change of a commit after validation, before versions are known."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    skill: str
    expected_version: int | None
    files: dict[str, FileEntry] | None  # None: remove
    frontmatter: dict[str, object] | None = None
    findings: list[Finding] = []


class Store:
    """The public API of docs/design.md §2 over any engine."""

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
    ) -> None:
        self.engine = engine
        self.limits = limits or Limits()
        self.history_policy = history_policy or HistoryPolicy()
        self.gc_grace = gc_grace
        self.retry_for = retry_for
        self.clock = clock
        # blobs are immutable, so a cache by SHA-256 is always right; a file over a quarter
        # of the cache is not kept
        self._blobs: Lru[str, bytes] = Lru(blob_cache_bytes, len, blob_cache_bytes // 4)

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
    ) -> CommitResult:
        """Replace a skill's whole file set (one-skill `commit`)."""
        return self.commit(
            [Put(scope, skill, dict(files), expected_version)], commit_id=commit_id, strict=strict
        )

    def delete(
        self,
        scope: Scope,
        skill: str,
        expected_version: int | None = None,
        *,
        commit_id: str | None = None,
    ) -> CommitResult:
        return self.commit([Remove(scope, skill, expected_version)], commit_id=commit_id)

    def rollback(
        self, scope: Scope, skill: str, version: int, expected_version: int | None = None
    ) -> CommitResult:
        """Publish a new version whose files equal those of `version`."""
        old = self.manifest(scope, skill, version=version)
        if old.deleted:
            raise NotFound(
                f"version {version} of {scope}/{skill} is a deletion: pick another version"
            )
        return self.publish(scope, skill, dict(old.files), expected_version)

    def commit(
        self,
        changes: Sequence[Put | Remove],
        *,
        commit_id: str | None = None,
        strict: bool = False,
    ) -> CommitResult:
        """Several skills of one agent (or one market), all or nothing (docs/design.md §2).

        `strict` is the admin surfaces' policy (docs/design.md §7): a skill with error findings
        is refused with InvalidSkill carrying them, before anything is uploaded."""
        if not changes:
            raise InvalidPath("empty commit: give at least one Put or Remove")
        domain = changes[0].scope.domain
        seen: set[tuple[Scope, str]] = set()
        for ch in changes:
            ch.scope.check()  # a Scope built with model_construct skips its own check
            if ch.scope.domain != domain:
                raise InvalidPath(
                    f"one commit spans one agent or one market: {ch.scope} is not in {domain}"
                )
            check_skill_name(ch.skill)
            if is_hidden_dir(ch.skill) and isinstance(ch, Put) and not ch.files:
                raise InvalidPath(f"skill {ch.skill!r} has no files")
            if (ch.scope, ch.skill) in seen:
                raise InvalidPath(f"{ch.scope}/{ch.skill} appears twice in one commit")
            seen.add((ch.scope, ch.skill))
        if self.max_ops is not None and len(changes) > self.max_ops:
            raise TooLarge(
                f"a commit of {len(changes)} skills is over this store's limit of "
                f"{self.max_ops} per atomic commit: split it into several commits"
            )
        now = self.clock()
        blobs: dict[str, bytes] = {}  # the new bytes of every Put, uploaded together
        tables = [None if isinstance(ch, Remove) else self._files(ch, blobs, now) for ch in changes]
        prepared = [self._prepare(ch, t, blobs) for ch, t in zip(changes, tables, strict=True)]
        if strict:
            for p in prepared:
                refuse_errors(p.skill, p.findings)
        refs = {e.sha256 for t in tables if t for e in t.values()} - blobs.keys()
        self._upload(blobs, refs, now)
        commit_id = commit_id or uuid.uuid4().hex
        return self._commit(domain, prepared, commit_id)

    def _files(self, change: Put, blobs: dict[str, bytes], now: float) -> dict[str, FileEntry]:
        """A Put's checked file table; its new bytes are added to `blobs`."""
        entries: dict[str, FileEntry] = {}
        for raw_path, value in change.files.items():
            path = normalize_path(raw_path)
            if path in entries:
                raise InvalidPath(
                    f"{change.skill}: {raw_path!r} names the same file as another path"
                )
            entries[path] = self._entry(change.skill, path, value, blobs, now)
        self.check_file_table(change.skill, entries)
        return entries

    def check_file(
        self, skill: str, path: str, size: int, mode: int | None, mtime: float | None = None
    ) -> None:
        """One file against the limits and the mode and time rules (before its bytes are
        hashed): whatever goes into a manifest must read back from every engine."""
        if mtime is not None and not (
            isinstance(mtime, int | float) and MTIME_MIN <= mtime <= MTIME_MAX
        ):
            raise InvalidPath(
                f"mtime {mtime!r} of {skill}/{path} is not a time: give seconds since the epoch "
                f"between {MTIME_MIN:.0f} and {MTIME_MAX:.0f} (years 1 to 9999), or none"
            )
        if mode is not None and not 0 <= mode <= 0o777:
            raise InvalidPath(
                f"mode {oct(mode)} of {skill}/{path}: only permission bits 0o777 are stored "
                "(no setuid, setgid or sticky bit, no file type)"
            )
        if not 0 <= size <= self.limits.max_file_size:
            raise TooLarge(
                f"{skill}/{path} is {size} bytes, over the limit of "
                f"{self.limits.max_file_size} bytes per file (Limits.max_file_size)"
            )

    def check_file_table(self, skill: str, entries: Mapping[str, FileEntry]) -> None:
        """A skill's file table against the limits; no file may also be a directory.

        The server holds a manifest a grpc:// client built to the same rules."""
        for path, e in entries.items():
            self.check_file(skill, path, e.size, e.mode, e.mtime)
        if len(entries) > self.limits.max_files:
            raise TooLarge(
                f"{skill} has {len(entries)} files, "
                f"over the limit of {self.limits.max_files} (Limits.max_files)"
            )
        total = sum(e.size for e in entries.values())
        if total > self.limits.max_skill_size:
            raise TooLarge(
                f"{skill} holds {total} bytes, over the limit of "
                f"{self.limits.max_skill_size} bytes per skill (Limits.max_skill_size)"
            )
        for path in entries:
            parent = path
            while "/" in parent:
                parent = parent.rsplit("/", 1)[0]
                if parent in entries:
                    raise InvalidPath(
                        f"{skill}: {parent!r} is a file, so {path!r} cannot be inside it"
                    )

    def _prepare(
        self, change: Put | Remove, entries: dict[str, FileEntry] | None, blobs: dict[str, bytes]
    ) -> _Prepared:
        """A change after its blobs are stored: a Put's SKILL.md inspected."""
        if entries is None:  # a Remove
            return _Prepared(
                scope=change.scope,
                skill=change.skill,
                expected_version=change.expected_version,
                files=None,
            )
        skill_md = entries.get("SKILL.md")
        frontmatter, findings = inspect_skill(
            change.skill,
            {}
            if skill_md is None
            else {"SKILL.md": blobs.get(skill_md.sha256) or self.read_entry(skill_md)},
        )
        return _Prepared(
            scope=change.scope,
            skill=change.skill,
            expected_version=change.expected_version,
            files=dict(sorted(entries.items())),
            frontmatter=frontmatter,
            findings=list(findings),
        )

    def _entry(
        self,
        skill: str,
        path: str,
        value: File | bytes | FileEntry,
        blobs: dict[str, bytes],
        now: float,
    ) -> FileEntry:
        """A file table row: a stored file is kept by reference, new bytes are hashed."""
        mode: int | None
        mtime: float | None
        if isinstance(value, FileEntry):
            size, mode, mtime = value.size, value.mode, value.mtime
        else:
            f = value if isinstance(value, File) else File(bytes(value))
            size, mode, mtime = len(f.data), f.mode, f.mtime
        self.check_file(skill, path, size, mode, mtime)
        if isinstance(value, FileEntry):
            return value
        digest = sha256(f.data)
        blobs[digest] = f.data
        return FileEntry(
            sha256=digest,
            size=size,
            mode=f.mode if f.mode is not None else default_mode(path, f.data),
            mtime=f.mtime if f.mtime is not None else now,
        )

    def _upload(self, blobs: Mapping[str, bytes], refs: set[str], now: float) -> None:
        """Write the blobs the store lacks and refresh the last-use time of the ones it has
        and of the stored files kept by reference (that is GC's grace)."""
        if not blobs and not refs:
            return
        present = self._retrying(self.engine.touch_blobs, [*blobs, *refs], now)
        lost = refs - present
        if lost:
            raise NotFound(
                f"the store no longer has blob {min(lost)}: a file kept by reference must "
                "still be stored; send its bytes instead"
            )
        size = self.engine.chunk_size
        for digest, data in blobs.items():
            if digest not in present:
                chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
                self._retrying(self.engine.put_blob, digest, chunks, now)
            self._blobs.put(digest, data)

    def _commit(self, domain: str, prepared: list[_Prepared], commit_id: str) -> CommitResult:
        deadline = time.monotonic() + self.retry_for
        for attempt in range(1000):
            current: dict[tuple[Scope, str], Manifest] = {}
            for scope in {p.scope for p in prepared}:
                skills = [p.skill for p in prepared if p.scope == scope]
                loaded = self._retrying(self.engine.load_skills, scope, skills)
                current.update({(scope, k): m for k, m in loaded.items()})
            if any(
                (c := current.get((p.scope, p.skill))) is not None and c.commit_id == commit_id
                for p in prepared
            ):
                return self._already_committed(domain, prepared, current, commit_id)
            ops = [self._op(p, current.get((p.scope, p.skill)), commit_id) for p in prepared]
            try:
                revision = self.engine.commit(domain, ops)
            except VersionMismatch:
                if time.monotonic() > deadline:
                    break
                time.sleep(min(0.001 * 2**attempt, 0.05))
                continue
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(min(0.05 * 2**attempt, 1.0))
                continue
            self._prune_after_commit(ops)
            return CommitResult(
                revision=revision,
                commit_id=commit_id,
                versions={op.manifest.skill: op.manifest.version for op in ops},
            )
        raise Conflict(
            f"gave up after {self.retry_for:.0f}s of concurrent writers to the same skills; retry",
        )

    def _op(self, p: _Prepared, cur: Manifest | None, commit_id: str) -> CommitOp:
        """Check the caller's expected version and build the next manifest (C6)."""
        cur_version = cur.version if cur else 0
        live = cur is not None and not cur.deleted
        expected = p.expected_version
        if expected is not None:
            ok = (not live) if expected == 0 else (live and expected == cur_version)
            if not ok:
                now_is = f"now at version {cur_version}" if live else "it does not exist now"
                wanted = "to not exist yet" if expected == 0 else f"version {expected}"
                raise Conflict(
                    f"{p.scope}/{p.skill} changed since you read it: you expected {wanted}, "
                    f"{now_is}; reload it and apply your edit again",
                    skill=p.skill,
                    current_version=cur_version if live else 0,
                )
        if p.files is None and not live:
            raise NotFound(f"skill {p.skill!r} does not exist in {p.scope}: nothing to delete")
        manifest = Manifest(
            skill=p.skill,
            version=cur_version + 1,
            commit_id=commit_id,
            committed_at=self.clock(),
            deleted=p.files is None,
            frontmatter=p.frontmatter,
            findings=p.findings,
            files=p.files or {},
        )
        manifest = self.storable(p.scope, manifest)
        return CommitOp(scope=p.scope, manifest=manifest, expect=cur_version)

    @staticmethod
    def storable(scope: Scope, manifest: Manifest) -> Manifest:
        """The manifest, once it is known to read back as written: one that could not would
        break its skill for every reader (the checks before this name the usual causes)."""
        try:
            back = Manifest.model_validate_json(manifest.model_dump_json())
        except (ValidationError, PydanticSerializationError) as exc:
            errors = exc.errors() if isinstance(exc, ValidationError) else []
            problem = errors[0]["msg"] if errors else str(exc)
            raise InvalidSkill(
                f"{scope}/{manifest.skill} cannot be stored readably ({problem}); "
                "nothing was written: fix the frontmatter or file attributes it names"
            ) from None
        if back != manifest:
            raise InvalidSkill(
                f"{scope}/{manifest.skill} would not read back as written (a value JSON cannot "
                "hold exactly); nothing was written: fix its frontmatter or file attributes"
            )
        return manifest

    def _already_committed(
        self,
        domain: str,
        prepared: list[_Prepared],
        current: dict[tuple[Scope, str], Manifest],
        commit_id: str,
    ) -> CommitResult:
        """A retried commit whose first attempt landed: report it, do not write it twice.

        Commits are atomic, so one skill carrying the commit id proves all of them landed;
        a skill another writer changed since has our version in its history. The revision
        is the domain's current one, which contains the commit."""
        rev = self._retrying(self.engine.revisions, [domain])[domain]
        assert rev is not None
        versions: dict[str, int] = {}
        for p in prepared:
            live = current.get((p.scope, p.skill))
            if live is not None and live.commit_id == commit_id:
                versions[p.skill] = live.version
            else:
                older = self._retrying(self.engine.history, p.scope, p.skill)
                versions[p.skill] = next(m.version for m in older if m.commit_id == commit_id)
        return CommitResult(revision=rev, commit_id=commit_id, versions=versions)

    def _retrying(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Retry an idempotent engine call while the store is unavailable, up to `retry_for`."""
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        while True:
            try:
                return fn(*args, **kwargs)
            except StoreUnavailable:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(delay, left))  # the last try starts when the budget ends
                delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------------ history retention

    def _prune_after_commit(self, ops: Sequence[CommitOp]) -> None:
        """Amortized: a skill's history grows by one per version, so reading it once every
        `keep_versions` versions keeps it within twice the policy at 1/keep_versions of a
        read per publish (gc() applies the policy to every skill)."""
        keep = max(self.history_policy.keep_versions, 1)
        for op in ops:
            older = op.manifest.version - 1
            if older > self.history_policy.keep_versions and older % keep == 0:
                try:
                    self._prune(op.scope, op.manifest.skill)
                except StoreUnavailable as exc:
                    log.warning(
                        "history retention skipped for %s/%s: %s", op.scope, op.manifest.skill, exc
                    )

    def _prune(self, scope: Scope, skill: str) -> int:
        history = self.engine.history(scope, skill)
        cutoff = self.clock() - self.history_policy.keep_days * 86400
        drop = [
            m.version
            for m in history[self.history_policy.keep_versions :]
            if m.committed_at < cutoff
        ]
        if drop:
            self.engine.drop_history(scope, skill, drop)
        return len(drop)

    # ------------------------------------------------------------------ reads

    def manifests(self, scope: Scope, skills: Sequence[str] | None = None) -> dict[str, Manifest]:
        """The live skills of a scope (or those of `skills` that exist), in one round trip."""
        loaded = (
            self._retrying(self.engine.load_scope, scope)
            if skills is None
            else self._retrying(self.engine.load_skills, scope, list(skills))
        )
        return {k: m for k, m in loaded.items() if not m.deleted}

    def manifest(self, scope: Scope, skill: str, version: int | None = None) -> Manifest:
        """The latest manifest, or the given version from history."""
        check_skill_name(skill)
        live = self._retrying(self.engine.load_skills, scope, [skill]).get(skill)
        if version is None or (live is not None and live.version == version):
            if live is None or live.deleted:
                raise NotFound(self._no_skill(scope, skill))
            return live
        older = self._retrying(self.engine.history, scope, skill)
        for m in older:
            if m.version == version:
                return m
        if live is None:
            raise NotFound(self._no_skill(scope, skill))
        kept = ", ".join(str(m.version) for m in [live, *older])
        raise NotFound(
            f"version {version} of {scope}/{skill} is not kept (current version {live.version}); "
            f"kept versions: {kept}"
        )

    def _no_skill(self, scope: Scope, skill: str) -> str:
        names = sorted(self.manifests(scope))
        listing = ", ".join(names[:50]) + (" …" if len(names) > 50 else "") if names else "none"
        return f"skill {skill!r} does not exist in {scope}; skills there: {listing}"

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
        """Every kept version of a skill, newest first, the live one (or its tombstone) first."""
        live = self._retrying(self.engine.load_skills, scope, [skill]).get(skill)
        older = self._retrying(self.engine.history, scope, skill)
        if live is None and not older:
            raise NotFound(self._no_skill(scope, skill))
        return ([live] if live else []) + older

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
        end = entry.size if end is None else max(start, min(end, entry.size))
        if start >= end:
            return b""
        cached = self._blobs.get(entry.sha256)
        if cached is not None:
            return cached[start:end]
        whole = start == 0 and end == entry.size
        size = self.engine.chunk_size
        first, last = (
            (0, (entry.size - 1) // size) if whole else (start // size, max(start, end - 1) // size)
        )
        chunks = self._retrying(
            self.engine.get_chunks, [(entry.sha256, i) for i in range(first, last + 1)]
        )
        if any(c is None for c in chunks):
            raise NotFound(
                f"blob {entry.sha256} is missing from store {self.url}: the store lost data "
                "or a GC ran with too short a grace; republish the skill"
            )
        data = b"".join(c for c in chunks if c is not None)
        if whole:
            self._blobs.put(entry.sha256, data)
            return data
        offset = first * size
        return data[start - offset : end - offset]

    def read_entries(self, entries: Iterable[FileEntry]) -> dict[str, bytes]:
        """Many files at once: cached ones from memory, the rest in one batched round trip."""
        wanted = {e.sha256: e for e in entries}
        out: dict[str, bytes] = {}
        keys: list[tuple[str, int]] = []
        for digest, e in wanted.items():
            cached = self._blobs.get(digest)
            if cached is not None:
                out[digest] = cached
            elif e.size == 0:
                out[digest] = b""
            else:
                keys += [(digest, i) for i in range((e.size - 1) // self.engine.chunk_size + 1)]
        if keys:
            chunks = self._retrying(self.engine.get_chunks, keys)
            parts: dict[str, list[bytes]] = {}
            for (digest, _), chunk in zip(keys, chunks, strict=True):
                if chunk is None:
                    raise NotFound(
                        f"blob {digest} is missing from store {self.url}; republish the skill"
                    )
                parts.setdefault(digest, []).append(chunk)
            for digest, chunk_list in parts.items():
                out[digest] = b"".join(chunk_list)
                self._blobs.put(digest, out[digest])
        return out

    # ------------------------------------------------------------------ revisions and watch

    @staticmethod
    def _domain(target: str | Scope) -> str:
        if isinstance(target, Scope):
            return target.domain
        if target.startswith(("agents/", "markets/")):
            return check_domain(target)
        return f"agents/{check_id('agent', target)}"

    def revision(self, target: str | Scope) -> Revision | None:
        """The revision of an agent (by id) or of a scope's domain; None if never written."""
        domain = self._domain(target)
        return self._retrying(self.engine.revisions, [domain])[domain]

    def revisions(self, targets: Sequence[str | Scope]) -> dict[str, Revision | None]:
        """Several domains' revisions read together (C3's one round trip)."""
        domains = [self._domain(t) for t in targets]
        return self._retrying(self.engine.revisions, domains)

    def follow(
        self,
        target: str | Scope,
        since: Revision | None = None,
        *,
        timeout: float | None = None,
        poll: float = 1.0,
        stop: threading.Event | None = None,
    ) -> Iterator[Change]:
        """Changes after `since` in order (C8); a `reset` change means reload from scratch.

        Without `since`, follows from now. Stops after `timeout` seconds or when `stop` is set;
        runs forever otherwise."""
        domain = self._domain(target)
        end = None if timeout is None else time.monotonic() + timeout
        if since is None:
            since = self.engine.revisions([domain])[domain] or EMPTY
        while not (stop and stop.is_set()):
            wait = poll if end is None else min(poll, end - time.monotonic())
            if wait <= 0:
                return
            try:
                batch = self.engine.changes(domain, since, wait)
            except StoreUnavailable as exc:
                log.warning("follow %s: %s; retrying", domain, exc)
                time.sleep(min(wait, 0.5))
                continue
            for change in batch:
                since = change.revision
                if change.scope is not None or change.op == "reset":
                    yield change  # else changes the token may not see (grpc://): skip them

    # ------------------------------------------------------------------ listings

    def agents(self) -> list[str]:
        domains = self._retrying(self.engine.domains)
        return [d.split("/", 1)[1] for d in domains if d.startswith("agents/")]

    def markets(self) -> list[str]:
        domains = self._retrying(self.engine.domains)
        return [d.split("/", 1)[1] for d in domains if d.startswith("markets/")]

    def scopes(self, target: str | Scope) -> list[Scope]:
        return self._retrying(self.engine.scopes, self._domain(target))

    def users(self, agent: str) -> list[str]:
        return sorted(s.user_id for s in self.scopes(agent) if s.user_id is not None)

    def skills(self, scope: Scope) -> list[str]:
        return sorted(self.manifests(scope))

    # ------------------------------------------------------------------ usage

    def record_usage(self, agent: str, counts: Mapping[tuple[str, str], int]) -> None:
        if counts:
            self.engine.add_usage(check_id("agent", agent), counts)

    def usage(self, agent: str) -> dict[tuple[str, str], int]:
        """Load counts keyed by (user, skill id)."""
        return self._retrying(self.engine.usage, check_id("agent", agent))

    # ------------------------------------------------------------------ garbage collection

    def gc(
        self, grace: float | None = None, progress: Callable[[str, int], None] | None = None
    ) -> GcReport:
        """Mark every blob a live or kept manifest references, then sweep the rest that no
        publisher touched since the mark started minus `grace` (re-checked atomically)."""
        grace = self.gc_grace if grace is None else grace
        started = self.clock()
        referenced: set[str] = set()
        dropped = 0
        for domain in self._retrying(self.engine.domains):
            for scope in self.engine.scopes(domain):
                for skill, live in self.engine.load_scope(scope).items():
                    dropped += self._prune(scope, skill)
                    for m in [live, *self.engine.history(scope, skill)]:
                        referenced.update(e.sha256 for e in m.files.values())
                    if progress:
                        progress("mark", 1)
        seen = deleted = 0
        cutoff = started - grace
        for digest in self.engine.blob_shas():
            seen += 1
            if digest not in referenced and self.engine.delete_blob_if_idle(digest, cutoff):
                deleted += 1
            if progress:
                progress("sweep", 1)
        return GcReport(
            blobs_seen=seen,
            blobs_referenced=len(referenced),
            blobs_deleted=deleted,
            history_dropped=dropped,
        )


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
