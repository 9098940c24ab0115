"""The "did you mean" of every surface: the known name closest to one that is not known (a
typo), so the CLI, the console and the runtime's tools answer `suport-bot` alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(value: str, known: Iterable[str]) -> str | None:
    """The name of `known` most like `value` (difflib's ratio of at least 0.6), or None."""
    near = difflib.get_close_matches(value, list(known), n=1)
    return near[0] if near else None
