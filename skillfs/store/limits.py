"""What a skill's file table may hold: the size limits, and the mode and time rules that let
whatever goes into a manifest read back from every engine (docs/design.md §2).

`Store.commit` checks the tables it builds here; the server checks the ones a grpc://
client built, to the same rules."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from skillfs.engines.base import MiB
from skillfs.errors import InvalidArgument, InvalidPath, TooLarge
from skillfs.model import MTIME_MAX, MTIME_MIN, FileEntry

SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".rb", ".pl", ".js", ".mjs")
#: The most loads one usage batch may add to one counter: far more than a worker counts
#: between two flushes, far below where the stored counters saturate (USAGE_MAX).
USAGE_BATCH_MAX = 10**9


def default_mode(path: str, data: bytes) -> int:
    """A file written without a mode is executable when it looks like a script
    (docs/design.md §4)."""
    return 0o755 if data.startswith(b"#!") or path.endswith(SCRIPT_SUFFIXES) else 0o644


def disk_mode(mode: int) -> int:
    """The most a skill file is given on disk (docs/runtime.md, "Materializing"): its owner
    reads and writes it, its execute bits stay, nobody else writes it, no setuid, setgid or
    sticky bit; an owner-only file (0o600, 0o700) stays owner-only. The umask narrows it
    further where the file is created."""
    return (mode | 0o600) & (0o755 if mode & 0o111 else 0o644)


class Limits(BaseModel):
    """Size limits; an over-limit write raises TooLarge before anything is written. The
    quotas (bytes a scope, and a token in one agent or market, may hold: docs/security.md,
    "Quotas"; None: no quota) are held by the engine's atomic commit (QuotaExceeded)."""

    model_config = ConfigDict(frozen=True)

    max_file_size: int = 64 * MiB
    max_skill_size: int = 256 * MiB
    max_files: int = 10_000
    scope_quota: int | None = Field(default=2048 * MiB, gt=0)
    token_quota: int | None = Field(default=2048 * MiB, gt=0)


def check_file(
    limits: Limits, skill: str, path: str, size: int, mode: int | None, mtime: float | None = None
) -> None:
    """One file against the limits and the mode and time rules, before its bytes are hashed."""
    is_time = isinstance(mtime, int | float) and MTIME_MIN <= mtime <= MTIME_MAX
    if mtime is not None and not is_time:
        raise InvalidArgument(
            f"mtime {mtime!r} of {skill}/{path} is not a time: give seconds since the epoch "
            f"between {MTIME_MIN:.0f} and {MTIME_MAX:.0f} (years 1 to 9999), or none"
        )
    if mode is not None and not 0 <= mode <= 0o777:
        raise InvalidArgument(
            f"mode {oct(mode)} of {skill}/{path}: only permission bits 0o777 are stored "
            "(no setuid, setgid or sticky bit, no file type)"
        )
    if not 0 <= size <= limits.max_file_size:
        raise TooLarge(
            f"{skill}/{path} is {size} bytes, over the limit of "
            f"{limits.max_file_size} bytes per file (Limits.max_file_size)"
        )


def check_file_table(limits: Limits, skill: str, entries: Mapping[str, FileEntry]) -> None:
    """A skill's file table against the limits; no file may also be a directory."""
    for path, e in entries.items():
        check_file(limits, skill, path, e.size, e.mode, e.mtime)
    if len(entries) > limits.max_files:
        raise TooLarge(
            f"{skill} has {len(entries)} files, "
            f"over the limit of {limits.max_files} (Limits.max_files)"
        )
    total = sum(e.size for e in entries.values())
    if total > limits.max_skill_size:
        raise TooLarge(
            f"{skill} holds {total} bytes, over the limit of "
            f"{limits.max_skill_size} bytes per skill (Limits.max_skill_size)"
        )
    for path in entries:
        parent = path
        while "/" in parent:
            parent = parent.rsplit("/", 1)[0]
            if parent in entries:
                raise InvalidPath(f"{skill}: {parent!r} is a file, so {path!r} cannot be inside it")


def check_usage(
    counts: Mapping[tuple[str, str], Any], last_used: Mapping[tuple[str, str], Any] | None = None
) -> None:
    """A usage batch: each count a whole number from 0 to USAGE_BATCH_MAX, each last-used time
    a finite number of seconds from 0, else nothing of it is recorded (the stored counters
    saturate rather than overflow; docs/consistency.md)."""
    for (user, skill), t in (last_used or {}).items():
        if not isinstance(t, int | float) or isinstance(t, bool) or not 0 <= t < math.inf:
            raise InvalidArgument(
                f"last-used time {t!r} of skill {skill!r} (user {user!r}): give seconds since "
                "the epoch; nothing was recorded"
            )
    for (user, skill), n in counts.items():
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= USAGE_BATCH_MAX:
            error = TooLarge if isinstance(n, int) and n > 0 else InvalidPath
            raise error(
                f"usage count {n!r} of skill {skill!r} (user {user!r}): give a whole number "
                f"from 0 to {USAGE_BATCH_MAX} per batch; nothing was recorded"
            )
