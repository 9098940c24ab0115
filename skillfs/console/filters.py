"""The templates' filters: sizes, times, counts, modes and revisions as the pages print them
(docs/console.md, "Errors": nouns counted properly, times in UTC and said so)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from skillfs.model import Revision


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(ts: float) -> str:
    seconds = max(0, int(time.time() - ts))
    for span, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= span:
            return f"{seconds // span} {unit} ago"
    return "just now" if seconds < 10 else f"{seconds} s ago"


def plural(n: int, noun: str) -> str:
    """The count and the noun: 1 file, 2 files, 0 files."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def file_mode(mode: int) -> str:
    return f"{mode & 0o777:o}"


def rev_text(rev: Revision | None) -> str:
    return "—" if rev is None else str(rev.counter)
