"""The one owner of the staged-rollout rule (docs/governance.md, "Staged rollout"): who gets
a skill's candidate, and the manifest a worker's view holds for it. Every surface that builds
a worker's view asks `effective`; it is evaluated on manifests the worker already holds, so a
rule costs no round trip."""

from __future__ import annotations

import functools
import hashlib
import logging

from skillfs.model import Manifest, Rollout, Scope
from skillfs.model.rollout import RULE_FORMAT

log = logging.getLogger(__name__)

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
    never an excluded user; else its environment listed, its user named, its bucket below
    the fraction — any one of the parts the rule gives, or all of them (`match`); the rule
    with no part reaches nobody. A rule of a format this release does not know gives it to
    nobody (`effective` logs it once)."""
    if not rollout.known or user in rollout.excluded_users:
        return False

    def holds(part: str) -> bool:
        if part == "environments":
            return environment is not None and environment in rollout.environments
        if part == "users":
            return user in rollout.users
        return bucket(scope, skill, user) < rollout.fraction  # (only when asked: a hash)

    parts = rollout.parts()
    held = (holds(p) for p in parts)
    return bool(parts) and (all(held) if rollout.match == "all" else any(held))


@functools.cache
def _unknown(fmt: int, match: str) -> None:
    """Log once per process (per kind of rule) that a rule is newer than this release."""
    log.warning(
        "a staged rollout rule of format %s (match %r) is newer than this release (format "
        "%s): workers of this release serve the live version of such skills; upgrade them",
        fmt,
        match,
        RULE_FORMAT,
    )


def has_live(m: Manifest) -> bool:
    """Whether the entry holds a live version: a skill first staged (never published) has
    none; a disabled entry counts as live (its hole shadows the name)."""
    return not m.deleted and (bool(m.files) or m.disabled or m.candidate is None)


def effective(m: Manifest, scope: Scope, user: str, environment: str | None) -> Manifest | None:
    """What a worker of `user` in `environment` sees of this entry: the candidate where the
    rule gives it to them (the same version and commit, the candidate's files, frontmatter
    and findings; the kill switch still applies), `m` itself elsewhere — also wherever the
    rule is of a format this release does not know —, and None for a skill with no live
    version. The candidate is a new object, so `result is not m` says which."""
    c = m.candidate
    if c is not None and not c.rollout.known:
        _unknown(c.rollout.format, c.rollout.match)
    elif c is not None and gets_candidate(c.rollout, scope, m.skill, user, environment):
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
