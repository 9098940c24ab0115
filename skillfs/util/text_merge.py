"""A line-based three-way merge: `skillfs edit --on-conflict reopen` and the console's editor,
when someone else saved the same file meanwhile.

Both sides' changes against the common base are applied; where they change the same base
lines (or insert at the same place) differently, the result holds git-style conflict markers.
"""

from __future__ import annotations

import difflib
from typing import NamedTuple

OURS_MARKER = "<<<<<<< your edit\n"
SEPARATOR = "=======\n"


class _Hunk(NamedTuple):
    start: int  # base lines [start, end) are replaced by `lines`
    end: int
    lines: list[str]
    side: int  # 0: ours, 1: theirs


def _hunks(base: list[str], other: list[str], side: int) -> list[_Hunk]:
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [
        _Hunk(i1, i2, other[j1:j2], side)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _apply(base: list[str], hunks: list[_Hunk], start: int, end: int) -> list[str]:
    """Base lines [start, end) with one side's hunks (all inside that range) applied."""
    result: list[str] = []
    at = start
    for h in hunks:
        result += base[at : h.start] + h.lines
        at = h.end
    return result + base[at:end]


def _terminated(lines: list[str]) -> list[str]:
    """A marker must start a line, so the section before it must end with a newline."""
    if lines and not lines[-1].endswith("\n"):
        return [*lines[:-1], lines[-1] + "\n"]
    return lines


def _touches(hunk: _Hunk, group: list[_Hunk], end: int) -> bool:
    """Whether `hunk` overlaps the group's base lines, or inserts where the group ends (or the
    group inserts where `hunk` starts): then the order of the two changes is ambiguous."""
    if hunk.start < end:
        return True
    insert = hunk.start == hunk.end
    return hunk.start == end and (insert or any(g.start == g.end == end for g in group))


def merge3(base: str, ours: str, theirs: str, theirs_label: str) -> tuple[str, bool]:
    """The merged text, and whether it merged without conflicts."""
    b, o, t = (s.splitlines(keepends=True) for s in (base, ours, theirs))
    hunks = sorted(_hunks(b, o, 0) + _hunks(b, t, 1), key=lambda h: (h.start, h.end, h.side))
    merged: list[str] = []
    clean = True
    at = i = 0
    while i < len(hunks):
        start, end = hunks[i].start, hunks[i].end
        group = [hunks[i]]
        i += 1
        while i < len(hunks) and _touches(hunks[i], group, end):
            end = max(end, hunks[i].end)
            group.append(hunks[i])
            i += 1
        merged += b[at:start]
        mine = _apply(b, [h for h in group if h.side == 0], start, end)
        other = _apply(b, [h for h in group if h.side == 1], start, end)
        if {h.side for h in group} != {0, 1} or mine == other:
            merged += mine if any(h.side == 0 for h in group) else other
        else:
            clean = False
            merged += [OURS_MARKER, *_terminated(mine), SEPARATOR, *_terminated(other)]
            merged.append(f">>>>>>> {theirs_label}\n")
        at = end
    merged += b[at:]
    return "".join(merged), clean


def has_markers(text: str) -> bool:
    """Whether conflict markers merge3 wrote are still there."""
    lines = text.splitlines(keepends=True)
    return OURS_MARKER in lines or any(line.startswith(">>>>>>> ") for line in lines)
