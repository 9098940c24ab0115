"""A skill's files as the pages list and change them."""

from __future__ import annotations

from typing import NamedTuple

from skillfs.model import File, FileEntry, Manifest
from skillfs.spec.skill_md import SKILL_MD

#: Text files up to this size open in the editor; larger ones are downloaded and uploaded.
MAX_EDIT_BYTES = 2 * 1024 * 1024


class TreeRow(NamedTuple):
    """One row of a skill's file list: a directory heading or a file."""

    kind: str  # "dir" or "file"
    depth: int
    path: str  # the file's path, or the directory's ("references/api")
    parent: str  # the directory it is in ("" at the skill's root)
    files: int  # a directory: how many files are below it; a file: 1

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def file_tree(paths: list[str]) -> list[TreeRow]:
    """Rows for a skill's file list: SKILL.md first, then each directory's files under a
    heading that counts them (the pages fold directories by it)."""
    ordered = sorted(paths, key=lambda p: (p != SKILL_MD, p.split("/")))
    below: dict[str, int] = {}
    for path in ordered:
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            below[folder] = below.get(folder, 0) + 1
    rows: list[TreeRow] = []
    seen: set[str] = set()
    for path in ordered:
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            if folder not in seen:
                seen.add(folder)
                rows.append(TreeRow("dir", depth, folder, "/".join(parts[:depth]), below[folder]))
        rows.append(TreeRow("file", len(parts) - 1, path, "/".join(parts[:-1]), 1))
    return rows


def with_file(m: Manifest, path: str, data: bytes) -> dict[str, File | FileEntry]:
    """A version's files (kept by reference) with `path` set to `data`, in the mode that file
    had (a new file's mode comes from its content)."""
    files: dict[str, File | FileEntry] = dict(m.files)
    old = m.files.get(path)
    files[path] = File(data, mode=old.mode if old else None)
    return files
