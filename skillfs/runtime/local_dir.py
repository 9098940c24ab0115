"""`LocalDir`: skills from a local directory, one sub-directory each (docs/runtime.md).

It is `FsspecDir`'s local case: the same layer, checked with a stat walk (mtime and ctime in
nanoseconds, size, inode, mode of every file) instead of an fsspec listing. Only regular
files are read; symbolic links are skipped unless asked for, by the rule `skillfs import`
follows (`skill_dirs.file_to_read`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from skillfs.errors import StoreUnavailable
from skillfs.model.names import is_hidden_dir
from skillfs.runtime.checked import safe_name
from skillfs.runtime.fsspec_dir import FsspecDir, Listed
from skillfs.spec.skill_dirs import SKIPPED_DIRS, file_to_read, read_regular
from skillfs.spec.skill_md import SKILL_MD

#: How a warning about a skipped link says to follow links.
_HOW = "LocalDir(..., follow_symlinks=True) follows links inside the skills directory"


class LocalDir(FsspecDir):
    """A local directory whose sub-directories are skills (`~/.agent/skills/<skill>/SKILL.md`).

    A snapshot checks it at most every `check_interval` seconds, with a stat walk (mtime,
    ctime, size, inode, mode of every file); only files whose stat changed are read again.
    Dot-files and `__pycache__` inside a skill are left out, as are `_`/`.` directories.

    Symbolic links are left out (one warning names them): a link to ~/.ssh/id_rsa must not
    reach the model. With `follow_symlinks`, a linked skill directory is read from its
    target, and a link to a regular file is read when its target is inside the skills
    directory or that skill's own directory; links to directories inside a skill never are."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        check_interval: float = 2.0,
        follow_symlinks: bool = False,
    ) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        self.follow_symlinks = follow_symlinks
        super().__init__(str(self.path), check_interval=check_interval)
        base = safe_name(name or self.path.name)
        self.label = f"local:{base}"
        self.source_dir = f"local-{base}"

    def __repr__(self) -> str:
        return f"LocalDir({str(self.path)!r})"

    def _read(self, listed: Listed) -> bytes:
        return read_regular(Path(listed.path))[0]

    def _walk(self, skipped: dict[str, str]) -> Iterator[Listed]:
        try:
            tops = sorted(os.scandir(self.path), key=lambda d: d.name)
        except FileNotFoundError:
            self._missing()
            return
        except OSError as exc:
            raise StoreUnavailable(f"cannot read skills directory {self.path}: {exc}") from exc
        layer = self.path.resolve()
        for top in tops:
            if is_hidden_dir(top.name) or not top.is_dir():  # files at the top are no skill
                continue
            root = self._skill_root(top, skipped)
            if root is not None:
                yield from self._skill_files(top.name, root, (layer, root.resolve()), skipped)

    def _skill_root(self, top: os.DirEntry[str], skipped: dict[str, str]) -> Path | None:
        """Where skill `top` is read from: itself, or a followed link's target."""
        if not top.is_symlink():
            return Path(top.path)
        target = Path(os.path.realpath(top.path))
        if not self.follow_symlinks:
            skipped[top.name] = f"a symbolic link to a skill directory ({target}); {_HOW}"
            return None
        if not (target / SKILL_MD).is_file():
            skipped[top.name] = f"a symbolic link to {target}, which holds no {SKILL_MD}"
            return None
        return target

    def _skill_files(
        self, skill: str, root: Path, inside: tuple[Path, ...], skipped: dict[str, str]
    ) -> Iterator[Listed]:
        for dirpath, dirs, names in os.walk(root):  # links to directories are not entered
            here = Path(dirpath)
            below = here.relative_to(root).as_posix()
            rel = skill if below == "." else f"{skill}/{below}"
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
            for d in [d for d in dirs if (here / d).is_symlink()]:
                dirs.remove(d)
                skipped[f"{rel}/{d}"] = (
                    "a symbolic link to a directory; links to directories inside a skill "
                    "are not followed"
                )
            for n in sorted(names):
                if n.startswith("."):
                    continue
                with contextlib.suppress(OSError):  # vanished or unreadable: left out
                    readable = file_to_read(
                        here / n,
                        inside,
                        follow=self.follow_symlinks,
                        where="the skills directory or the skill's own directory",
                        how=_HOW,
                    )
                    if isinstance(readable, str):
                        skipped[f"{rel}/{n}"] = readable
                        continue
                    st = os.stat(readable)
                    if stat.S_ISREG(st.st_mode):
                        key = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
                        mtime = st.st_mtime_ns / 1e9
                        yield Listed(f"{rel}/{n}", key, st.st_mode, mtime, str(readable))
