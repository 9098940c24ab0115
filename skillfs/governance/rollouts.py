"""`store.rollouts` (docs/governance.md, "Staged rollout"): a skill holds, beside its live
version, one candidate and a rule saying who gets it. Each operation is one commit of one
manifest (C1), seen at the next step (C3); who sees what is decided by
`skillfs.governance.rollout_rule` on the manifests a worker already holds."""

from __future__ import annotations

from collections.abc import Mapping

from skillfs.governance.ports import Commits
from skillfs.model import CommitResult, Rollout, Scope
from skillfs.model.ops import DEFAULT, Abort, FileValue, Promote, Stage, Widen, WriteOptions


class Rollouts:
    """stage / widen / promote / abort. Each takes one `WriteOptions` (actor, message, the
    skill's expected version, commit id)."""

    def __init__(self, commits: Commits) -> None:
        self._commits = commits

    def stage(
        self,
        scope: Scope,
        skill: str,
        files: Mapping[str, FileValue],
        rollout: Rollout,
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """Stage `files` as the skill's candidate for the workers `rollout` names; the live
        version stays for everyone else (a new skill: nobody else sees it). The files are
        checked, inspected and uploaded exactly as `publish` does. Staging again replaces
        the candidate and its rule."""
        command = Stage(
            scope=scope, skill=skill, files=dict(files), rollout=rollout,
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([command], options=options, strict=strict)

    def widen(
        self, scope: Scope, skill: str, rollout: Rollout, *, options: WriteOptions = DEFAULT
    ) -> CommitResult:
        """Give the candidate to more workers. The new rule must keep everyone the old one
        reached: every environment and user still listed, the fraction not lower (the
        buckets are stable, so a higher fraction only adds users). To narrow, abort and
        stage again."""
        command = Widen(
            scope=scope, skill=skill, rollout=rollout, expected_version=options.expected_version
        )
        return self._commits.commit([command], options=options)

    def promote(
        self,
        scope: Scope,
        skill: str,
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
        anyway: bool = False,
    ) -> CommitResult:
        """Make the candidate the live version for everyone, in one commit; the version it
        replaces stays in history (roll back to it like any other). A live save that landed
        after the candidate was staged is refused (FailedPrecondition naming its version,
        actor and time) unless `anyway`: promoting drops that edit. `strict`, the admin
        surfaces' policy: a candidate with error findings is refused (InvalidSkill)."""
        command = Promote(
            scope=scope, skill=skill, expected_version=options.expected_version, anyway=anyway
        )
        return self._commits.commit([command], options=options, strict=strict)

    def abort(self, scope: Scope, skill: str, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """Drop the candidate: everyone sees the live version again. A skill that was only
        staged (never live) is deleted, so nobody sees it, also when it was disabled since:
        a disabled entry left in its place would hide the name from below. (In a user's
        scope a disabled entry without files stays: it is how a user hides a skill.) Its
        history stays."""
        command = Abort(scope=scope, skill=skill, expected_version=options.expected_version)
        return self._commits.commit([command], options=options)
