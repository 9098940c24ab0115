"""`LocalDir`: skills from a local directory, one sub-directory each (docs/runtime.md)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from skillfs.errors import StoreUnavailable
from skillfs.model import FileEntry, Finding, Manifest
from skillfs.names import is_hidden_dir
from skillfs.runtime.checked import (
    SKIPPED_DIRS,
    Blobs,
    CheckedLayer,
    build_manifest,
    content_digest,
    safe_name,
)
from skillfs.runtime.layers import LayerSkills
from skillfs.store_blobs import sha256
from skillfs.validation import finding

_StatKey = tuple[int, int, int, int, int]


class LocalDir(CheckedLayer):
    """A local directory whose sub-directories are skills (`~/.agent/skills/<skill>/SKILL.md`).

    A snapshot checks it at most every `check_interval` seconds, with a stat walk (mtime,
    ctime, size, inode, mode of every file); only files whose stat changed are read again.
    Dot-files and `__pycache__` inside a skill are left out, as are `_`/`.` directories."""

    def __init__(
        self, path: str | os.PathLike[str], *, name: str | None = None, check_interval: float = 2.0
    ) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        base = safe_name(name or self.path.name)
        self.label = f"local:{base}"
        self.source_dir = f"local-{base}"
        super().__init__(check_interval)
        self._stats: dict[str, _StatKey] = {}
        self._files: dict[str, tuple[FileEntry, bytes]] = {}  # "skill/path" -> entry, bytes

    def __repr__(self) -> str:
        return f"LocalDir({str(self.path)!r})"

    def _refresh(self) -> None:
        """Re-read the directory when something changed on disk."""
        stats = dict(self._walk())
        if stats != self._stats:
            self._state = self._rebuild(stats)
            self._stats = stats

    def _walk(self) -> Iterator[tuple[str, _StatKey]]:
        try:
            tops = sorted(os.scandir(self.path), key=lambda d: d.name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnavailable(f"cannot read skills directory {self.path}: {exc}") from exc
        for top in tops:
            if is_hidden_dir(top.name) or not top.is_dir():
                continue
            for dirpath, dirs, names in os.walk(top.path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
                rel = os.path.relpath(dirpath, self.path).replace(os.sep, "/")
                for n in sorted(names):
                    if n.startswith("."):
                        continue
                    with contextlib.suppress(OSError):  # vanished or unreadable: left out
                        st = os.stat(os.path.join(dirpath, n))
                        if stat.S_ISREG(st.st_mode):
                            key = (
                                st.st_mtime_ns,
                                st.st_ctime_ns,
                                st.st_size,
                                st.st_ino,
                                st.st_mode,
                            )
                            yield f"{rel}/{n}", key

    def _rebuild(self, stats: Mapping[str, _StatKey]) -> LayerSkills:
        old = self._files
        files: dict[str, tuple[FileEntry, bytes]] = {}
        unreadable: dict[str, list[Finding]] = {}
        for rel, key in stats.items():
            skill = rel.split("/", 1)[0]
            if rel in old and self._stats.get(rel) == key:
                files[rel] = old[rel]
                continue
            try:
                data = (self.path / rel).read_bytes()
            except OSError as exc:
                unreadable.setdefault(skill, []).append(
                    finding("error", None, "unreadable", f"cannot read {rel}: {exc}")
                )
                continue
            mode = 0o755 if key[4] & 0o111 else 0o644
            entry = FileEntry(
                sha256=sha256(data),
                size=len(data),
                mode=mode,
                mtime=key[0] / 1e9,
            )
            files[rel] = (entry, data)
        self._files = files
        by_skill: dict[str, dict[str, tuple[FileEntry, bytes]]] = {}
        for rel, item in files.items():
            skill, path = rel.split("/", 1)
            by_skill.setdefault(skill, {})[path] = item
        previous = self._state.manifests
        manifests: dict[str, Manifest] = {}
        for skill, skill_files in by_skill.items():
            table = {p: e for p, (e, _) in skill_files.items()}
            prev = previous.get(skill)
            same = prev is not None and prev.commit_id == content_digest(table)
            if prev is not None and same and skill not in unreadable:
                manifests[skill] = prev  # unchanged: keep the object (and its parsed frontmatter)
                continue
            newest = max(e.mtime for e in table.values())
            manifests[skill] = build_manifest(skill, skill_files, unreadable.get(skill, []), newest)
        blobs = Blobs({e.sha256: d for e, d in files.values()})
        return LayerSkills(manifests, blobs)
