"""Writing a snapshot's skills to a local directory for shell use (docs/design.md §4).

Layout: `<root>/<source>/<skill>/<path>`, e.g. `.skills-cache/user/code-reviewer/SKILL.md`.
A state file records the hash and mode of every file written, so the next call rewrites only
files whose hash changed (or that someone altered on disk) and removes the ones that left the
snapshot. Each file is written to a temporary name and renamed into place, so a script running
from the tree never sees a half-written file. A lock file serializes processes sharing a root.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from skillfs.errors import InvalidPath
from skillfs.model import FileEntry
from skillfs.names import normalize_path
from skillfs.runtime.layers import Reader, SkillInfo

STATE_FILE = ".skillfs-state.json"
LOCK_FILE = ".skillfs.lock"

_Written = dict[str, tuple[str, int]]  # relative path -> (sha256, mode)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _read_state(root: Path) -> tuple[str, _Written]:
    """The token and files of the last write; paths that would leave the root are ignored."""
    try:
        raw = json.loads((root / STATE_FILE).read_text())
        files = {p: (str(s), int(m)) for p, (s, m) in raw["files"].items()}
        return str(raw["token"]), {p: v for p, v in files.items() if _inside(p)}
    except (OSError, ValueError, KeyError, TypeError):
        return "", {}  # none yet, or unreadable: every file is checked and rewritten if needed


def _inside(rel: str) -> bool:
    try:
        return normalize_path(rel) == rel
    except InvalidPath:
        return False


def _write_atomic(path: Path, data: bytes, mode: int, mtime: float) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode & 0o777)  # permission bits only: never setuid, setgid, sticky
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _intact(path: Path, entry: FileEntry) -> bool:
    """The file we wrote is still there, same size and mode (a cheap check, no hashing)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return st.st_size == entry.size and (st.st_mode & 0o7777) == (entry.mode & 0o777)


def materialize(skills: Sequence[SkillInfo], root: Path, token: str) -> None:
    """Make `root` hold exactly these skills' files, touching only what differs."""
    root.mkdir(parents=True, exist_ok=True)
    real_root = os.path.realpath(root)
    target: dict[str, tuple[SkillInfo, FileEntry]] = {
        f"{s.source_dir}/{s.id}/{p}": (s, e) for s in skills for p, e in s.files.items()
    }
    with _locked(root):
        old_token, written = _read_state(root)
        stale = [
            rel
            for rel, (s, e) in target.items()
            if written.get(rel) != (e.sha256, e.mode) or not _intact(root / rel, e)
        ]
        if old_token == token and not stale and written.keys() == target.keys():
            return
        for rel in sorted(written.keys() - target.keys()):  # first, so a file may become a dir
            with contextlib.suppress(FileNotFoundError):
                (root / rel).unlink()
            _prune_empty(root, (root / rel).parent)
        by_reader: dict[int, tuple[Reader, list[str]]] = {}
        for rel in stale:
            reader = target[rel][0].reader
            by_reader.setdefault(id(reader), (reader, []))[1].append(rel)
        for reader, rels in by_reader.values():
            data = reader.read_entries(target[rel][1] for rel in rels)
            for rel in rels:
                entry = target[rel][1]
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                if not os.path.realpath(path.parent).startswith(real_root + os.sep):
                    raise InvalidPath(f"{path.parent} leads out of {root} through a symlink")
                _write_atomic(path, data[entry.sha256], entry.mode, entry.mtime)
        files = {rel: [e.sha256, e.mode] for rel, (_, e) in target.items()}
        state = json.dumps({"token": token, "files": files}).encode()
        _write_atomic(root / STATE_FILE, state, 0o644, time.time())


def _prune_empty(root: Path, directory: Path) -> None:
    """Remove directories left empty, up to (not including) the root."""
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
