"""What an import records in the version it writes (docs/cli.md, "Import sources"): the source
it came from and a digest of the files it wrote, so that a later import of the same source
can tell a skill it may update (still as that import left it) from one someone else changed
since, which it must not revert."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from pydantic.dataclasses import dataclass

from skillfs.errors import InvalidArgument
from skillfs.model.file_entry import FileEntry

#: The longest source a version records.
SOURCE_MAX = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportMark:
    """An imported version's source (a directory's absolute path, `zip:<file name>`, or the
    name an operator gave) and the digest (`files_digest`) of the files the import wrote."""

    source: str
    digest: str

    def wrote(self, source: str, files: Mapping[str, FileEntry]) -> bool:
        """Whether `files` are still what an import of `source` wrote."""
        return self.source == source and self.digest == files_digest(files)


def files_digest(files: Mapping[str, FileEntry]) -> str:
    """The SHA-256 of a file table's sorted (path, content digest, mode) rows: what a skill
    holds, whatever the files' times."""
    rows = sorted((path, e.sha256, e.mode) for path, e in files.items())
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


def check_source(source: str) -> str:
    """A source is 1 to SOURCE_MAX characters without control characters."""
    if (
        not isinstance(source, str)
        or not 0 < len(source) <= SOURCE_MAX
        or any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in source)
    ):
        raise InvalidArgument(
            f"invalid import source {source!r}: give 1 to {SOURCE_MAX} characters without "
            "control characters (a directory's path, a zip's name, or a name such as "
            "git:team-skills)"
        )
    return source
