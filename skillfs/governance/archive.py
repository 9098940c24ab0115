"""`store.archive` (docs/governance.md, "Archive"): a scope's archived skills, each its own
entry `.archive/<name>` with its own manifest, versions, findings and history, never in a
worker's view and never listed as a skill. Archive and restore are each one commit (C1) that
moves a whole file table between two entries of one scope, so a worker sees it at its next
step (C3)."""

from __future__ import annotations

from skillfs.governance.ports import Commits
from skillfs.model import CommitResult, Scope
from skillfs.model.ops import DEFAULT, Restore, WriteOptions
from skillfs.model.ops import Archive as ArchiveCommand
from skillfs.store.who import check_message


class Archive:
    """add (archive a live skill) / restore, each taking one `WriteOptions`."""

    def __init__(self, commits: Commits) -> None:
        self._commits = commits

    def add(
        self,
        scope: Scope,
        skill: str,
        reason: str = "",
        *,
        options: WriteOptions = DEFAULT,
        replace: bool = False,
    ) -> CommitResult:
        """Move a live skill to `.archive/<skill>` in one commit: the archive entry gets its
        files (and findings, and its kill switch as it was), the live skill a tombstone, so
        it leaves every view at the next step. An archive of that name already there is a
        Conflict unless `replace` (its versions stay in the archive entry's history). The
        reason is the commit's message unless `options.message` gives another."""
        command = ArchiveCommand(
            scope=scope, skill=skill, replace=replace, expected_version=options.expected_version
        )
        return self._commits.commit([command], options=options.or_message(check_message(reason)))

    def restore(self, scope: Scope, name: str, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """Bring `.archive/<name>` back live as `name` in one commit (the archive entry gets
        a tombstone). A live skill of that name is a Conflict: nothing is written."""
        command = Restore(scope=scope, name=name, expected_version=options.expected_version)
        return self._commits.commit([command], options=options)
