"""`FsspecDir`: skills from any fsspec filesystem, one sub-directory each (docs/runtime.md).

Object stores, HTTP, zip archives, memory, packaged data (an `importlib.resources` path is a
local path): whatever `fsspec.core.url_to_fs` opens. Change is detected with the keys the
filesystem itself lists for each file (ETag, checksum, CRC, mtime, size: what `ukey` is built
from), so a check is one listing and only files whose key changed are read again.
`LocalDir` (runtime/local_dir.py) is its local case with a stat walk instead of a listing.
"""

from __future__ import annotations

import logging
import posixpath
import stat
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from skillfs.errors import StoreUnavailable
from skillfs.model import FileEntry, Finding, Manifest
from skillfs.model.names import is_hidden_dir
from skillfs.runtime.checked import (
    Blobs,
    CheckedLayer,
    build_manifest,
    content_digest,
    safe_name,
    skipped,
)
from skillfs.runtime.layers import LayerSkills
from skillfs.spec.validation import finding
from skillfs.store.blobs import sha256
from skillfs.store.limits import disk_mode

log = logging.getLogger("skillfs.runtime")

#: A file's change key: what the listing says about it, or a local file's stat.
Key = tuple[Any, ...]


class Listed(NamedTuple):
    """One file as a check sees it, without reading it."""

    rel: str  # "skill/path"
    key: Key
    mode: int
    mtime: float
    path: str  # where to read it: the listed path, or a followed link's target


#: Listing fields that change when a file's content does, across fsspec implementations
#: (s3fs/gcsfs/adlfs: ETag, md5, crc32c, version ids; local: mtime, ino; zip: CRC; memory:
#: created; HTTP: ETag, size).
_KEY_FIELDS = (
    "size",
    "ETag",
    "etag",
    "checksum",
    "md5Hash",
    "md5",
    "crc32c",
    "CRC",
    "VersionId",
    "generation",
    "mtime",
    "LastModified",
    "last_modified",
    "updated",
    "created",
    "ino",
    "date_time",
)


class FsspecDir(CheckedLayer):
    """A directory on any fsspec filesystem whose sub-directories are skills:
    `FsspecDir("s3://team/skills", anon=True)`, `FsspecDir("zip://skills::file:///x.zip")`.

    A snapshot checks it at most every `check_interval` seconds with one listing; only files
    whose listed key changed are read again. Dot-files and `__pycache__` inside a skill are
    left out, as are `_`/`.` directories. A missing directory is an empty layer (and a
    warning, once)."""

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        check_interval: float = 10.0,
        **storage_options: Any,
    ) -> None:
        self.url = url
        self.storage_options = storage_options
        base = safe_name(name or url.split("::", 1)[0])
        self.label = f"fsspec:{base}"
        self.source_dir = f"fsspec-{base}"
        super().__init__(check_interval)
        self._listed: dict[str, Listed] = {}  # "skill/path" -> as of the last check
        self._files: dict[str, tuple[FileEntry, bytes]] = {}  # "skill/path" -> entry, bytes
        self._fs: Any = None
        self._root = ""
        self._warned = False  # a missing directory is reported once
        self._links_warned: set[str] = set()  # skipped links already reported

    def __repr__(self) -> str:
        return f"FsspecDir({self.url!r})"

    # ------------------------------------------------------------------ what subclasses change

    def _walk(self, skipped: dict[str, str]) -> Iterator[Listed]:
        """Every file of every skill, as listed; what is left out ("skill/path" -> why) goes
        to `skipped`."""
        fs, root = self._filesystem()
        try:
            listing = fs.find(root, detail=True)
        except FileNotFoundError:
            listing = {}
        except OSError as exc:
            raise StoreUnavailable(f"cannot list skills at {self.url}: {exc}") from exc
        if not listing:
            self._missing()
            return
        prefix = root.rstrip("/") + "/" if root.strip("/") else ""
        for path in sorted(listing):
            info = listing[path]
            rel = posixpath.normpath(path.lstrip("/")[len(prefix.lstrip("/")) :])
            if "/" not in rel or rel.startswith("../") or _left_out(rel):
                continue
            if info.get("islink") or _zip_link(info):
                skipped[rel] = (
                    "a symbolic link; FsspecDir follows none (LocalDir(..., "
                    "follow_symlinks=True) follows links inside its directory)"
                )
                continue
            if info.get("type") != "file":
                continue
            key = tuple((f, str(info[f])) for f in _KEY_FIELDS if f in info)
            yield Listed(rel, key, _mode(info), _mtime(info), path)

    def _read(self, listed: Listed) -> bytes:
        fs, _ = self._filesystem()
        data: bytes = fs.cat_file(listed.path)
        return data

    def _missing(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("skills directory %s does not exist: its layer is empty", self.url)

    def _filesystem(self) -> tuple[Any, str]:
        """The filesystem, opened once; an archive (zip, tar) is opened again at each check,
        since it reads its table of contents only when opened."""
        from fsspec.archive import AbstractArchiveFileSystem
        from fsspec.core import url_to_fs

        if self._fs is None or isinstance(self._fs, AbstractArchiveFileSystem):
            self._fs, self._root = url_to_fs(
                self.url, skip_instance_cache=True, **self.storage_options
            )
        else:
            self._fs.invalidate_cache()  # listings are cached per instance
        return self._fs, self._root

    # ------------------------------------------------------------------ the shared check

    def _refresh(self) -> None:
        """Read again the files whose key changed, when any did."""
        skipped: dict[str, str] = {}
        listed = {f.rel: f for f in self._walk(skipped)}
        self._report(skipped)
        if listed != self._listed:
            self._state = self._rebuild(listed)
            self._listed = listed

    def _report(self, skipped: Mapping[str, str]) -> None:
        """One warning naming the links a check left out that the last one did not."""
        new = [f"{rel}: {why}" for rel, why in skipped.items() if rel not in self._links_warned]
        if new:
            log.warning("%s left out %s", self, "; ".join(new))
        self._links_warned = set(skipped)

    def _rebuild(self, listed: Mapping[str, Listed]) -> LayerSkills:
        old = self._files
        files: dict[str, tuple[FileEntry, bytes]] = {}
        unreadable: dict[str, list[Finding]] = {}
        for rel, now in listed.items():
            skill = rel.split("/", 1)[0]
            mode = disk_mode(now.mode)  # a 0o600 file stays owner-only
            before = self._listed.get(rel)
            if rel in old and before is not None and before.key == now.key:
                entry, data = old[rel]
                files[rel] = (entry.model_copy(update={"mode": mode}), data)
                continue
            try:
                data = self._read(now)
            except OSError as exc:
                unreadable.setdefault(skill, []).append(
                    finding("error", None, "unreadable", f"cannot read {rel}: {exc}")
                )
                continue
            entry = FileEntry(sha256=sha256(data), size=len(data), mode=mode, mtime=now.mtime)
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


def _left_out(rel: str) -> bool:
    """`_`/`.` directories, dot-files and `__pycache__` are not part of any skill."""
    return is_hidden_dir(rel.split("/", 1)[0]) or skipped(rel) or rel.rsplit("/", 1)[-1][:1] == "."


def _zip_link(info: Mapping[str, Any]) -> bool:
    """A zip entry that is a symbolic link: its bytes are the target's path, not a file."""
    attr = info.get("external_attr")
    return isinstance(attr, int) and stat.S_ISLNK(attr >> 16)


def _mode(info: Mapping[str, Any]) -> int:
    """The permission bits a listing gives: `mode` (local, sftp) or a zip entry's
    `external_attr`; 0o644 when it gives none."""
    mode = info.get("mode")
    if isinstance(mode, int):
        return mode & 0o777
    attr = info.get("external_attr")
    if isinstance(attr, int) and attr >> 16:
        return (attr >> 16) & 0o777
    return 0o644


def _mtime(info: Mapping[str, Any]) -> float:
    """A modification time in seconds when the listing gives one as a number, else 0."""
    for field in ("mtime", "created"):
        value = info.get(field)
        if isinstance(value, int | float):
            return float(value)
    return 0.0
