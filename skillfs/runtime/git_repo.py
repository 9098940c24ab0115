"""`GitRepo`: skills from a Git repository, cloned into a shared cache (docs/runtime.md)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from skillfs.errors import InvalidArgument, StoreUnavailable
from skillfs.model import FileEntry, Manifest
from skillfs.model.names import check_skill_name, is_hidden_dir
from skillfs.runtime.checked import (
    Blobs,
    CheckedLayer,
    build_manifest,
    content_digest,
    safe_name,
    skipped,
)
from skillfs.runtime.layers import LayerSkills
from skillfs.store.blobs import sha256

log = logging.getLogger(__name__)


class GitRepo(CheckedLayer):
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
        base = safe_name(name or url)
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
            if "/" in p and not is_hidden_dir(p.split("/", 1)[0]) and not skipped(p)
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
            except InvalidArgument:
                continue
            prev = previous.get(skill)
            digest = content_digest({p: e for p, (e, _) in files.items()})
            manifests[skill] = (
                prev
                if prev is not None and prev.commit_id == digest
                else build_manifest(skill, files, [], when)
            )
        blobs = Blobs({e.sha256: d for e, d in objects.values()})
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
