"""Near-duplicate text, deterministically and without a model (docs/governance.md,
"Curation"): texts become sets of word shingles, two sets are alike by their Jaccard
similarity, and all pairs at or over a threshold are found by prefix filtering, so a domain
of many skills is not compared pair by pair."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The text's words, case-folded: punctuation, markup and spacing do not count."""
    return _WORD.findall(text.casefold())


def shingles(text: str, size: int) -> frozenset[str]:
    """The set of runs of `size` consecutive words; none when there are fewer words (two
    stub bodies, `TODO` each, were "100% alike": a text too short to hold a run says
    nothing of what a skill does, so it is compared with nothing)."""
    found = words(text)
    return frozenset(" ".join(found[i : i + size]) for i in range(len(found) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 0.0 when either is empty (nothing to compare is not alike)."""
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def similar_pairs(sets: Sequence[frozenset[str]], threshold: float) -> dict[tuple[int, int], float]:
    """Every pair (i, j), i < j, whose Jaccard similarity is at least `threshold` (0 < t <= 1),
    with that similarity.

    Prefix filtering: with the tokens of every set in one global order (rarest first), two sets
    alike by at least t share a token among the first |s| - ceil(t * |s|) + 1 of each, so only
    sets meeting in those prefixes are compared."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold {threshold} is not in (0, 1]")
    freq = Counter(token for s in sets for token in s)
    index: dict[str, list[int]] = defaultdict(list)
    out: dict[tuple[int, int], float] = {}
    for i, s in enumerate(sets):
        ordered = sorted(s, key=lambda token: (freq[token], token))
        prefix = len(ordered) - math.ceil(threshold * len(ordered) - 1e-9) + 1
        candidates: set[int] = set()
        for token in ordered[:prefix]:
            candidates.update(index[token])
            index[token].append(i)
        for j in sorted(candidates):
            alike = jaccard(sets[j], s)
            if alike >= threshold:
                out[(j, i)] = alike
    return out
