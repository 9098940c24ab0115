"""Staged store changes of the fsspec filesystem: one bulk call's or one transaction's
(docs/fsspec.md).

Changes are recorded as edits (write a file, delete a file) on the skills they touch, as
read, and in the order they were made. Committing turns each skill into a Put of its whole
file set (or a Remove when no file is left) with the version read expected. On `Conflict` a
transaction's skills are read again and its edits applied again, in order, to the newer
versions, so concurrent writers of different files of one skill all keep theirs; a file
copied from a stored one is read again from its source then, never written as it was read
before (so a move carries an edit that landed first, and finds nothing to move when another
move took the source). A bulk call outside a transaction (`mv`) is run again instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from skillfs.api import Store
from skillfs.errors import Conflict
from skillfs.model import File, FileEntry, Origin, Put, Remove, Scope
from skillfs.model.ops import WriteOptions
from skillfs.util.backoff import pause
from skillfs.util.deadline import deadline

Item = FileEntry | File  # a stored file (by hash) or content staged in this process


@dataclass(frozen=True)
class Write:
    path: str
    item: Item
    exclusive: bool = False
    #: A copy of a stored file: the (skill, path) it was read from, read again when the
    #: edits are applied to newer versions.
    source: tuple[str, str] | None = None


@dataclass(frozen=True)
class Delete:
    path: str


Edit = Write | Delete


@dataclass
class StagedSkill:
    """A skill as the filesystem sees it: the files read, with the staged edits applied."""

    name: str
    scope: Scope | None  # the scope its files come from; None: no scope has it
    version: int  # the version read (0: none)
    expected: int  # its version in the write scope (0: absent): what the publish replaces
    files: dict[str, Item]
    edits: list[Edit] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.read_paths = frozenset(self.files)  # what it held when read

    def apply(self, edit: Edit) -> None:
        """Apply and record an edit; an exclusive write fails if the file exists by now."""
        if isinstance(edit, Delete):
            self.files.pop(edit.path, None)
        elif edit.exclusive and edit.path in self.files:
            raise FileExistsError(f"skills/{self.name}/{edit.path} exists (exclusive create)")
        else:
            self.files[edit.path] = edit.item
        self.edits.append(edit)

    def check_write(self, rel: str, exclusive: bool) -> None:
        """The errors a local filesystem would give, before anything is staged."""
        where = f"skills/{self.name}/{rel}"
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.files:
                raise NotADirectoryError(
                    f"cannot write {where}: skills/{self.name}/{'/'.join(parts[:i])} is a file"
                )
        if any(p.startswith(rel + "/") for p in self.files):
            raise IsADirectoryError(f"cannot write {where}: it is a directory")
        if exclusive and rel in self.files:
            raise FileExistsError(f"{where} exists (exclusive create)")

    @property
    def written(self) -> bool:
        """Whether a file was written: then the skill goes to the write scope whole."""
        return any(isinstance(e, Write) for e in self.edits)


@dataclass
class Batch:
    """The changes of a transaction or of one bulk call, and the snapshot they read."""

    together: bool  # commit every touched skill with one store.commit
    #: On a conflict, apply the edits again to the newer versions (a transaction), or let
    #: the conflict reach the call, which runs again (a bulk call such as `mv`).
    replay: bool = True
    skills: dict[str, StagedSkill] = field(default_factory=dict)
    #: Every edit in the order made, by skill: how they are applied again.
    log: list[tuple[str, Edit]] = field(default_factory=list)
    #: The commit's message (None: the filesystem's).
    message: str | None = None
    complete: bool = False  # `skills` holds every skill in view
    blobs: dict[str, bytes] = field(default_factory=dict)  # fetched contents by sha256
    #: Work on the base filesystem run once the changes are committed (a move's removal of
    #: its base-side source), never when they fail.
    after: list[Callable[[], None]] = field(default_factory=list)


def publish(
    store: Store,
    scope: Scope,
    group: list[StagedSkill],
    batch: Batch,
    reread: Callable[[Sequence[str]], dict[str, StagedSkill]],
    message: str,
) -> None:
    """Commit the group's skills at once; on Conflict (a transaction) read them and the
    sources they copy from again and apply the edits again, in order."""
    end = deadline(store.retry_for)
    attempt = 0
    while changes := _changes(scope, group):
        try:
            store.commit(changes, options=WriteOptions(message=message))
            return
        except Conflict:
            if not batch.replay or time.monotonic() > end:
                raise
        pause(attempt)
        attempt += 1
        group = replayed(group, batch.log, reread)


def replayed(
    group: list[StagedSkill],
    log: list[tuple[str, Edit]],
    reread: Callable[[Sequence[str]], dict[str, StagedSkill]],
) -> list[StagedSkill]:
    """The group's skills read again with their edits applied again. A copied file is read
    again from its source (gone: FileNotFoundError, nothing written); a skill that existed
    when read and is gone now is not brought back by an edit of one of its files, and one
    whose files the edits all removed (a move away) but that holds other files now is not
    left without them: both are a Conflict."""
    names = {sk.name for sk in group}
    sources = {e.source[0] for n, e in log if n in names and isinstance(e, Write) and e.source}
    fresh = reread(sorted(names | sources))
    pristine = {n: dict(sk.files) for n, sk in fresh.items()}
    for name, edit in log:
        if name not in names:
            continue
        sk = fresh[name]
        if isinstance(edit, Write) and edit.source is not None:
            skill, path = edit.source
            item = (fresh[skill].files if skill in names else pristine[skill]).get(path)
            if item is None:
                raise FileNotFoundError(
                    f"skills/{skill}/{path} is gone since it was read (moved or deleted by "
                    "another writer): nothing was written"
                )
            edit = Write(edit.path, item, edit.exclusive, edit.source)
        sk.apply(edit)
    for old in group:
        sk = fresh[old.name]
        if old.version and not pristine[old.name]:
            raise Conflict(
                f"skills/{old.name} was deleted or moved by another writer since it was read: "
                "nothing was written",
                skill=old.name,
                current_version=sk.version,
            )
        if old.read_paths and not old.files and sk.files:
            raise Conflict(
                f"skills/{old.name} changed since it was read (files were added): moving or "
                "removing it would leave them behind; nothing was written",
                skill=old.name,
                current_version=sk.version,
            )
    return [fresh[sk.name] for sk in group]


def _changes(scope: Scope, group: list[StagedSkill]) -> list[Put | Remove]:
    """The Put or Remove of each skill; unchanged stored files go by reference. A skill read
    from the shared scope and written becomes the user's copy, which records its origin."""
    out: list[Put | Remove] = []
    for sk in group:
        if sk.files:
            copied = sk.scope is not None and sk.scope != scope and not sk.expected
            origin = Origin(scope=str(sk.scope), skill=sk.name, version=sk.version)
            out.append(Put(scope, sk.name, dict(sk.files), sk.expected, origin if copied else None))
        elif sk.expected:
            out.append(Remove(scope, sk.name, sk.expected))
    return out
