"""The one owner of the staged-rollout rule (docs/governance.md, "Staged rollout"): who gets
a skill's candidate, and the manifest a worker's view holds for it. Every surface that builds
a worker's view asks `effective`; it is evaluated on manifests the worker already holds, so a
rule costs no round trip."""

from __future__ import annotations

import hashlib

from skillfs.model import Manifest, Rollout, Scope

#: 2**64: a bucket is the first 8 bytes of a SHA-256 read as a fraction of this.
_SPAN = float(1 << 64)


def bucket(scope: Scope, skill: str, user: str) -> float:
    """The user's place in [0, 1) for this skill: stable across processes, releases and
    engines (SHA-256 of `scope/skill/user`), independent between skills, so a fraction
    reaches a different sample of users for each skill and widening keeps everyone in."""
    digest = hashlib.sha256(f"{scope}/{skill}/{user}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SPAN


def gets_candidate(
    rollout: Rollout, scope: Scope, skill: str, user: str, environment: str | None
) -> bool:
    """Whether a worker of `user` declaring `environment` (None: none) gets the candidate:
    its environment is listed, its user is named, or the user's bucket is below the
    fraction."""
    return (
        (environment is not None and environment in rollout.environments)
        or user in rollout.users
        or (rollout.fraction > 0.0 and bucket(scope, skill, user) < rollout.fraction)
    )


def has_live(m: Manifest) -> bool:
    """Whether the entry holds a live version: a skill first staged (never published) has
    none; a disabled entry counts as live (its hole shadows the name)."""
    return not m.deleted and (bool(m.files) or m.disabled or m.candidate is None)


def effective(m: Manifest, scope: Scope, user: str, environment: str | None) -> Manifest | None:
    """What a worker of `user` in `environment` sees of this entry: the candidate where the
    rule gives it to them (the same version and commit, the candidate's files, frontmatter
    and findings; the kill switch still applies), `m` itself elsewhere, and None for a skill
    with no live version. The candidate is a new object, so `result is not m` says which."""
    c = m.candidate
    if c is not None and gets_candidate(c.rollout, scope, m.skill, user, environment):
        return as_candidate(m)
    return m if has_live(m) else None  # (a tombstone carries no candidate)


def as_candidate(m: Manifest) -> Manifest:
    """`m` as the workers its rule reaches see it: its staged candidate's files, frontmatter
    and findings under the same version and commit, nothing staged. `m` must have one."""
    c = m.candidate
    assert c is not None, "as_candidate of a manifest with nothing staged"
    update = {
        "files": c.files,
        "frontmatter": c.frontmatter,
        "findings": c.findings,
        "typed": c.typed,
    }
    return m.model_copy(update={**update, "candidate": None})
