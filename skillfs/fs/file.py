"""The file objects `SkillFileSystem.open` returns for a store file (docs/fsspec.md
"Writing"): binary, text or compressed, each publishing on close and nothing when its `with`
block raises."""

from __future__ import annotations

import io
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
        """Publish nothing. A compressor closed after this still writes its trailer: that is
        dropped, and so is everything else written from now on."""
        self.discarded = True

    def write(self, data: bytes) -> int:
        if getattr(self, "discarded", False):
            return len(data)
        return super().write(data)  # type: ignore[no-any-return]

    def close(self) -> None:
        if getattr(self, "discarded", False):
            self.closed = True
        else:
            super().close()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and self.writable():
            self.discard()
        self.close()


class TextWrite(io.TextIOWrapper):
    """Text written to a store file (or a compressor over one): when the `with` block raises,
    nothing is published. fsspec's own text wrapper would close, and so publish, the file."""

    def __init__(self, buffer: Any, **text: Any) -> None:
        super().__init__(_Told(buffer), **text)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: Any) -> None:
        if exc_type is not None:
            self.buffer.discard()  # type: ignore[attr-defined]  # a StoreFile's or ours
        super().__exit__(exc_type, *exc)


class _Told:
    """A file being written as `TextIOWrapper` sees it: seekable as far as `tell` goes. The
    wrapper writes the byte-order mark of UTF-16 and UTF-32 only at a known start of a
    seekable stream; without it the file could not be read back in its encoding. Seeking
    still fails, as on the file itself."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def seekable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class CompressedWrite:
    """A compressor (fsspec's `compression=`) writing into a store file. Closing it closes the
    store file too, which publishes it; when the `with` block raises, nothing is published.
    Everything else is the compressor's."""

    def __init__(self, path: str, raw: StoreFile, compression: str) -> None:
        from fsspec.compression import compr
        from fsspec.core import get_compression

        self._raw = raw
        self._f = compr[get_compression(path, compression)](raw, mode="w")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> CompressedWrite:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            self.discard()
        self.close()

    def discard(self) -> None:
        self._raw.discard()

    def close(self) -> None:
        """The compressor's trailer, then the publish; nothing published if the first fails."""
        try:
            self._f.close()
        except BaseException:
            self._raw.discard()
            raise
        finally:
            self._raw.close()
