"""The steps of `Store.commit` around the engine's atomic step: a Put's file table, each
skill's next manifest checked against the version the caller expected (C6) and against
reading back as written, and the report of a retried commit that had already landed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from skillfs.engines.base import CommitOp, Engine
from skillfs.errors import Conflict, InvalidPath, InvalidSkill, NotFound, TooLarge
from skillfs.model import (
    CommitResult,
    File,
    FileEntry,
    Finding,
    Manifest,
    Put,
    Scope,
    error_findings,
)
from skillfs.model.names import check_entry, check_new_path, normalize_path
from skillfs.store.blobs import Retrying, sha256
from skillfs.store.limits import Limits, check_file, check_file_table, default_mode

#: A governance edit (docs/governance.md): given the skill's current manifest (None when it
#: has none, or a tombstone), the fields of its next one; raises when the edit does not apply.
Edit = Callable[[Manifest | None], dict[str, Any]]


class Prepared(BaseModel):
    """One change of a commit after validation, before versions are known."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scope: Scope
    skill: str
    expected_version: int | None
    files: dict[str, FileEntry] | None  # None: remove
    frontmatter: dict[str, object] | None = None
    findings: list[Finding] = []
    actor: str = ""
    message: str = ""
    #: Instead of `files`: the next manifest's fields from the current one, asked again
    #: at every attempt, so a retried commit never writes over a concurrent one.
    edit: Edit | None = None


def edited(
    scope: Scope, entry: str, edit: Edit, expected_version: int | None, actor: str, message: str
) -> Prepared:
    """A change of a commit that rewrites one entry's manifest by `edit` (no new files);
    `actor` and `message` come checked (`store.governance`)."""
    return Prepared(
        scope=scope,
        skill=entry,
        expected_version=expected_version,
        files=None,
        actor=actor,
        message=message,
        edit=edit,
    )


def file_table(
    limits: Limits, change: Put, blobs: dict[str, bytes], now: float
) -> dict[str, FileEntry]:
    """A Put's checked file table; its new bytes are added to `blobs`. A stored file kept by
    reference keeps its path; new bytes need a path `check_new_path` allows."""
    entries: dict[str, FileEntry] = {}
    for raw_path, value in change.files.items():
        path = (
            normalize_path(raw_path) if isinstance(value, FileEntry) else check_new_path(raw_path)
        )
        if path in entries:
            raise InvalidPath(f"{change.skill}: {raw_path!r} names the same file as another path")
        entries[path] = _entry(limits, change.skill, path, value, blobs, now)
    check_file_table(limits, change.skill, entries)
    return entries


def _entry(
    limits: Limits,
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
    check_file(limits, skill, path, size, mode, mtime)
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


def next_ops(
    prepared: Sequence[Prepared],
    current: Mapping[tuple[Scope, str], Manifest],
    commit_id: str,
    now: float,
) -> list[CommitOp]:
    """Every change's next manifest (`next_op`), once `check_moves` lets the commit through
    and `check_added_paths` its paths."""
    check_moves(prepared, current)
    ops = [next_op(p, current.get((p.scope, p.skill)), commit_id, now) for p in prepared]
    check_added_paths(ops, current)
    return ops


def check_added_paths(
    ops: Sequence[CommitOp], current: Mapping[tuple[Scope, str], Manifest]
) -> None:
    """A path a version adds — held neither by its entry now nor by an entry the commit
    removes (a move's source) — must be one `check_new_path` allows, whether its bytes are
    new or a stored file copied or moved there (fsspec's `cp` and `mv`): a file stored before
    that rule is carried by edits and moves, never written at a new path."""

    def paths(m: Manifest | None) -> set[str]:
        if m is None:
            return set()
        return set(m.files) | set(m.candidate.files if m.candidate is not None else ())

    moved = set().union(
        *(paths(current.get((op.scope, op.manifest.skill))) for op in ops if op.manifest.deleted)
    )
    for op in ops:
        for path in paths(op.manifest) - paths(current.get((op.scope, op.manifest.skill))) - moved:
            check_new_path(path)


def check_moves(
    prepared: Sequence[Prepared], current: Mapping[tuple[Scope, str], Manifest]
) -> None:
    """A commit that removes a skill and writes another is what a rename or a move is (the
    console's Rename, fsspec's `mv`, onto a new name or over an existing one, its SKILL.md
    perhaps edited on the way). The other skill does not carry the removed one's kill switch
    or staged candidate, so the commit is refused while the removed skill has either: a move
    must not serve what an operator switched off, nor drop a rollout. What the files are
    decides nothing (a move may change any of them), so such a skill is removed on its own."""
    if not any(p.files is not None for p in prepared):
        return
    for p in prepared:
        cur = current.get((p.scope, p.skill))
        if p.files is not None or p.edit is not None or cur is None or cur.deleted:
            continue
        if cur.disabled:
            raise InvalidPath(
                f"{p.scope}/{p.skill} is disabled ({cur.disabled_reason or 'no reason given'}): "
                "removing it in a commit that writes another skill could serve what was switched "
                "off under another name; enable it first, or delete it on its own"
            )
        if cur.candidate is not None:
            raise InvalidPath(
                f"{p.scope}/{p.skill} has a staged candidate: promote or abort it before "
                "renaming or moving the skill (the new name would not carry the rollout), or "
                "delete it on its own"
            )


def next_op(p: Prepared, cur: Manifest | None, commit_id: str, now: float) -> CommitOp:
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
    if p.edit is not None:
        fields = p.edit(cur if live else None)
    elif p.files is None and not live:
        raise NotFound(f"skill {p.skill!r} does not exist in {p.scope}: nothing to delete")
    else:  # a new file set keeps the kill switch and a staged candidate as they were
        fields = {
            "deleted": p.files is None,
            "frontmatter": p.frontmatter,
            "findings": p.findings,
            "files": p.files or {},
        }
        if cur is not None and live and p.files is not None:
            fields.update(
                disabled=cur.disabled,
                disabled_reason=cur.disabled_reason,
                candidate=cur.candidate,
            )
    manifest = Manifest(
        skill=p.skill,
        version=cur_version + 1,
        commit_id=commit_id,
        committed_at=now,
        actor=p.actor,
        message=p.message,
        **fields,
    )
    return CommitOp(scope=p.scope, manifest=storable(p.scope, manifest), expect=cur_version)


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


def check_shape(
    targets: Sequence[tuple[Scope, str]], domain: str | None, max_ops: int | None
) -> str:
    """The shape every commit must have, whoever built it: at least one skill, each once,
    all in one domain (`domain` when given), no more than the engine commits atomically
    (`max_ops`). Returns the domain."""
    if not targets:
        raise InvalidPath("empty commit: give at least one Put or Remove")
    domain = domain or targets[0][0].domain
    seen: set[tuple[Scope, str]] = set()
    for scope, skill in targets:
        scope.check()  # a Scope built with model_construct skips its own check
        if scope.domain != domain:
            raise InvalidPath(
                f"one commit spans one agent or one market: {scope} is not in {domain}"
            )
        check_entry(skill)
        if (scope, skill) in seen:
            raise InvalidPath(f"{scope}/{skill} appears twice in one commit")
        seen.add((scope, skill))
    if max_ops is not None and len(targets) > max_ops:
        raise TooLarge(
            f"a commit of {len(targets)} skills is over this store's limit of "
            f"{max_ops} per atomic commit: split it into several commits"
        )
    return domain


def ours(
    prepared: Sequence[Prepared], current: Mapping[tuple[Scope, str], Manifest], commit_id: str
) -> bool:
    """Whether a commit of this id is what one of these entries holds now."""
    return any(
        (c := current.get((p.scope, p.skill))) is not None and c.commit_id == commit_id
        for p in prepared
    )


def in_history(
    engine: Engine, retrying: Retrying, prepared: Sequence[Prepared], commit_id: str
) -> bool:
    """Whether a commit of this id landed on any of these entries, read back from their
    history: another writer's version may stand on top of ours (a lost answer, C6)."""
    return any(
        m.commit_id == commit_id
        for p in prepared
        for m in retrying(engine.history_summaries, p.scope, p.skill)
    )


def already_committed(
    engine: Engine,
    retrying: Retrying,
    domain: str,
    prepared: list[Prepared],
    current: dict[tuple[Scope, str], Manifest],
    commit_id: str,
) -> CommitResult:
    """A retried commit whose first attempt landed: report it, do not write it twice.

    Commits are atomic, so one skill carrying the commit id proves all of them landed;
    a skill another writer changed since has our version in its history. The revision
    is the domain's current one, which contains the commit."""
    rev = retrying(engine.revisions, [domain])[domain]
    assert rev is not None
    versions: dict[str, int] = {}
    for p in prepared:
        live = current.get((p.scope, p.skill))
        if live is not None and live.commit_id == commit_id:
            versions[p.skill] = live.version
        else:
            older = retrying(engine.history_summaries, p.scope, p.skill)
            versions[p.skill] = next(m.version for m in older if m.commit_id == commit_id)
    return CommitResult(revision=rev, commit_id=commit_id, versions=versions)


def refuse_errors(skill: str, findings: Sequence[Finding]) -> None:
    """The strict surfaces' rule (docs/design.md §7): a skill with error findings is refused,
    with the findings, unless the caller forces it (and so does not call this)."""
    errors = error_findings(findings)
    if errors:
        raise InvalidSkill(
            f"{skill} breaks the Agent Skills spec: "
            + "; ".join(e.message for e in errors)
            + " (fix it, or force the write to store it with these findings)",
            list(errors),
        )
