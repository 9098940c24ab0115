"""`with fs.transaction:` for the fsspec filesystem (docs/fsspec.md).

The transaction drives the filesystem's batch protocol (`begin_batch`, `end_batch`), so it
needs no more of the filesystem than that and never imports it.
"""

from __future__ import annotations

from typing import Protocol

from fsspec.transaction import Transaction


class Batching(Protocol):
    """What a transaction asks of its filesystem: this thread's batch of store changes."""

    def begin_batch(self) -> None: ...

    def end_batch(self, commit: bool) -> None: ...


class SkillTransaction(Transaction):  # type: ignore[misc]
    """`with fs.transaction:` stages every store change of this thread and commits them with
    one store.commit on a clean exit, or drops them all on an exception. Changes to the
    base filesystem happen at once, outside it."""

    fs: Batching | None

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
            fs.end_batch(commit=published)
