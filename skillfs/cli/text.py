"""Text diffs for `skillfs diff` and the conflicts `skillfs edit` reports (the three-way merge
it offers is `skillfs.util.text_merge`, shared with the console)."""

from __future__ import annotations

import difflib


def unified(before: str, after: str, old_name: str, new_name: str) -> str:
    """A unified diff, marking a last line without a newline the way `diff -u` does."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=old_name,
        tofile=new_name,
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
