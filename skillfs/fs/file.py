"""The file object `SkillFileSystem.open` returns for a store file (docs/fsspec.md)."""

from __future__ import annotations

from typing import Any

from fsspec import AbstractFileSystem
from fsspec.spec import AbstractBufferedFile

from skillfs.fs.staging import Item
from skillfs.fs.tree import Info, SkillTree


class StoreFile(AbstractBufferedFile):  # type: ignore[misc]
    """A store file. Reads stay on the content opened, whatever is published meanwhile; a
    write publishes the skill on close, and nothing when its `with` block raises."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        tree: SkillTree,
        path: str,
        mode: str,
        block_size: int | None,
        cache_options: dict[str, Any] | None,
        item: Item | None = None,
        info: Info | None = None,
    ) -> None:
        self.tree = tree
        self.item = item
        size = info["size"] if info else None
        super().__init__(
            fs, path, mode, block_size or "default", cache_options=cache_options, size=size
        )
        if info is not None:
            self.details = info

    def _fetch_range(self, start: int, end: int) -> bytes:
        assert self.item is not None
        return self.tree.data(self.item, start, end)

    def _upload_chunk(self, final: bool = False) -> bool:
        if not final:
            return False  # keep buffering: a skill file is published whole
        self.tree.write(self.path, self.buffer.getvalue(), exclusive=self.mode == "xb")
        return True

    def commit(self) -> None:
        self.close()

    def discard(self) -> None:
        self.closed = True

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and self.writable():
            self.discard()
        self.close()
