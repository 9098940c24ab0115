"""Where a worker's skills come from, and how the layers merge (docs/design.md §1).

A layer yields a `LayerSkills`: an immutable mapping of skill directory -> `Manifest` plus a
way to read a file by its table entry. Store scopes get theirs from the follower; `LocalDir`
and `GitRepo` build theirs from disk or Git objects, holding the bytes in memory keyed by
SHA-256 so that a snapshot reads what it saw even if the directory changes under it (C4).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from skillfs.errors import InvalidPath, StoreUnavailable
from skillfs.model import FileEntry, Finding, Manifest, Scope
from skillfs.names import check_id, check_skill_name, is_hidden_dir
from skillfs.skill_md import inspect_skill
from skillfs.store_blobs import sha256
from skillfs.validation import finding

log = logging.getLogger(__name__)

#: Directories inside a skill that disk layers leave out (byte-code of a script that was run).
_SKIPPED_DIRS = ("__pycache__",)


class Reader(Protocol):
    """Reads files of a layer by their manifest entries: the `Store` itself for store
    layers, the bytes held in memory for disk and Git layers."""

    def read_entry(self, entry: FileEntry) -> bytes: ...

    def read_entries(self, entries: Iterable[FileEntry]) -> Mapping[str, bytes]:
        """Bytes by SHA-256, in as few round trips as the layer allows."""
        ...


@dataclass(frozen=True, eq=False)
class LayerSkills:
    """One layer's skills at one moment. Never mutated: a change makes a new object, so
    comparing identities tells whether anything in the layer changed."""

    manifests: Mapping[str, Manifest]
    reader: Reader


@dataclass(frozen=True)
class Problem:
    """A skill left out of the worker's view, with the findings that say why (for operators)."""

    skill: str
    source: str
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class SkillInfo:
    """One skill of the merged view: what it is and which layer it came from."""

    id: str
    name: str
    description: str
    source: str  # the layer's label, e.g. "user:support-bot/alice", "git:team-skills"
    source_dir: str  # the layer's directory under a materialized root, e.g. "user"
    scope: Scope | None  # the store scope, None for disk and Git layers
    version: int | None  # the store version, None for disk and Git layers
    digest: str  # the store commit id, or the content digest of a disk skill
    files: Mapping[str, FileEntry]
    findings: tuple[Finding, ...]  # spec violations of a usable skill, for operators
    shadows: tuple[str, ...]  # labels of the lower layers holding a skill of the same id
    reader: Reader = field(repr=False, compare=False)


class Layer:
    """A source of skills with a label (shown to models and operators) and a directory name
    for the materialized layout (`.skills-cache/<source_dir>/<skill>/`)."""

    label: str
    source_dir: str
    scope: Scope | None = None  # the store scope of a KV layer


def _safe_name(text: str) -> str:
    """A directory-safe name: ids are already safe; paths and URLs are reduced to their tail."""
    tail = re.sub(r"\.git$", "", text.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    cleaned = re.sub(r"[^A-Za-z0-9._@+-]+", "-", tail).strip("-.") or "skills"
    return cleaned[:64]


class Market(Layer):
    """A KV `market` scope (docs/design.md §1): a skill registry kept in the store."""

    def __init__(self, market_id: str) -> None:
        self.scope: Scope = Scope.market(check_id("market", market_id))
        self.label = str(self.scope)
        self.source_dir = f"market-{market_id}"

    def __repr__(self) -> str:
        return f"Market({self.scope.market_id!r})"


class StoreScope(Layer):
    """The agent-shared or per-user scope; Skills adds these two on top of the given layers."""

    def __init__(self, scope: Scope) -> None:
        self.scope: Scope = scope
        self.label = str(scope)
        self.source_dir = scope.kind  # "shared" or "user": one of each per worker


# ------------------------------------------------------------------------------ disk layers


def _digest(files: Mapping[str, FileEntry]) -> str:
    """A skill's content identity: paths, hashes and modes."""
    h = hashlib.sha256()
    for path in sorted(files):
        e = files[path]
        h.update(f"{path}\0{e.sha256}\0{e.mode:o}\n".encode())
    return "sha256:" + h.hexdigest()


def _build_manifest(
    skill: str,
    files: Mapping[str, tuple[FileEntry, bytes]],
    findings: Sequence[Finding],
    committed_at: float,
) -> Manifest:
    table = {p: e for p, (e, _) in files.items()}
    frontmatter, spec = inspect_skill(skill, {p: d for p, (_, d) in files.items()})
    return Manifest(
        skill=skill,
        version=0,  # disk skills have no store version; the commit id carries their digest
        commit_id=_digest(table),
        committed_at=committed_at,
        frontmatter=frontmatter,
        findings=[*findings, *spec],
        files=table,
    )


class _Blobs:
    """The bytes of one disk layer state, by SHA-256."""

    def __init__(self, data: Mapping[str, bytes]) -> None:
        self._data = dict(data)

    def read_entry(self, entry: FileEntry) -> bytes:
        return self._data[entry.sha256]

    def read_entries(self, entries: Iterable[FileEntry]) -> Mapping[str, bytes]:
        return {e.sha256: self._data[e.sha256] for e in entries}


_StatKey = tuple[int, int, int, int, int]


class _Checked(Layer):
    """A disk or Git layer: its state is checked again at most every `check_interval` seconds,
    by one thread at a time; between checks a snapshot gets the state it holds."""

    def __init__(self, check_interval: float) -> None:
        self.check_interval = check_interval
        self._lock = threading.Lock()
        self._checked = -float("inf")
        self._state = LayerSkills({}, _Blobs({}))

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


class LocalDir(_Checked):
    """A local directory whose sub-directories are skills (`~/.agent/skills/<skill>/SKILL.md`).

    A snapshot checks it at most every `check_interval` seconds, with a stat walk (mtime,
    ctime, size, inode, mode of every file); only files whose stat changed are read again.
    Dot-files and `__pycache__` inside a skill are left out, as are `_`/`.` directories."""

    def __init__(
        self, path: str | os.PathLike[str], *, name: str | None = None, check_interval: float = 2.0
    ) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        base = _safe_name(name or self.path.name)
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
                dirs[:] = sorted(
                    d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS
                )
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
            if prev is not None and prev.commit_id == _digest(table) and skill not in unreadable:
                manifests[skill] = prev  # unchanged: keep the object (and its parsed frontmatter)
                continue
            newest = max(e.mtime for e in table.values())
            manifests[skill] = _build_manifest(
                skill, skill_files, unreadable.get(skill, []), newest
            )
        blobs = _Blobs({e.sha256: d for e, d in files.values()})
        return LayerSkills(manifests, blobs)


class GitRepo(_Checked):
    """A Git repository of skills, cloned once (bare, shallow) into a cache directory.

    A snapshot asks the remote for its HEAD (`git ls-remote`) at most every `check_interval`
    seconds and fetches only when it moved. Files are read from Git objects, which never
    change, so processes can share one cache directory. A repository with a top-level
    `skills/` folder uses it as the root of its skills; otherwise the root is the top level."""

    def __init__(
        self,
        url: str,
        *,
        ref: str = "HEAD",
        name: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        check_interval: float = 60.0,
    ) -> None:
        self.url = url
        self.ref = ref
        base = _safe_name(name or url)
        self.label = f"git:{base}"
        self.source_dir = f"git-{base}"
        key = hashlib.sha256(f"{url}\0{ref}".encode()).hexdigest()[:16]
        root = (
            Path(os.path.expanduser(os.fspath(cache_dir)))
            if cache_dir is not None
            else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "skillfs"
            / "git"
        )
        self.repo_dir = root / f"{base}-{key}.git"
        super().__init__(check_interval)
        self.head: str | None = None  # the commit the current state was read from
        self._objects: dict[str, tuple[FileEntry, bytes]] = {}  # git blob id -> entry, bytes

    def __repr__(self) -> str:
        return f"GitRepo({self.url!r})"

    def _git(self, *args: str, stdin: bytes | None = None, cwd: Path | None = None) -> bytes:
        proc = subprocess.run(
            ["git", *args],
            input=stdin,
            cwd=cwd,
            capture_output=True,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
            check=False,
        )
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip()
            raise StoreUnavailable(f"git {args[0]} of {self.url} failed: {why}")
        return proc.stdout

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """Processes sharing the cache directory clone and fetch one at a time."""
        self.repo_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.repo_dir}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _remote_head(self) -> str:
        out = self._git("ls-remote", self.url, self.ref).decode()
        refs: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            refs[name] = sha
        for name in (self.ref, f"refs/heads/{self.ref}", f"refs/tags/{self.ref}"):
            if name in refs:
                return refs[name]
        raise StoreUnavailable(f"git repository {self.url} has no ref {self.ref!r}")

    def _refresh(self) -> None:
        """Read the commit the remote's ref points at, fetching it first, when it moved."""
        try:
            remote = self._remote_head()
        except StoreUnavailable as exc:
            if self.head is None and not (self.repo_dir / "HEAD").exists():
                raise
            log.warning("%s; serving commit %s of %s", exc, self.head or "cached", self.url)
            remote = None
        if remote is not None and remote == self.head:
            return
        with self._file_lock():
            if not (self.repo_dir / "HEAD").exists():
                self._clone()
            commit = self._local_commit()
            if remote is not None and commit != remote:
                self._git("fetch", "--quiet", "--depth=1", "origin", self.ref, cwd=self.repo_dir)
                commit = self._git("rev-parse", "FETCH_HEAD", cwd=self.repo_dir).decode().strip()
                self._git("update-ref", "refs/skillfs/current", commit, cwd=self.repo_dir)
        if commit != self.head:
            self._state = self._read_commit(commit)
            self.head = commit

    def _clone(self) -> None:
        tmp = self.repo_dir.with_name(f"{self.repo_dir.name}.tmp-{os.getpid()}")
        branch = [] if self.ref == "HEAD" else [f"--branch={self.ref}"]
        self._git("clone", "--quiet", "--bare", "--depth=1", *branch, self.url, str(tmp))
        head = self._git("rev-parse", "HEAD", cwd=tmp).decode().strip()
        self._git("update-ref", "refs/skillfs/current", head, cwd=tmp)
        os.replace(tmp, self.repo_dir)

    def _local_commit(self) -> str:
        return self._git("rev-parse", "refs/skillfs/current", cwd=self.repo_dir).decode().strip()

    def _read_commit(self, commit: str) -> LayerSkills:
        listing = self._git("ls-tree", "-r", "-l", "-z", commit, cwd=self.repo_dir)
        rows: list[tuple[str, str, str]] = []  # (mode, object id, path)
        for record in listing.split(b"\0"):
            if not record:
                continue
            meta, path = record.decode("utf-8", "surrogateescape").split("\t", 1)
            mode, kind, oid, _size = meta.split()
            if kind == "blob" and mode in ("100644", "100755"):
                rows.append((mode, oid, path))
        root = "skills/" if any(p.startswith("skills/") for _, _, p in rows) else ""
        when = float(self._git("show", "-s", "--format=%ct", commit, cwd=self.repo_dir))
        wanted = [(m, o, p[len(root) :]) for m, o, p in rows if p.startswith(root)]
        wanted = [
            (m, o, p)
            for m, o, p in wanted
            if "/" in p and not is_hidden_dir(p.split("/", 1)[0]) and not _skipped(p)
        ]
        missing = sorted({o for _, o, _ in wanted} - self._objects.keys())
        objects = {o: self._objects[o] for _, o, _ in wanted if o in self._objects}
        for oid, data in self._cat_files(missing):
            entry = FileEntry(sha256=sha256(data), size=len(data), mode=0o644, mtime=when)
            objects[oid] = (entry, data)
        self._objects = objects
        by_skill: dict[str, dict[str, tuple[FileEntry, bytes]]] = {}
        for mode, oid, path in wanted:
            skill, rest = path.split("/", 1)
            entry, data = objects[oid]
            entry = entry.model_copy(update={"mode": 0o755 if mode == "100755" else 0o644})
            by_skill.setdefault(skill, {})[rest] = (entry, data)
        manifests: dict[str, Manifest] = {}
        previous = self._state.manifests
        for skill, files in by_skill.items():
            try:
                check_skill_name(skill)
            except InvalidPath:
                continue
            prev = previous.get(skill)
            digest = _digest({p: e for p, (e, _) in files.items()})
            manifests[skill] = (
                prev
                if prev is not None and prev.commit_id == digest
                else _build_manifest(skill, files, [], when)
            )
        blobs = _Blobs({e.sha256: d for e, d in objects.values()})
        return LayerSkills(manifests, blobs)

    def _cat_files(self, oids: Sequence[str]) -> Iterator[tuple[str, bytes]]:
        """Many blobs through one `git cat-file --batch`."""
        if not oids:
            return
        out = self._git(
            "cat-file", "--batch", stdin="".join(f"{o}\n" for o in oids).encode(), cwd=self.repo_dir
        )
        pos = 0
        for oid in oids:
            nl = out.index(b"\n", pos)
            _oid, _kind, size = out[pos:nl].split()
            start = nl + 1
            yield oid, out[start : start + int(size)]
            pos = start + int(size) + 1


def _skipped(path: str) -> bool:
    """Dot-files and `__pycache__` inside a skill are not part of it (as for LocalDir)."""
    parts = path.split("/")[1:]
    return any(p.startswith(".") or p in _SKIPPED_DIRS for p in parts)


# ------------------------------------------------------------------------------ the merge


def merge(
    layers: Sequence[tuple[Layer, LayerSkills]],
) -> tuple[list[SkillInfo], list[Problem]]:
    """Lowest layer first; a usable skill shadows the whole same-named skill below it.

    An unusable skill (no SKILL.md with name and description) is left out and shadows
    nothing, so a half-written override never hides the working skill below it."""
    winners: dict[str, SkillInfo] = {}
    problems: list[Problem] = []
    for layer, skills in layers:
        scope = layer.scope
        for skill in sorted(skills.manifests):
            m = skills.manifests[skill]
            if is_hidden_dir(skill) or m.deleted:
                continue
            if not m.usable:
                problems.append(Problem(skill, layer.label, tuple(m.findings)))
                continue
            fm = m.frontmatter or {}
            below = winners.get(skill)
            winners[skill] = SkillInfo(
                id=skill,
                name=str(fm["name"]),
                description=str(fm["description"]),
                source=layer.label,
                source_dir=layer.source_dir,
                scope=scope,
                version=m.version if scope is not None else None,
                digest=m.commit_id,
                files=m.files,
                findings=tuple(m.findings),
                shadows=(*below.shadows, below.source) if below else (),
                reader=skills.reader,
            )
    return [winners[k] for k in sorted(winners)], problems
