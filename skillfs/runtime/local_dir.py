"""`LocalDir`: skills from a local directory, one sub-directory each (docs/runtime.md).

It is `FsspecDir`'s local case: the same layer, checked with a stat walk (mtime and ctime in
nanoseconds, size, inode, mode of every file) instead of an fsspec listing.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from skillfs.errors import StoreUnavailable
from skillfs.names import is_hidden_dir
from skillfs.runtime.checked import SKIPPED_DIRS, safe_name
from skillfs.runtime.fsspec_dir import FsspecDir, Listed


class LocalDir(FsspecDir):
    """A local directory whose sub-directories are skills (`~/.agent/skills/<skill>/SKILL.md`).

    A snapshot checks it at most every `check_interval` seconds, with a stat walk (mtime,
    ctime, size, inode, mode of every file); only files whose stat changed are read again.
    Dot-files and `__pycache__` inside a skill are left out, as are `_`/`.` directories."""

    def __init__(
        self, path: str | os.PathLike[str], *, name: str | None = None, check_interval: float = 2.0
    ) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        super().__init__(str(self.path), check_interval=check_interval)
        base = safe_name(name or self.path.name)
        self.label = f"local:{base}"
        self.source_dir = f"local-{base}"

    def __repr__(self) -> str:
        return f"LocalDir({str(self.path)!r})"

    def _read(self, rel: str) -> bytes:
        return (self.path / rel).read_bytes()

    def _walk(self) -> Iterator[Listed]:
        try:
            tops = sorted(os.scandir(self.path), key=lambda d: d.name)
        except FileNotFoundError:
            self._missing()
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
                            key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
                            yield Listed(f"{rel}/{n}", key, st.st_mode, st.st_mtime_ns / 1e9)
