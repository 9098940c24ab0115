"""Id and path rules of docs/design.md §1, checked before anything is written."""

from __future__ import annotations

import functools
import posixpath
import re

from skillfs.errors import InvalidPath

_ID = re.compile(r"[A-Za-z0-9._@+-]{1,128}")
_SKILL_DIR = re.compile(r"[^/\x00\\]{1,255}")


def check_id(kind: str, value: str) -> str:
    """An agent, user or market id: 1-128 of [A-Za-z0-9._@+-], not . or .., not starting with _."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidPath(
            f"invalid {kind} id {value!r}: use 1-128 characters of letters, digits and . _ @ + -"
        )
    if value in (".", "..") or value.startswith("_"):
        raise InvalidPath(
            f"invalid {kind} id {value!r}: '.', '..' and ids starting with '_' are reserved"
        )
    return value


def check_skill_name(value: str) -> str:
    """A skill directory: one path segment. The spec's name rules are findings, not path errors."""
    if not isinstance(value, str) or not _SKILL_DIR.fullmatch(value) or value in (".", ".."):
        raise InvalidPath(
            f"invalid skill directory {value!r}: a skill is one directory name "
            "(no '/', '\\', NUL, '.' or '..', at most 255 characters)"
        )
    return value


def is_hidden_dir(name: str) -> bool:
    """`_drafts/`, `.archive/` and the like are not skills (docs/design.md §1)."""
    return name.startswith(("_", "."))


def normalize_path(path: str) -> str:
    """A path inside a skill: normalized POSIX, relative; no '..', NUL, backslash, empty segment."""
    if not isinstance(path, str) or not path:
        raise InvalidPath(
            "empty file path: name a file inside the skill, e.g. 'references/guide.md'"
        )
    if "\x00" in path:
        raise InvalidPath(f"file path {path!r} contains a NUL byte")
    if "\\" in path:
        raise InvalidPath(f"file path {path!r} contains a backslash: use '/' between directories")
    if path.startswith("/"):
        raise InvalidPath(
            f"file path {path!r} is absolute: give it relative to the skill directory"
        )
    parts = path.split("/")
    if any(p == "" for p in parts[:-1]) or parts[-1] == "":
        raise InvalidPath(f"file path {path!r} has an empty segment ('//' or a trailing '/')")
    if any(p == ".." for p in parts):
        raise InvalidPath(
            f"file path {path!r} contains '..': paths may not leave the skill directory"
        )
    norm = posixpath.normpath(path)
    if norm in (".", "") or any(len(p.encode()) > 255 for p in parts):
        raise InvalidPath(
            f"file path {path!r} does not name a file (or a segment is over 255 bytes)"
        )
    return norm


@functools.lru_cache(maxsize=4096)
def check_domain(domain: str) -> str:
    """A revision domain, `agents/<id>` or `markets/<id>`, with its id checked (cached: the
    per-step revision check names the same few domains every time)."""
    kind, _, ident = domain.partition("/")
    if kind not in ("agents", "markets"):
        raise InvalidPath(f"invalid domain {domain!r}: use 'agents/AGENT' or 'markets/NAME'")
    check_id(kind[:-1], ident)
    return domain
