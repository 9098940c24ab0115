"""A skill's files as the pages list and change them."""

from __future__ import annotations

from skillfs.model import File, FileEntry, Manifest
from skillfs.skill_md import SKILL_MD

#: Text files up to this size open in the editor; larger ones are downloaded and uploaded.
MAX_EDIT_BYTES = 2 * 1024 * 1024


def file_tree(paths: list[str]) -> list[tuple[str, int, str]]:
    """Rows (kind, depth, path or directory name) for a skill's file list: SKILL.md first,
    then each directory's files under a heading."""
    rows: list[tuple[str, int, str]] = []
    seen: set[str] = set()
    for path in sorted(paths, key=lambda p: (p != SKILL_MD, p.split("/"))):
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            if folder not in seen:
                seen.add(folder)
                rows.append(("dir", depth, parts[depth]))
        rows.append(("file", len(parts) - 1, path))
    return rows


def with_file(m: Manifest, path: str, data: bytes) -> dict[str, File | FileEntry]:
    """A version's files (kept by reference) with `path` set to `data`, in the mode that file
    had (a new file's mode comes from its content)."""
    files: dict[str, File | FileEntry] = dict(m.files)
    old = m.files.get(path)
    files[path] = File(data, mode=old.mode if old else None)
    return files
