"""The one owner of what a pinned worker is served (docs/governance.md, "Labels and pins"):
the version a label names, else what the staged-rollout rule gives it. Evaluated, like the
rollout rule, on the manifests a worker already holds: a pin costs no round trip."""

from __future__ import annotations

from skillfs.governance.rollout_rule import effective, has_live
from skillfs.model import Manifest, Scope
from skillfs.model.pins import LATEST


def at_label(m: Manifest, label: str) -> Manifest | None:
    """`m` as a worker pinned to `label` sees it: the labelled version's files, frontmatter,
    findings, version and commit, with `m`'s kill switch and origin (a disable wins over
    every pin), nothing staged; `m` without its candidate for `latest`; None when `m` does
    not carry the label (or, for `latest`, holds no live version)."""
    if label == LATEST:
        if not has_live(m):
            return None
        return m.model_copy(update={"candidate": None}) if m.candidate is not None else m
    held = m.labels.get(label)
    if held is None:
        return None
    return m.model_copy(
        update={
            "version": held.version,
            "commit_id": held.commit_id,
            "committed_at": held.committed_at,
            "files": held.files,
            "frontmatter": held.frontmatter,
            "findings": held.findings,
            "typed": held.typed,
            "candidate": None,
        }
    )


def served(
    m: Manifest, scope: Scope, user: str, environment: str | None, pin: str | None
) -> tuple[Manifest | None, str | None]:
    """What a worker of `user` in `environment` pinned to `pin` (None: not pinned) is served
    of this entry, and the label that chose it (None: the head or the candidate, as
    `rollout_rule.effective` gives them; a pin beats a rollout). A skill that does not carry
    the label is served as to a worker without pins; `latest` is always the head (a skill
    only staged, never live, is then not served)."""
    if pin is not None:
        pinned = at_label(m, pin)
        if pinned is not None or pin == LATEST:
            return pinned, pin
    return effective(m, scope, user, environment), None
