"""Near-duplicate detection behind curation (skillfs/util/similarity.py,
skillfs/governance/curation_report.py): the similarity join agrees with brute force, and
identical copies are counted, not all listed."""

from __future__ import annotations

import itertools
import random

import pytest

from skillfs import Scope
from skillfs.governance.curation_report import SkillRef, near_duplicates
from skillfs.util.similarity import jaccard, similar_pairs

BOT = "support-bot"
SHARED = Scope.shared(BOT)
REVIEW = (
    "Read the diff carefully. Check each changed function for missing tests, unclear names "
    "and unhandled errors. Report every finding as a list with its file and line."
)


def _brute(sets: list[frozenset[str]], t: float) -> dict[tuple[int, int], float]:
    pairs = itertools.combinations(range(len(sets)), 2)
    return {(i, j): s for i, j in pairs if (s := jaccard(sets[i], sets[j])) >= t}


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8, 1.0])
def test_similarity_join_agrees_with_brute_force(threshold: float) -> None:
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    base = [frozenset(rng.sample(vocab, rng.randint(1, 12))) for _ in range(40)]
    mutated = [frozenset([*list(s)[1:], rng.choice(vocab)]) for s in base]  # near copies
    sets = [*base, *mutated, frozenset()]
    assert similar_pairs(sets, threshold) == _brute(sets, threshold)


def test_identical_copies_are_counted_not_all_listed() -> None:
    refs = [SkillRef(scope=Scope.user(BOT, f"u{i:02}"), skill="copy") for i in range(30)]
    refs.append(SkillRef(scope=SHARED, skill="other"))
    descs = ["Reviews code"] * 30 + ["Something else entirely"]
    bodies = [REVIEW] * 30 + ["Unrelated words here."]
    pairs, total = near_duplicates(refs, descs, bodies, limit=10)
    assert total == 30 * 29 // 2 and len(pairs) == 10
    assert [(p.a.scope.user_id, p.b.scope.user_id) for p in pairs[:3]] == [
        ("u00", "u01"), ("u00", "u02"), ("u00", "u03")
    ]  # fmt: skip
    assert all(p.reason.endswith("(the same name: an override that may no longer differ)")
               for p in pairs)  # fmt: skip
    assert near_duplicates(refs[::-1], descs[::-1], bodies[::-1], limit=10) == (pairs, total)
