"""What a write's files become before any commit (docs/design.md §2): a file table checked
against the limits and the path rule, its new bytes hashed; and a renamed skill's SKILL.md.
The Committer makes every table here, whichever surface the files came from."""

from __future__ import annotations

import re
from collections.abc import Mapping

from skillfs.errors import InvalidPath
from skillfs.model import File, FileEntry
from skillfs.model.names import check_new_path, normalize_path
from skillfs.model.ops import FileValue
from skillfs.store.blobs import sha256
from skillfs.store.limits import Limits, check_file, check_file_table, default_mode


def file_table(
    limits: Limits, skill: str, files: Mapping[str, FileValue], blobs: dict[str, bytes],
    now: float,
) -> dict[str, FileEntry]:  # fmt: skip
    """A write's checked file table; its new bytes are added to `blobs`. A stored file kept
    by reference keeps its path; new bytes need a path `check_new_path` allows. Two paths
    naming one file are refused, whichever surface wrote them."""
    entries: dict[str, FileEntry] = {}
    for raw_path, value in files.items():
        path = (
            normalize_path(raw_path) if isinstance(value, FileEntry) else check_new_path(raw_path)
        )
        if path in entries:
            raise InvalidPath(f"{skill}: {raw_path!r} names the same file as another path")
        entries[path] = _entry(limits, skill, path, value, blobs, now)
    check_file_table(limits, skill, entries)
    return entries


def _entry(
    limits: Limits, skill: str, path: str, value: FileValue, blobs: dict[str, bytes], now: float
) -> FileEntry:
    """A file table row: a stored file is kept by reference, new bytes are hashed."""
    if isinstance(value, FileEntry):
        check_file(limits, skill, path, value.size, value.mode, value.mtime)
        return value
    f = value if isinstance(value, File) else File(_bytes(value))
    check_file(limits, skill, path, len(f.data), f.mode, f.mtime)
    digest = sha256(f.data)
    blobs[digest] = f.data
    return FileEntry(
        sha256=digest,
        size=len(f.data),
        mode=f.mode if f.mode is not None else default_mode(path, f.data),
        mtime=f.mtime if f.mtime is not None else now,
    )


def _bytes(value: bytes | bytearray | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def renamed_skill_md(data: bytes, old: str, new: str) -> bytes | None:
    """SKILL.md with its frontmatter `name` changed from `old` to `new` (the spec wants the
    name to equal the directory); None when it does not name `old`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.startswith("---"):
        return None
    end = text.find("\n---", 3)
    if end < 0:
        return None
    head = text[:end]
    match = next((m for m in _NAME_LINE.finditer(head) if m.group("name").strip() == old), None)
    if match is None:
        return None
    head = head[: match.start()] + f"name: {new}" + head[match.end() :]
    return (head + text[end:]).encode()


_NAME_LINE = re.compile(r"^name[ \t]*:[ \t]*(['\"]?)(?P<name>[^'\"\n]*)\1[ \t]*$", re.MULTILINE)
