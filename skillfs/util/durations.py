"""Durations as operators type them (`30d`, `2h`, `30m`, `45s`, `1w`), for curation's windows
and the server's curation interval (docs/governance.md, "Curation")."""

from __future__ import annotations

import math
import re

from skillfs.errors import InvalidArgument

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


def parse_duration(text: str | float, what: str = "duration", *, zero: bool = False) -> float:
    """Seconds of `text` (a number and a unit: 30d, 2h, 30m, 45s, 1w; a plain number is
    seconds). Positive, or zero when `zero`; anything else is refused, naming `what`."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raw = str(text).strip().lower()
        found = _DURATION.fullmatch(raw)
        try:
            seconds = float(found[1]) * UNITS[found[2]] if found else float(raw)
        except ValueError:
            seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        sign = "zero or more" if zero else "more than zero"
        raise InvalidArgument(
            f"invalid {what} {text!r}: give a number and a unit, {sign}, such as 30d, 2h, 30m "
            "or 45s (s seconds, m minutes, h hours, d days, w weeks)"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """A duration in words at its largest unit, and the next one where it is not nought:
    `3 days`, `1 day 12 hours` (36h was "1 day", so "25h is shorter than 36h" read "1 day is
    shorter than 1 day"), `2 hours`, `5 seconds`."""
    units = (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0), ("second", 1.0))
    i = next((i for i, (_, size) in enumerate(units) if seconds >= size), len(units) - 1)
    (unit, size), below = units[i], units[i + 1 : i + 2]
    n = int(seconds // size)
    said = f"{n} {unit}{'s' if n != 1 else ''}"
    for name, small in below:
        m = int((seconds - n * size) // small)
        said += f" {m} {name}{'s' if m != 1 else ''}" if m else ""
    return said
