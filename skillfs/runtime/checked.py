"""What the layers read from outside the store share (docs/design.md §1): a directory or a
Git repository is checked again at most every `check_interval` seconds, and its bytes are held
in memory keyed by SHA-256, so a snapshot reads what it saw even if the source changes under
it (C4).
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from skillfs.model import FileEntry, Finding, Manifest
from skillfs.runtime.layers import Layer, LayerSkills
from skillfs.spec.skill_dirs import SKIPPED_DIRS
from skillfs.spec.skill_md import inspect_skill


def safe_name(text: str) -> str:
    """A directory-safe name: ids are already safe; paths and URLs are reduced to their tail."""
    tail = re.sub(r"\.git$", "", text.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    cleaned = re.sub(r"[^A-Za-z0-9._@+-]+", "-", tail).strip("-.") or "skills"
    return cleaned[:64]


def content_digest(files: Mapping[str, FileEntry]) -> str:
    """A skill's content identity: paths, hashes and modes."""
    h = hashlib.sha256()
    for path in sorted(files):
        e = files[path]
        h.update(f"{path}\0{e.sha256}\0{e.mode:o}\n".encode())
    return "sha256:" + h.hexdigest()


def build_manifest(
    skill: str,
    files: Mapping[str, tuple[FileEntry, bytes]],
    findings: Sequence[Finding],
    committed_at: float,
) -> Manifest:
    table = {p: e for p, (e, _) in files.items()}
    frontmatter, spec, typed = inspect_skill(skill, {p: d for p, (_, d) in files.items()})
    return Manifest(
        skill=skill,
        version=0,  # disk skills have no store version; the commit id carries their digest
        commit_id=content_digest(table),
        committed_at=committed_at,
        frontmatter=frontmatter,
        findings=(*findings, *spec),
        typed=typed,
        files=table,
    )


class Blobs:
    """The bytes of one disk layer state, by SHA-256."""

    def __init__(self, data: Mapping[str, bytes]) -> None:
        self._data = dict(data)

    def read_entry(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes:
        return self._data[entry.sha256][start:end]

    def read_entries(self, entries: Iterable[FileEntry]) -> Mapping[str, bytes]:
        return {e.sha256: self._data[e.sha256] for e in entries}


class CheckedLayer(Layer):
    """A disk or Git layer: its state is checked again at most every `check_interval` seconds,
    by one thread at a time; between checks a snapshot gets the state it holds."""

    def __init__(self, check_interval: float) -> None:
        self.check_interval = check_interval
        self._lock = threading.Lock()
        self._checked = -float("inf")
        self._state = LayerSkills({}, Blobs({}))

    def state(self) -> LayerSkills:
        """The layer's skills as of the last check, checked again first when one is due."""
        now = time.monotonic()
        if now - self._checked < self.check_interval:
            return self._state
        with self._lock:
            if now - self._checked >= self.check_interval:
                self._refresh()
                self._checked = now
            return self._state

    def _refresh(self) -> None:
        """Check the source; replace `_state` when it changed."""
        raise NotImplementedError


def skipped(path: str) -> bool:
    """Dot-files and `__pycache__` inside a skill are not part of it (as for LocalDir)."""
    parts = path.split("/")[1:]
    return any(p.startswith(".") or p in SKIPPED_DIRS for p in parts)
