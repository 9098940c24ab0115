"""Manifests: what a worker caches of every skill, so they are held lean (docs/design.md §2).

`Candidate`, `Labelled` and `Manifest` are lean records (skillfs/model/lean.py: slotted,
frozen pydantic dataclasses, the same JSON as `BaseModel`s, no per-instance `__dict__`); a
file row, `FileEntry`, packs its digest with its size
(skillfs/model/file_entry.py; docs/benchmarks.md, "Manifests in memory")."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import math
import re
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError
from pydantic.dataclasses import dataclass

from skillfs.model.file_entry import FileEntry
from skillfs.model.import_mark import ImportMark
from skillfs.model.lean import Edge, Finding, Typed, error_findings
from skillfs.model.rollout import Rollout
from skillfs.model.table import TableRef, file_bytes, file_count

log = logging.getLogger(__name__)

#: The file times a manifest may hold: years 1 to 9999, what every platform's clock and
#: `os.utime` accept (docs/validation.md).
MTIME_MIN, MTIME_MAX = -62135596800.0, 253402300799.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveEdit(Edge):
    """A live version saved while a candidate was staged (docs/governance.md, "Promote guards
    a later live edit"): promoting would replace its files with the candidate's."""

    version: int
    actor: str = ""
    at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate(Edge):
    """The version a skill stages beside its live one (docs/governance.md, "Staged rollout"):
    a whole file table with its frontmatter and findings, the rule saying who gets it, and
    who staged it when (`commit_id`: the commit that staged it)."""

    files: dict[str, FileEntry]
    frontmatter: dict[str, Any] | None = None
    findings: tuple[Finding, ...] = ()
    #: The typed reading of the candidate's SKILL.md; None when stored before it existed.
    typed: Typed | None = Field(default=None, exclude_if=lambda v: v is None)
    rollout: Rollout
    commit_id: str
    actor: str = ""
    staged_at: float = 0.0
    #: The stored form of a big `files` (`TableRef`); absent from the JSON when None.
    table: TableRef | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The version whose live files it was staged beside (0: none); None when staged before
    #: this was recorded. Set by the Committer (`store.rules.track_live`).
    staged_on: int | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The newest live save since it was staged, set by the Committer: promote refuses it
    #: unless asked to promote anyway. Absent from the JSON when None.
    live_edit: LiveEdit | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def live_version(self) -> int | None:
        """The version whose live files everyone else keeps (None: not recorded)."""
        return self.live_edit.version if self.live_edit is not None else self.staged_on


@dataclass(frozen=True, slots=True, kw_only=True)
class Labelled(Edge):
    """A kept version a label names (docs/governance.md, "Labels and pins"): its version,
    commit, file table, frontmatter and findings, held in the live manifest so that a worker
    pinned to the label is served from the manifests it holds (no round trip of its own),
    and who set the label when."""

    version: int
    commit_id: str
    committed_at: float
    files: dict[str, FileEntry]
    frontmatter: dict[str, Any] | None = None
    findings: tuple[Finding, ...] = ()
    typed: Typed | None = Field(default=None, exclude_if=lambda v: v is None)
    actor: str = ""
    labelled_at: float = 0.0
    #: The stored form of a big `files` (`TableRef`); absent from the JSON when None.
    table: TableRef | None = Field(default=None, exclude_if=lambda v: v is None)


#: The labels of every manifest that has none: one map, read-only by its type (a
#: `MappingProxyType` would be, at run time too, but cannot be pickled or deep-copied).
_NO_LABELS: Mapping[str, Labelled] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin(Edge):
    """Where a copy came from (copy-on-write of a lower layer's skill, an agent's live copy, an
    operator's override for a user): the entry and the version its files were taken from. A
    copy whose origin an operator disabled is not served (docs/governance.md, "Disable")."""

    scope: str
    skill: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest(Edge):
    """One skill in one scope at one version (docs/design.md §2).

    A delete writes a tombstone (`deleted`, no files) so versions keep counting up across a
    delete and a re-create, and history records who deleted what.
    """

    skill: str
    version: int
    commit_id: str
    committed_at: float
    deleted: bool = False
    frontmatter: dict[str, Any] | None = None
    findings: tuple[Finding, ...] = ()
    files: dict[str, FileEntry]
    #: The typed reading of SKILL.md, made at commit beside the textual `frontmatter`
    #: (docs/validation.md, "Two readings"); None in manifests stored before it existed,
    #: whose readers make it from SKILL.md on first serve. Absent from the JSON when None.
    typed: Typed | None = Field(default=None, exclude_if=lambda v: v is None)
    #: Who made this version and why (docs/governance.md): a token's name on a server,
    #: `actor=` / `$SKILLFS_ACTOR` / `user@host` elsewhere, `agent:A/U` for an agent's own.
    actor: str = ""
    message: str = ""
    #: Switched off (docs/governance.md): a skill-shaped hole at its layer, files kept.
    disabled: bool = False
    disabled_reason: str = ""
    #: A staged version and who gets it (docs/governance.md); absent from the stored JSON
    #: when None, so manifests without one keep their bytes and size.
    candidate: Candidate | None = Field(default=None, exclude_if=lambda v: v is None)
    #: A draft's (`_drafts/<name>`, docs/governance.md): the live skill's version it was
    #: proposed against, 0 when there was none; approve refuses once the live skill moved.
    #: Absent from the stored JSON when None (a manifest without one keeps its bytes).
    base_version: int | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The governed operation that wrote this version, when not a publish or a delete
    #: (approve, reject, archive, restore): what the audit reports. Absent when empty.
    operation: str = Field(default="", exclude_if=lambda v: not v)
    #: A copy's origin (`Origin`); absent from the stored JSON when None.
    origin: Origin | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The stored form of a big `files` (`TableRef`, docs/design.md §2, "File tables"):
    #: only an engine holds a manifest with one; absent from the JSON when None.
    table: TableRef | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The import that wrote these files (docs/cli.md, "Import sources"); absent when None.
    imported: ImportMark | None = Field(default=None, exclude_if=lambda v: v is None)
    #: Label name -> the kept version it names (docs/governance.md, "Labels and pins"),
    #: carried by every version until moved or removed; absent from the JSON when empty.
    #: Read-only: a manifest without labels holds the one shared empty map (a dict each
    #: would cost 64 B of every cached manifest, docs/benchmarks.md "Manifests in memory").
    labels: Mapping[str, Labelled] = Field(
        default_factory=lambda: _NO_LABELS, exclude_if=lambda v: not v
    )

    def __post_init__(self) -> None:
        fm = self.frontmatter  # its name is most often the skill's: one string object for both
        if fm is not None and fm.get("name") == self.skill:
            fm["name"] = self.skill
        typed = self.typed  # most frontmatter is all text: one dict for both readings
        if typed is not None and typed.frontmatter is not fm and typed.frontmatter == fm:
            # in place, as the name above: a new Typed would validate (copy) the dict
            object.__setattr__(typed, "frontmatter", fm)

    @property
    def hides(self) -> bool:
        """A hiding entry (docs/governance.md): disabled with no files and nothing staged, so it
        holds nothing itself and, in a user's scope, hides the skill of its name from below."""
        return self.disabled and not self.files and self.candidate is None and not self.deleted

    @property
    def usable(self) -> bool:
        """A worker shows only skills whose SKILL.md has a name and a description
        (docs/design.md §1)."""
        fm = self.frontmatter
        return (
            not self.deleted
            and fm is not None
            and isinstance(fm.get("name"), str)
            and bool(fm.get("name"))
            and isinstance(fm.get("description"), str)
            and bool(str(fm.get("description")).strip())
        )

    @property
    def errors(self) -> list[Finding]:
        return error_findings(self.findings)

    @staticmethod
    def from_json(raw: bytes | str) -> Manifest:
        """Parse a stored manifest, sharing the result for the same bytes.

        Parsing is most of what loading a scope costs (~15 µs a manifest against ~1 µs
        for the round trip's share); a stored manifest's bytes never change meaning, so
        equal bytes may share one (frozen) model. Treat the result as read-only."""
        return _parse_manifest(raw)

    @property
    def size(self) -> int:
        return file_bytes(self.files, self.table)

    def all_files(self) -> list[tuple[str, FileEntry]]:
        """Every (path, entry) the manifest references: its files, its staged candidate's,
        then its labelled versions' (what GC keeps, and what a server's blob proofs cover)."""
        staged = self.candidate.files.items() if self.candidate is not None else ()
        labelled = [row for held in self.labels.values() for row in held.files.items()]
        return [*self.files.items(), *staged, *labelled]

    # ------------------------------------------------------------------ transitions
    # Each gives the next content of this entry; the commit stamps version, commit id, time,
    # actor, message and operation (`stamped`).

    @classmethod
    def empty(cls, skill: str) -> Manifest:
        """An entry that holds nothing yet (what a commit starts from where there is none)."""
        return cls(skill=skill, version=0, commit_id="", committed_at=0.0, files={})

    def with_files(
        self,
        files: dict[str, FileEntry],
        frontmatter: dict[str, Any] | None,
        findings: tuple[Finding, ...],
        typed: Typed | None,
        origin: Origin | None = None,
    ) -> Manifest:
        """A new file set (not an import's until marked); the kill switch and a staged
        candidate stay as they were."""
        return dataclasses.replace(
            self,
            deleted=False,
            files=files,
            frontmatter=frontmatter,
            findings=findings,
            typed=typed,
            base_version=None,
            origin=origin,
            operation="",
            imported=None,
        )

    def tombstone(self) -> Manifest:
        """A deletion: no files, nothing staged or labelled, switched on (versions go on
        counting)."""
        return Manifest(skill=self.skill, version=self.version, commit_id="", committed_at=0.0,
                        deleted=True, files={})  # fmt: skip

    def with_disabled(self, reason: str) -> Manifest:
        return dataclasses.replace(
            self, deleted=False, disabled=True, disabled_reason=reason, operation=""
        )

    def enabled(self) -> Manifest:
        """Switched on, and no longer tied to an origin an operator disabled (a copy an
        operator enables for its user is that user's own from then on)."""
        return dataclasses.replace(
            self, disabled=False, disabled_reason="", origin=None, operation=""
        )

    def with_candidate(self, candidate: Candidate | None) -> Manifest:
        return dataclasses.replace(self, deleted=False, candidate=candidate, operation="")

    def promoted(self) -> Manifest:
        """The staged candidate made the live version (for everyone)."""
        c = self.candidate
        assert c is not None  # the commit checks there is one
        return dataclasses.replace(
            self,
            files=c.files,
            frontmatter=c.frontmatter,
            findings=c.findings,
            typed=c.typed,
            candidate=None,
            operation="",
        )

    def moved_to(self, skill: str) -> Manifest:
        """This entry's content as entry `skill`'s (an archive, a restore, an approval): files,
        findings, kill switch and candidate; not its history, base, origin or labels (which name
        versions of this entry's history)."""
        return Manifest(
            skill=skill,
            version=0,
            commit_id="",
            committed_at=0.0,
            frontmatter=self.frontmatter,
            findings=self.findings,
            typed=self.typed,
            files=self.files,
            disabled=self.disabled,
            disabled_reason=self.disabled_reason,
            candidate=self.candidate,
        )

    def labelled(self, actor: str, at: float) -> Labelled:
        """This version, live files only, as a label names it (set by `actor` at `at`)."""
        return Labelled(
            version=self.version,
            commit_id=self.commit_id,
            committed_at=self.committed_at,
            files=self.files,
            frontmatter=self.frontmatter,
            findings=self.findings,
            typed=self.typed,
            actor=actor,
            labelled_at=at,
        )

    def with_labels(self, labels: dict[str, Labelled]) -> Manifest:
        return dataclasses.replace(self, labels=dict(sorted(labels.items())), operation="")

    def with_base(self, version: int) -> Manifest:
        """A draft proposed against the live skill's `version` (0: none)."""
        return dataclasses.replace(self, base_version=version)

    def did(self, operation: str) -> Manifest:
        """The version records the governed operation that wrote it (what the audit says)."""
        return dataclasses.replace(self, operation=operation)

    def stamped(
        self, *, version: int, commit_id: str, committed_at: float, actor: str, message: str
    ) -> Manifest:
        """The next version as committed."""
        return dataclasses.replace(
            self,
            version=version,
            commit_id=commit_id,
            committed_at=committed_at,
            actor=actor,
            message=message,
        )

    def summary(self) -> VersionSummary:
        """This version without its file table (a history listing's row)."""
        c = self.candidate
        description = (self.frontmatter or {}).get("description")
        return VersionSummary(
            skill=self.skill,
            version=self.version,
            commit_id=self.commit_id,
            committed_at=self.committed_at,
            deleted=self.deleted,
            actor=self.actor,
            message=self.message,
            operation=self.operation,
            disabled=self.disabled,
            disabled_reason=self.disabled_reason,
            file_count=file_count(self.files, self.table),
            size=self.size,
            usable=self.usable,
            findings=self.findings,
            description=shortened(description) if isinstance(description, str) else None,
            labels={name: held.version for name, held in self.labels.items()},
            candidate=None
            if c is None
            else CandidateSummary(
                rollout=c.rollout,
                commit_id=c.commit_id,
                actor=c.actor,
                staged_at=c.staged_at,
                file_count=file_count(c.files, c.table),
                size=file_bytes(c.files, c.table),
                findings=c.findings,
            ),
        )


#: The longest description a listing row carries (the spec's limit; longer ones are cut with
#: "…"), so that a row stays small whatever a stored SKILL.md says.
DESCRIPTION_MAX = 1024


def shortened(text: str, limit: int = DESCRIPTION_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateSummary(Edge):
    """A staged candidate without its file table."""

    rollout: Rollout
    commit_id: str
    actor: str = ""
    staged_at: float = 0.0
    file_count: int = 0
    size: int = 0
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionSummary(Edge):
    """A kept version without its file table: what history listings show (`Store.versions`,
    `skillfs history`, the console's History page), small whatever the skill's size; the
    whole version is read on demand (`Store.manifest(scope, skill, version=)`)."""

    skill: str
    version: int
    commit_id: str
    committed_at: float
    deleted: bool = False
    actor: str = ""
    message: str = ""
    operation: str = ""
    disabled: bool = False
    disabled_reason: str = ""
    file_count: int = 0
    size: int = 0
    usable: bool = False
    findings: tuple[Finding, ...] = ()
    description: str | None = None
    candidate: CandidateSummary | None = None
    #: The labels this version carries: label name -> the version it names.
    labels: dict[str, int] = Field(default_factory=dict, exclude_if=lambda v: not v)

    @property
    def errors(self) -> list[Finding]:
        return error_findings(self.findings)


class Parsed:
    """Parsed manifests by a 128-bit digest of their stored bytes, held as an int (44 bytes;
    a `bytes` of 16 takes 49): the bytes themselves (~700 a manifest) are not kept, and an
    entry costs its key and a dict slot. When full, the older half goes (an `Lru`'s ordered
    links would cost ~85 bytes more a manifest)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: dict[int, Manifest] = {}
        self._lock = threading.Lock()

    def get(self, key: int) -> Manifest | None:
        return self._items.get(key)

    def put(self, key: int, manifest: Manifest) -> None:
        with self._lock:
            if len(self._items) >= self.capacity:
                kept = itertools.islice(self._items.items(), self.capacity // 2, None)
                self._items = dict(kept)
            self._items[key] = manifest

    def clear(self) -> None:
        with self._lock:
            self._items = {}


PARSED = Parsed(8192)


def _parse_manifest(raw: bytes | str) -> Manifest:
    data = raw.encode() if isinstance(raw, str) else raw
    key = int.from_bytes(hashlib.blake2b(data, digest_size=16).digest())
    parsed = PARSED.get(key)
    if parsed is None:
        try:
            parsed = Manifest.model_validate_json(raw)
        except ValidationError as exc:
            parsed = _salvage(raw, exc)
        PARSED.put(key, parsed)
    return parsed


_HEAD = re.compile(rb'"skill":"((?:[^"\\]|\\.)*)","version":(\d+)')


def _salvage(raw: bytes | str, exc: ValidationError) -> Manifest:
    """A stored manifest this version of skillfs cannot read (one written before its content
    was checked: frontmatter nested too deep, a file time of NaN). Only its own skill is
    affected: it loads with what can be read, no frontmatter (so no worker shows it) and an
    error finding telling operators to republish or delete it, which repairs it."""
    data = raw.encode() if isinstance(raw, str) else raw
    problem = exc.errors()[0]["msg"] if exc.errors() else str(exc)
    doc: dict[str, Any] = {}
    try:
        loaded = json.loads(data)
        doc = loaded if isinstance(loaded, dict) else {}
    except (ValueError, RecursionError):
        head = _HEAD.search(data)
        if head:
            doc = {"skill": json.loads(b'"' + head.group(1) + b'"'), "version": int(head.group(2))}
    files: dict[str, FileEntry] = {}
    raw_files = doc.get("files")
    for path, e in (raw_files if isinstance(raw_files, dict) else {}).items():
        try:
            mtime = e.get("mtime")
            if not isinstance(mtime, int | float) or not MTIME_MIN <= mtime <= MTIME_MAX:
                e = {**e, "mtime": 0.0}
            files[path] = FileEntry.model_validate(e)
        except (ValidationError, AttributeError):
            continue
    raw_table = doc.get("table")
    try:  # a stored file table (docs/design.md §2): the store reads its chunks back
        table = TableRef.model_validate(raw_table) if isinstance(raw_table, dict) else None
    except ValidationError:
        table = None
    skill, version = doc.get("skill"), doc.get("version")
    skill = skill if isinstance(skill, str) else "?"
    version = version if isinstance(version, int) else 0
    stamp = doc.get("committed_at")
    log.warning("the stored manifest of %s (version %s) is unreadable: %s", skill, version, problem)
    return Manifest(
        skill=skill,
        version=version,
        commit_id=str(doc.get("commit_id") or "unreadable"),
        committed_at=float(stamp) if isinstance(stamp, int | float) and math.isfinite(stamp) else 0,
        deleted=doc.get("deleted") is True,
        frontmatter=None,
        findings=(
            Finding(
                severity="error",
                rule="manifest-unreadable",
                message=(
                    f"the stored manifest of version {version} cannot be read ({problem}); "
                    "its files are kept where readable: publish the skill again (or delete it) "
                    "to repair it"
                ),
            ),
        ),
        files=files,
        table=table,
    )
