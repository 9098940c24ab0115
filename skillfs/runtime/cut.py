"""Consistent cuts: the revision a set of separately loaded manifests is exactly as of (C4).

An engine reads one scope atomically, but a worker's view spans several scopes (agent-shared
and per-user) read by separate calls, while the domain's revision is read by yet another.
The change log closes the gap. It lists, after a revision `since`, every (revision, skill,
version) in order, so each manifest held is known to be live over a range of revisions: from
the change that wrote it (or before `since`) until the next change of that skill. Where all
those ranges overlap, the held manifests are exactly the domain's state, and any revision
there is an honest label. Where they do not (a commit landed between two loads), the
manifests whose range ended too early are read again.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

from skillfs.model import Change, Revision, Scope

Key = tuple[Scope, str]


def find_cut(
    since: Revision,
    log: Sequence[Change],
    tracked: Collection[Scope],
    loaded: Mapping[Key, int],
    whole: Collection[Scope],
    floor: Revision | None,
    upto: Revision,
) -> Revision | set[Key]:
    """The latest revision at which every held manifest of the `tracked` scopes was live, no
    earlier than `floor`; or the skills to read again.

    `log` holds the changes after `since` (same epoch, no reset), complete up to `upto`,
    which was read after every load. Held manifests are those cached as exact at `since`
    and those this sync `loaded` (skill -> version, 0 for absent); a scope in `whole` was
    loaded entirely, so its skills missing from `loaded` were absent."""
    entries: dict[Key, list[tuple[int, int]]] = {}
    labels = {since.counter, upto.counter}  # revisions known real, the log complete to them
    if floor is not None:
        labels.add(floor.counter)
    for c in log:
        labels.add(c.revision.counter)
        if c.scope is not None and c.skill is not None and c.scope in tracked:
            entries.setdefault((c.scope, c.skill), []).append((c.revision.counter, c.version or 0))
    lo, hi = -math.inf, math.inf
    ends: dict[Key, float] = {}
    for key in entries.keys() | loaded.keys():
        seen = entries.get(key, [])
        version = loaded.get(key, 0 if key[0] in whole else None)
        if version is None:  # cached, exact at `since`: live until its first change
            start, end = -math.inf, float(seen[0][0]) if seen else math.inf
        else:
            start = next((float(r) for r, v in seen if v == version), -math.inf)
            end = next((float(r) for r, v in seen if v > version), math.inf)
        ends[key] = end
        lo, hi = max(lo, start), min(hi, end)
    low = max(lo, floor.counter if floor is not None else -math.inf)
    fitting = [r for r in labels if low <= r < hi]
    if fitting:
        return Revision(epoch=since.epoch, counter=max(fitting))
    return {key for key, end in ends.items() if end <= low}
