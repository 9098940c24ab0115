"""Staged store changes of the fsspec filesystem: one bulk call's or one transaction's.

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
from typing import TYPE_CHECKING

from fsspec.transaction import Transaction

from skillfs.errors import Conflict
from skillfs.model import File, FileEntry, Put, Remove, Scope
from skillfs.store import Store

if TYPE_CHECKING:
    from skillfs.fs import SkillFileSystem

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
class SkillView:
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

    @property
    def written(self) -> bool:
        """Whether a file was written: then the skill goes to the write scope whole."""
        return any(isinstance(e, Write) for e in self.edits)


@dataclass
class Batch:
    """The changes of a transaction or of one bulk call, and the snapshot they read."""

    together: bool  # commit every touched skill with one store.commit
    skills: dict[str, SkillView] = field(default_factory=dict)
    complete: bool = False  # `skills` holds every skill in view
    blobs: dict[str, bytes] = field(default_factory=dict)  # fetched contents by sha256


def publish(
    store: Store,
    scope: Scope,
    group: list[SkillView],
    reread: Callable[[Sequence[str]], dict[str, SkillView]],
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


def _changes(scope: Scope, group: list[SkillView]) -> list[Put | Remove]:
    """The Put or Remove of each skill; unchanged stored files go by reference."""
    out: list[Put | Remove] = []
    for sk in group:
        if sk.files:
            out.append(Put(scope, sk.name, dict(sk.files), sk.expected))
        elif sk.expected:
            out.append(Remove(scope, sk.name, sk.expected))
    return out


class SkillTransaction(Transaction):  # type: ignore[misc]
    """`with fs.transaction:` stages every store change of this thread and commits them with
    one store.commit on a clean exit, or drops them all on an exception. Changes to the
    base filesystem happen at once, outside it."""

    fs: SkillFileSystem | None

    def start(self) -> None:
        assert self.fs is not None
        if self.fs._batch_now is not None:
            raise RuntimeError(
                "a skillfs transaction is open in this thread already: they do not nest"
            )
        super().start()
        self.fs._local.batch = Batch(together=True)

    def complete(self, commit: bool = True) -> None:
        fs = self.fs
        assert fs is not None
        batch = fs._batch_now
        mine = [f for f in self.files if getattr(f, "fs", None) is self.fs]
        try:
            for f in mine:  # store files still open; base files commit on their own
                f.commit() if commit else f.discard()
        finally:
            fs._local.batch = None
            self.files.clear()
            fs._intrans = False
            fs._transaction = None
            self.fs = None
        if commit and batch is not None:
            fs._commit(batch)
