"""Skill directories on disk: finding them below a path, validating each, and which of their
files may be read, as `skillfs validate`, `skillfs import` and `LocalDir` do
(docs/validation.md, docs/cli.md "import", docs/runtime.md "LocalDir")."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from skillfs.model import error_findings
from skillfs.model.names import is_hidden_dir
from skillfs.spec.profiles import Profiles
from skillfs.spec.skill_md import SKILL_MD, inspect_skill
from skillfs.spec.validation import SPEC, finding

#: Directories inside a skill that are not part of it (byte-code of a script that was run).
SKIPPED_DIRS = ("__pycache__",)

#: What `lstat` may find that is not a regular file, as a person calls it.
_KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


def kind(mode: int) -> str:
    """What a file of this `st_mode` is, when it is not a regular file."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def file_to_read(
    path: Path, inside: Sequence[Path], *, follow: bool, where: str, how: str
) -> Path | str:
    """The path to read for `path`, or why it is skipped. Only regular files are read: a link
    to ~/.ssh/id_rsa would hand the operator's key to whoever reads the skill, a FIFO would
    block the reader and /dev/zero would fill memory. A symbolic link is read only with
    `follow`, and only when it leads to a regular file inside one of the resolved `inside`
    directories (`where` names them, `how` says how to ask for following)."""
    st = path.lstat()
    if stat.S_ISREG(st.st_mode):
        return path
    if not stat.S_ISLNK(st.st_mode):
        return f"{kind(st.st_mode)}, not a regular file"
    target = Path(os.path.realpath(path))
    if not follow:
        return f"a symbolic link (to {target}); {how}"
    if not any(target.is_relative_to(d) for d in inside):
        return f"a symbolic link to {target}, outside {where}"
    try:
        mode = target.lstat().st_mode
    except OSError:
        return f"a broken symbolic link (to {target})"
    return target if stat.S_ISREG(mode) else f"a symbolic link to {kind(mode)} ({target})"


class NotRegular(OSError):
    """What was listed as a regular file is not one any more: it was swapped since."""

    def __init__(self, path: Path, mode: int) -> None:
        self.kind = kind(mode)
        super().__init__(f"{path} became {self.kind}")


def read_regular(path: Path) -> tuple[bytes, os.stat_result]:
    """A file's bytes and status, opened without following a last link or blocking on a pipe;
    NotRegular unless it is (still) a regular file once open."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, st.st_mode)
        return f.read(), st


class ValidationReport(BaseModel):
    """One skill directory's verdict, as `skillfs validate --json` prints it."""

    path: str
    name: str | None
    valid: bool
    errors: list[str]
    warnings: list[str]


class _DiskFiles(Mapping[str, bytes]):
    """A directory's files by relative POSIX path, each read only when asked for."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._paths: list[str] = []
        for dirpath, _dirs, names in os.walk(root):  # symlinked directories are not followed
            rel = Path(dirpath).relative_to(root)
            self._paths += sorted((rel / n).as_posix() for n in names)
        self._known = set(self._paths)

    def __getitem__(self, path: str) -> bytes:
        if path not in self._known:
            raise KeyError(path)
        return (self._root / path).read_bytes()

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __contains__(self, path: object) -> bool:
        return path in self._known


def validate_dir(path: Path, profiles: Profiles = SPEC) -> ValidationReport:
    """Validate one skill directory on disk under the host `profiles`; its directory name is
    the one the name must equal."""
    frontmatter: dict[str, Any] | None = None
    if not path.is_dir():
        findings = [
            finding(
                "error",
                None,
                "not-a-directory",
                f"{path} is not a directory: a skill is a directory holding a SKILL.md",
            )
        ]
    else:
        # abspath, not resolve: `validate .` names the directory, and a symlink keeps its own name.
        directory = Path(os.path.abspath(path)).name
        try:
            frontmatter, findings, _ = inspect_skill(directory, _DiskFiles(path), profiles)
        except OSError as exc:
            findings = [finding("error", None, "unreadable", f"cannot read {path}: {exc}")]
    name = frontmatter.get("name") if frontmatter is not None else None
    errors = [f.message for f in error_findings(findings)]
    return ValidationReport(
        path=str(path),
        name=name if isinstance(name, str) else None,
        valid=not errors,
        errors=errors,
        warnings=[f.message for f in findings if f.severity == "warning"],
    )


def find_skill_dirs(path: Path) -> list[Path]:
    """The skill directories PATH names: itself when it holds a SKILL.md, else every skill below it
    (not entering `_*`/`.*` directories, nor a skill's own sub-directories). A directory that is
    neither a skill nor holds one is returned too, so that validating it reports the missing
    SKILL.md instead of passing over it in silence. A SKILL.md file stands for its directory."""
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if path.is_file():
        return [path.parent if path.name == SKILL_MD else path]
    if (path / SKILL_MD).is_file():
        return [path]
    found, has_skill = _walk(path, {path.resolve()})
    return found if has_skill else [path]


def _walk(directory: Path, seen: set[Path]) -> tuple[list[Path], bool]:
    """The skills below `directory` plus the topmost sub-directories holding none, and whether
    any skill was found (a directory with no skill anywhere below is reported as itself)."""
    try:
        children = [c for c in directory.iterdir() if c.is_dir() and not is_hidden_dir(c.name)]
    except OSError:
        return [], False
    # Real directories before symlinks, so a skill linked from elsewhere is found by its own name.
    children.sort(key=lambda c: (c.is_symlink(), c.name))
    found: list[Path] = []
    has_skill = False
    for child in children:
        real = child.resolve()
        if real in seen:  # a symlink loop, or a second link to a directory already seen
            continue
        seen.add(real)
        if (child / SKILL_MD).is_file():
            found.append(child)
            has_skill = True
            continue
        below, child_has_skill = _walk(child, seen)
        found += below if child_has_skill else [child]
        has_skill = has_skill or child_has_skill
    return found, has_skill
