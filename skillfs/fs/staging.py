"""Staged store changes of the fsspec filesystem: one bulk call's or one transaction's
(docs/fsspec.md).

Changes are recorded as edits (write a file, delete a file) on the skills they touch, as
read. Committing turns each skill into a Put of its whole file set (or a Remove when no file
is left) with the version read expected; on `Conflict` the skills are read again and the
edits applied again to the newer versions, so concurrent writers of different files of one
skill all keep theirs.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from skillfs.api import Store
from skillfs.errors import Conflict
from skillfs.model import File, FileEntry, Origin, Put, Remove, Scope

Item = FileEntry | File  # a stored file (by hash) or content staged in this process


@dataclass(frozen=True)
class Write:
    path: str
    item: Item
    exclusive: bool = False


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
    skills: dict[str, StagedSkill] = field(default_factory=dict)
    complete: bool = False  # `skills` holds every skill in view
    blobs: dict[str, bytes] = field(default_factory=dict)  # fetched contents by sha256
    #: Work on the base filesystem run once the changes are committed (a move's removal of
    #: its base-side source), never when they fail.
    after: list[Callable[[], None]] = field(default_factory=list)


def publish(
    store: Store,
    scope: Scope,
    group: list[StagedSkill],
    reread: Callable[[Sequence[str]], dict[str, StagedSkill]],
) -> None:
    """Commit the group's skills at once; on Conflict reread them and redo the edits."""
    deadline = time.monotonic() + store.retry_for
    attempt = 0
    while changes := _changes(scope, group):
        try:
            store.commit(changes)
            return
        except Conflict:
            if time.monotonic() > deadline:
                raise
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
        attempt += 1
        fresh = reread([sk.name for sk in group])
        for sk in group:
            for edit in sk.edits:
                fresh[sk.name].apply(edit)
        group = [fresh[sk.name] for sk in group]


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
