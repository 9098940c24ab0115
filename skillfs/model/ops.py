"""The writes a commit takes, as typed commands (docs/architecture.md, "The Committer"): a
skill's new file set or its deletion, and each governed operation (docs/governance.md). Any
number of them, of one agent or one market, make one atomic commit; the store's Committer
turns each into its entries' next versions and holds them all to the same rules. Beside
them: `WriteOptions`, what every write says of itself, and `Operation`, what a version did."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from skillfs.errors import InvalidArgument
from skillfs.model.file_entry import FileEntry
from skillfs.model.manifest import Origin
from skillfs.model.records import File, Scope
from skillfs.model.rollout import Rollout

#: A file a write carries: new bytes (or text), a File with its mode, or a stored FileEntry
#: kept by reference.
FileValue: TypeAlias = File | bytes | str | FileEntry


class Operation(StrEnum):
    """What a version did, as the audit reports it (docs/governance.md). A manifest stores
    the operation that wrote it unless it is a plain publish, delete, disable or enable (those
    are read from the version before it)."""

    PUBLISH = "publish"
    DELETE = "delete"
    DISABLE = "disable"
    ENABLE = "enable"
    STAGE = "stage"
    WIDEN = "widen"
    PROMOTE = "promote"
    ABORT = "abort"
    PROPOSE = "propose"
    APPROVE = "approve"
    REJECT = "reject"
    ARCHIVE = "archive"
    RESTORE = "restore"
    REQUIRE_REVIEW = "require-review"
    LIFT_REVIEW = "lift-review"
    SET_PROFILES = "set-profiles"
    CLEAR_PROFILES = "clear-profiles"
    LABEL = "label"
    UNLABEL = "unlabel"


class WriteOptions(BaseModel):
    """What every write says of itself, whatever surface made it: `actor` (default: the
    store's, `$SKILLFS_ACTOR`, else `user@host`; a server takes the token's name), `message`
    (why), `expected_version` (the version of the skill the caller edited: a Conflict if
    another writer got there first; 0: it must not exist yet; None: the last writer wins,
    C6), `commit_id` (the key that makes a retried commit happen once)."""

    model_config = ConfigDict(frozen=True)

    actor: str | None = None
    message: str = ""
    expected_version: int | None = None
    commit_id: str | None = None

    def or_message(self, message: str) -> WriteOptions:
        """These options, with `message` when they carry none: an operation's reason or its
        own wording, the commit's message unless the caller gave one."""
        return self if self.message else self.model_copy(update={"message": message})


#: No options: the store's actor, no message, last writer wins, a new commit id.
DEFAULT = WriteOptions()


class _Command(BaseModel):
    """Strict: a field takes its own type (a Scope, a Rollout), never a dict that looks like
    one, and anything else is an InvalidArgument that names the field."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, strict=True)

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as e:
            raise InvalidArgument(
                "; ".join(
                    str(err["ctx"]["error"])
                    if err["type"] == "value_error"
                    else f"{type(self).__name__} {'.'.join(map(str, err['loc']))}: "
                    f"{err['msg'].lower()}, not {err['input']!r}"
                    for err in e.errors()
                )
            ) from None

    @field_validator("files", mode="before", check_fields=False)
    @classmethod
    def _files(cls, files: object, info: ValidationInfo) -> dict[str, FileValue]:
        skill = info.data.get("skill") or info.data.get("name")
        if not isinstance(files, dict):
            raise InvalidArgument(
                f"the files of {skill!r} are a {type(files).__name__}: give a dict of path to "
                "bytes, text, a File or a FileEntry"
            )
        for path, f in files.items():
            if not isinstance(f, bytes | bytearray | str | File | FileEntry):
                raise InvalidArgument(
                    f"file {path!r} of {skill!r} is a {type(f).__name__}: give bytes, text, a "
                    "File or a FileEntry"
                )
        return {p: bytes(f) if isinstance(f, bytearray) else f for p, f in files.items()}

    @field_validator("rollout", "into", mode="before", check_fields=False)
    @classmethod
    def _typed(cls, value: object, info: ValidationInfo) -> object:
        kinds = {"rollout": (Rollout, "a skillfs.Rollout(environments=[...], users=[...], "
                 "fraction=...)"), "into": (Scope, "a skillfs.Scope")}  # fmt: skip
        kind, what = kinds[str(info.field_name)]
        if value is not None and not isinstance(value, kind):
            raise InvalidArgument(f"a {info.field_name} is {what}, not {type(value).__name__}")
        return value


class Put(_Command):
    """Replace a skill's whole file set; `expected_version` 0 means 'must not exist yet'. A
    file may be a `FileEntry` of a stored file, kept by reference without re-sending it.
    `origin`: the lower layer's skill this one copies (a per-user override), whose kill
    switch it keeps; a new version of a copy keeps its origin. `import_source`: the import
    source the files come from, recorded with their digest (docs/cli.md, "Import sources")."""

    scope: Scope
    skill: str
    files: dict[str, FileValue]
    expected_version: int | None = None
    origin: Origin | None = None
    import_source: str | None = None

    def __init__(
        self,
        scope: Scope,
        skill: str,
        files: Mapping[str, FileValue],
        expected_version: int | None = None,
        origin: Origin | None = None,
        *,
        import_source: str | None = None,
    ) -> None:
        super().__init__(
            scope=scope,
            skill=skill,
            files=dict(files) if isinstance(files, Mapping) else files,
            expected_version=expected_version,
            origin=origin,
            import_source=import_source,
        )


class Remove(_Command):
    """Delete a skill (its manifest moves to history)."""

    scope: Scope
    skill: str
    expected_version: int | None = None

    def __init__(self, scope: Scope, skill: str, expected_version: int | None = None) -> None:
        super().__init__(scope=scope, skill=skill, expected_version=expected_version)


class Disable(_Command):
    """Switch a skill off without deleting it; in a user's scope, a skill the user sees from
    the shared scope or a market is hidden from that user alone."""

    scope: Scope
    skill: str
    reason: str = ""
    expected_version: int | None = None


class Enable(_Command):
    """Switch a disabled skill back on (a user's hiding entry is removed)."""

    scope: Scope
    skill: str
    expected_version: int | None = None


class Stage(_Command):
    """Stage `files` as the skill's candidate for the workers `rollout` names."""

    scope: Scope
    skill: str
    files: dict[str, FileValue]
    rollout: Rollout
    expected_version: int | None = None


class Widen(_Command):
    """Give the staged candidate to more workers (everyone the old rule reached stays in)."""

    scope: Scope
    skill: str
    rollout: Rollout
    expected_version: int | None = None


class Promote(_Command):
    """Make the staged candidate the live version for everyone; `anyway`: also when a live
    save landed after it was staged (its files are replaced by the candidate's)."""

    scope: Scope
    skill: str
    expected_version: int | None = None
    anyway: bool = False


class Abort(_Command):
    """Drop the staged candidate (a skill only staged, never live, is deleted)."""

    scope: Scope
    skill: str
    expected_version: int | None = None


class SetLabel(_Command):
    """Set or move `label` to the kept `version` of a skill (None: the live version as the
    commit reads it); `expected_version` is the skill's."""

    scope: Scope
    skill: str
    label: str
    version: int | None = None
    expected_version: int | None = None


class RemoveLabel(_Command):
    """Remove `label` from a skill (workers pinned to it get the head at their next step)."""

    scope: Scope
    skill: str
    label: str
    expected_version: int | None = None


class Propose(_Command):
    """Write the draft `_drafts/<name>`, proposed against the live skill's version now, or
    `based_on` for files built on an older one; `expected_version` is the draft's."""

    scope: Scope
    name: str
    files: dict[str, FileValue]
    based_on: int | None = None
    expected_version: int | None = None


class Approve(_Command):
    """Make a draft the live skill (or, with `rollout`, its staged candidate) and remove the
    draft; `into` is another scope of the agent it goes to. `expected_version` is the
    draft's."""

    scope: Scope
    name: str
    rollout: Rollout | None = None
    into: Scope | None = None
    expected_version: int | None = None


class Reject(_Command):
    """Remove a draft; the reason is kept in its history."""

    scope: Scope
    name: str
    expected_version: int | None = None


class Archive(_Command):
    """Move a live skill to `.archive/<skill>`; `replace` an archive of that name."""

    scope: Scope
    skill: str
    replace: bool = False
    expected_version: int | None = None


class Restore(_Command):
    """Bring `.archive/<name>` back live as `name`; `expected_version` is the archive's."""

    scope: Scope
    name: str
    expected_version: int | None = None


class Move(_Command):
    """Rename a skill (or move it within its agent): the source read at the version the commit
    compares, its files written under `target` (SKILL.md's `name` changed to the target's
    when it named the source), the source removed, in one commit. A conflict reads the
    source again; nothing read earlier is replayed."""

    scope: Scope
    source: str
    target: str
    into: Scope | None = None
    expected_version: int | None = None


class Copy(_Command):
    """Copy a skill into another scope of its agent (an operator's override of a shared
    skill for one user): the source read at the version the commit compares, its files kept
    by reference, the copy recording the source as its origin (whose kill switch it keeps).
    The copy must not exist yet; `expected_version` is the source's."""

    scope: Scope
    skill: str
    into: Scope
    expected_version: int | None = None


class RequireReview(_Command):
    """Turn a scope's two-person rule on (`required`) or off (docs/governance.md, "The
    two-person rule"); `expected_version` is the setting's."""

    scope: Scope
    required: bool
    expected_version: int | None = None


class SetProfiles(_Command):
    """Name the host profiles a scope accepts (docs/validation.md, "Host profiles"), or with
    None clear the setting (the store's own apply again); `expected_version` is the
    setting's."""

    scope: Scope
    profiles: tuple[str, ...] | None
    expected_version: int | None = None


#: Every command a commit takes.
Command: TypeAlias = (
    Put | Remove | Disable | Enable | Stage | Widen | Promote | Abort | SetLabel | RemoveLabel
    | Propose | Approve | Reject | Archive | Restore | Move | Copy | RequireReview | SetProfiles
)  # fmt: skip
