"""Writing a snapshot's skills to a local directory for shell use (docs/design.md §4).

Layout: `<root>/<source>/<skill>/<path>`, e.g. `.skills-cache/user/code-reviewer/SKILL.md`.
A state file records the hash and mode of every file written and its status just after
(size, mtime, ctime, inode, mode), so the next call rewrites only files whose hash changed or
that someone altered on disk (a changed status, then a different hash), and removes the ones
that left the snapshot. Each file is created with `disk_mode` of its recorded mode, which the
umask narrows, written under a temporary name and renamed into place, so a script running
from the tree never sees a half-written file. A lock file serializes processes sharing a root.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from skillfs.errors import InvalidArgument, InvalidPath
from skillfs.model import FileEntry, Finding
from skillfs.model.names import normalize_path
from skillfs.model.names import unwritable as unwritable_paths
from skillfs.runtime.layers import Problem, Reader, SkillInfo
from skillfs.store.limits import disk_mode

log = logging.getLogger(__name__)

STATE_FILE = ".skillfs-state.json"
LOCK_FILE = ".skillfs.lock"

#: A file's status just after it was written: size, mtime_ns, ctime_ns, inode, st_mode. An
#: edit in place changes ctime even when it keeps the size and puts the mtime back.
Status = tuple[int, int, int, int, int]


class Written(NamedTuple):
    """What the state file says of one file: the manifest's hash and mode it was written
    from, and its status then (None in a state file of before the status was kept)."""

    sha256: str
    mode: int
    status: Status | None


def _status(st: os.stat_result) -> Status:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _read_state(root: Path) -> tuple[str, dict[str, Written], set[str]]:
    """The token, files and skipped skills of the last write; paths that would leave the
    root are ignored."""
    try:
        raw = json.loads((root / STATE_FILE).read_text())
        files = {p: _written(row) for p, row in raw["files"].items()}
        skipped = {str(s) for s in raw.get("skipped", [])}
        return str(raw["token"]), {p: v for p, v in files.items() if _inside(p)}, skipped
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "", {}, set()  # none yet, or unreadable: every file is rewritten


def unwritable(skill: SkillInfo) -> Finding | None:
    """Why a skill's files cannot be written to disk: a path stored before the path caps
    (docs/security.md) that is longer or deeper than a file system may hold."""
    why = unwritable_paths(skill.files)
    if why is None:
        return None
    return Finding(severity="error", field="files", rule="path-over-caps", message=why)


def _written(row: list[Any]) -> Written:
    """One row of the state file: `[sha256, mode, status]`, or `[sha256, mode]` as written
    before the status was kept (those files are written again, once)."""
    sha, mode, *rest = row
    status = tuple(int(x) for x in rest[0]) if rest else None
    if status is not None and len(status) != 5:
        raise ValueError(f"not a file status: {rest[0]!r}")
    return Written(str(sha), int(mode), status)


def _inside(rel: str) -> bool:
    try:
        return normalize_path(rel) == rel
    except InvalidArgument:
        return False


def _write_atomic(path: Path, data: bytes, mode: int, mtime: float) -> Status:
    """Write `path` whole, created with `disk_mode(mode)` for the umask to narrow (as any
    file the process creates); its status once in place."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, disk_mode(mode))
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return _status(path.lstat())


def _intact(path: Path, entry: FileEntry, written: Written | None) -> Status | None:
    """The file's status when it still holds what was written from `entry`, else None. Its
    bytes are hashed again only when its status changed since (an unchanged status costs
    one lstat); it is opened without following a link or blocking on a pipe."""
    if written is None or written.status is None or written[:2] != (entry.sha256, entry.mode):
        return None
    try:
        if _status(path.lstat()) == written.status:
            return written.status
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode) or before.st_mode != written.status[4]:
                return None
            h = hashlib.sha256()
            while chunk := fh.read(1 << 20):
                h.update(chunk)
            after = _status(os.fstat(fd))
    except OSError:
        return None
    same = h.hexdigest() == entry.sha256 and after == _status(before)
    return after if same else None


def materialize(skills: Sequence[SkillInfo], root: Path, token: str) -> list[Problem]:
    """Make `root` hold exactly these skills' files, touching only what differs. A skill
    with a path no file system holds is skipped, not the whole view: its Problem is
    returned, and logged once (while it stays skipped)."""
    root.mkdir(parents=True, exist_ok=True)
    real_root = os.path.realpath(root)
    problems: list[Problem] = []
    for s in skills:
        finding = unwritable(s)
        if finding is not None:
            problems.append(Problem(s.id, s.source, (finding,)))
    skipped = {f"{p.source}/{p.skill}" for p in problems}
    target: dict[str, tuple[SkillInfo, FileEntry]] = {
        f"{s.source_dir}/{s.id}/{p}": (s, e)
        for s in skills
        if f"{s.source}/{s.id}" not in skipped
        for p, e in s.files.items()
    }
    with _locked(root):
        old_token, written, was_skipped = _read_state(root)
        for p in problems:
            if f"{p.source}/{p.skill}" not in was_skipped:
                log.warning(
                    "materialize: skipped skill %r of %s: %s",
                    p.skill, p.source, p.findings[0].message,
                )  # fmt: skip
        statuses: dict[str, Status] = {}
        stale = []
        for rel, (_, e) in target.items():
            status = _intact(root / rel, e, written.get(rel))
            if status is None:
                stale.append(rel)
            else:
                statuses[rel] = status
        checked = all(statuses[rel] == written[rel].status for rel in statuses)
        same = old_token == token and skipped == was_skipped
        if same and not stale and checked and written.keys() == target.keys():
            return problems
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
                statuses[rel] = _write_atomic(path, data[entry.sha256], entry.mode, entry.mtime)
        files = {rel: [e.sha256, e.mode, list(statuses[rel])] for rel, (_, e) in target.items()}
        state = json.dumps({"token": token, "files": files, "skipped": sorted(skipped)})
        _write_atomic(root / STATE_FILE, state.encode(), 0o644, time.time())
    return problems


def _prune_empty(root: Path, directory: Path) -> None:
    """Remove directories left empty, up to (not including) the root."""
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
