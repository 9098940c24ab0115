"""`with fs.transaction:` for the fsspec filesystem (docs/fsspec.md).

The transaction drives the filesystem's batch protocol (`begin_batch`, `end_batch`, which
`Batches` gives the filesystem), so it needs no more of the filesystem than that and never
imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from fsspec.transaction import Transaction

from skillfs.store.who import check_message

if TYPE_CHECKING:
    from skillfs.fs.tree import SkillTree


class Batching(Protocol):
    """What a transaction asks of its filesystem: this thread's batch of store changes."""

    def begin_batch(self) -> None: ...

    def end_batch(self, commit: bool, message: str | None = None) -> None: ...


class Batches:
    """The filesystem's side of the batch protocol: this thread's batch of store changes."""

    if TYPE_CHECKING:
        _skills: SkillTree
        _intrans: bool
        _transaction: Any

    def begin_batch(self) -> None:
        """Stage this thread's store changes from now on, until `end_batch` (what
        SkillTransaction drives: docs/fsspec.md)."""
        if self._skills.staging:
            raise RuntimeError(
                "a skillfs transaction is open in this thread already: they do not nest"
            )
        self._skills.begin(together=True)

    def end_batch(self, commit: bool, message: str | None = None) -> None:
        """End the transaction and its batch: publish its store changes in one commit when
        `commit` (with `message`, else the filesystem's), else drop them."""
        self._intrans = False
        self._transaction = None
        self._skills.end(commit, message)


class SkillTransaction(Transaction):  # type: ignore[misc]
    """`with fs.transaction as tx:` stages every store change of this thread and commits them
    with one store.commit on a clean exit, or drops them all on an exception. `tx.message`
    (set any time before the end) is the commit's message, else the filesystem's
    `message=`. Changes to the base filesystem happen at once, outside it, except removals:
    they wait for the commit and are dropped with it."""

    fs: Batching | None
    message: str | None = None

    def start(self) -> None:
        assert self.fs is not None
        self.fs.begin_batch()
        super().start()

    def complete(self, commit: bool = True) -> None:
        fs = self.fs
        assert fs is not None
        mine = [f for f in self.files if getattr(f, "fs", None) is fs]
        published = False
        try:
            for f in mine:  # store files still open; base files commit on their own
                f.commit() if commit else f.discard()
            published = commit
        finally:
            self.files.clear()
            self.fs = None
            fs.end_batch(published, None if self.message is None else check_message(self.message))
            self.message = None
