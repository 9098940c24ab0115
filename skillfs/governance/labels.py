"""`store.labels` (docs/governance.md, "Labels and pins"): a label names a kept version of a
skill, and workers pinned to it are served that version. Setting, moving and removing one is
one commit of the skill's manifest (C1), audited, seen by pinned workers at their next step
(C3); what a pinned worker is served is decided by `skillfs.governance.pin_rule`."""

from __future__ import annotations

from skillfs.governance.ports import Commits, Reads
from skillfs.model import CommitResult, Labelled, Scope
from skillfs.model.ops import DEFAULT, RemoveLabel, SetLabel, WriteOptions


class Labels:
    """set / remove / list. Writes take one `WriteOptions` (actor, message, the skill's
    expected version, commit id)."""

    def __init__(self, reads: Reads, commits: Commits) -> None:
        self._reads = reads
        self._commits = commits

    def set(
        self,
        scope: Scope,
        skill: str,
        label: str,
        version: int | None = None,
        *,
        options: WriteOptions = DEFAULT,
    ) -> CommitResult:
        """Set `label` on the kept `version` (None: the live one), or move it there. The
        skill gets a new version carrying the label; the labelled version stays in history
        as long as the label names it, whatever the retention policy."""
        command = SetLabel(
            scope=scope, skill=skill, label=label, version=version,
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([command], options=options)

    def remove(
        self, scope: Scope, skill: str, label: str, *, options: WriteOptions = DEFAULT
    ) -> CommitResult:
        """Remove `label`: workers pinned to it are served the head at their next step."""
        command = RemoveLabel(
            scope=scope, skill=skill, label=label, expected_version=options.expected_version
        )
        return self._commits.commit([command], options=options)

    def list(self, scope: Scope, skill: str) -> dict[str, Labelled]:
        """The skill's labels now: label name -> the version it names (its files included)."""
        return dict(self._reads.manifest(scope, skill).labels)
