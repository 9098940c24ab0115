"""A big file table as it is stored (docs/design.md §2, "File tables"): in content-addressed
chunks, which `skillfs.store.tables` writes and reads back; a manifest holding a `TableRef`
stores no `files` of its own."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from skillfs.model.file_entry import FileEntry


class TableRef(BaseModel):
    """The digests of a stored table's top chunks in path order, and the number and bytes of
    its files, so that a history listing says them without reading a chunk."""

    model_config = ConfigDict(frozen=True)

    chunks: tuple[str, ...]
    count: int
    size: int


class TableChunk(BaseModel):
    """One chunk of a stored file table, kept as a blob named by the SHA-256 of its JSON: a
    run of the table's rows in path order (`files`), or the digests of the chunks below it
    (`chunks`), never both."""

    model_config = ConfigDict(frozen=True)

    files: dict[str, FileEntry] = Field(default_factory=dict, exclude_if=lambda v: not v)
    chunks: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)


def file_count(files: Mapping[str, FileEntry], table: TableRef | None) -> int:
    """The files of a table, whichever form it has (whole, or stored in chunks)."""
    return table.count if table is not None else len(files)


def file_bytes(files: Mapping[str, FileEntry], table: TableRef | None) -> int:
    """The bytes of a table's files, whichever form it has."""
    return table.size if table is not None else sum(e.size for e in files.values())
