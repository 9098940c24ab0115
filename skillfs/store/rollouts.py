"""Staged rollout (docs/governance.md, "Staged rollout"): a skill holds, beside its live
version, one candidate and a rule saying who gets it. `Store` takes `stage`, `widen`,
`promote` and `abort` from `Rollouts`; each is one commit of one manifest (C1), seen at the
next step (C3); who sees what is decided by `skillfs.governance.rollout_rule` on the
manifests a worker already holds."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skillfs.errors import InvalidPath, NotFound
from skillfs.model import Candidate, CommitResult, File, FileEntry, Manifest, Put, Rollout, Scope
from skillfs.model.names import check_skill_name, is_hidden_dir
from skillfs.store.commit import refuse_errors
from skillfs.store.governance import Governance, carried

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from skillfs.store.commit import Prepared


class Rollouts(Governance):
    """The staged-rollout operations of `Store` (docs/governance.md); a rollout step is a
    governed edit (`Governance._edit`)."""

    if TYPE_CHECKING:
        clock: Callable[[], float]

        def check_commit(
            self, targets: Sequence[tuple[Scope, str]], domain: str | None = None
        ) -> str: ...

    def stage(
        self,
        scope: Scope,
        skill: str,
        files: Mapping[str, File | bytes | FileEntry],
        rollout: Rollout,
        expected_version: int | None = None,
        *,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
        commit_id: str | None = None,
    ) -> CommitResult:
        """Stage `files` as the skill's candidate for the workers `rollout` names; the live
        version stays for everyone else (a new skill: nobody else sees it). The files are
        checked, inspected and uploaded exactly as `publish` does. Staging again replaces
        the candidate and its rule."""
        rule = check_rule(scope, rollout)
        self.check_commit([(scope, skill)])
        if is_hidden_dir(skill):
            raise InvalidPath(f"{skill!r} is not a skill: only skills can be staged")
        if not files:
            raise InvalidPath(f"staging {scope}/{skill} needs its files (SKILL.md at least)")
        put = Put(scope, skill, dict(files), expected_version)
        [ready] = self._prepared([put], strict=strict, actor=actor, message=message)
        commit_id = commit_id or uuid.uuid4().hex
        candidate = candidate_of(ready, rule, commit_id, self.who(actor), self.clock())

        def edit(cur: Manifest | None) -> dict[str, Any]:
            return staged(cur, candidate, "stage")

        return self._edit(
            scope,
            skill,
            edit,
            expected_version=expected_version,
            actor=actor,
            message=message or f"staged for {describe(rule)}",
            commit_id=commit_id,
        )

    def widen(
        self,
        scope: Scope,
        skill: str,
        rollout: Rollout,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
        message: str = "",
        commit_id: str | None = None,
    ) -> CommitResult:
        """Give the candidate to more workers. The new rule must keep everyone the old one
        reached: every environment and user still listed, the fraction not lower (the
        buckets are stable, so a higher fraction only adds users). To narrow, abort and
        stage again."""
        rule = check_rule(scope, rollout)

        def edit(cur: Manifest, c: Candidate) -> dict[str, Any]:
            dropped = narrowed(c.rollout, rule)
            if dropped:
                raise InvalidPath(
                    f"widening {scope}/{skill} must keep everyone already in, but the new rule "
                    f"drops {dropped}: list them again, or abort and stage again to narrow"
                )
            if rule == c.rollout:
                raise InvalidPath(
                    f"{scope}/{skill} is already staged for {describe(rule)}: nothing to widen"
                )
            return {**carried(cur), "candidate": c.model_copy(update={"rollout": rule})}

        return self._edit(
            scope,
            skill,
            self._on_candidate(scope, skill, "widen", edit),
            expected_version=expected_version,
            actor=actor,
            message=message or f"widened to {describe(rule)}",
            commit_id=commit_id,
        )

    def promote(
        self,
        scope: Scope,
        skill: str,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
        message: str = "",
        commit_id: str | None = None,
        strict: bool = False,
    ) -> CommitResult:
        """Make the candidate the live version for everyone, in one commit; the version it
        replaces stays in history (roll back to it like any other). `strict`, the admin
        surfaces' policy: a candidate with error findings is refused (InvalidSkill)."""

        def edit(cur: Manifest, c: Candidate) -> dict[str, Any]:
            if strict:
                refuse_errors(skill, c.findings)
            return {
                **carried(cur),
                "files": c.files,
                "frontmatter": c.frontmatter,
                "findings": c.findings,
                "candidate": None,
            }

        return self._edit(
            scope,
            skill,
            self._on_candidate(scope, skill, "promote", edit),
            expected_version=expected_version,
            actor=actor,
            message=message or "promoted the candidate",
            commit_id=commit_id,
        )

    def abort(
        self,
        scope: Scope,
        skill: str,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
        message: str = "",
        commit_id: str | None = None,
    ) -> CommitResult:
        """Drop the candidate: everyone sees the live version again. A skill that was only
        staged (never live) is deleted, so nobody sees it, also when it was disabled since:
        a disabled entry left in its place would hide the name from below. (In a user's
        scope a disabled entry without files stays: it is how a user hides a skill.) Its
        history stays."""

        def edit(cur: Manifest, c: Candidate) -> dict[str, Any]:
            if not cur.files and not (cur.disabled and scope.kind == "user"):  # staged only
                return {"deleted": True, "files": {}}
            return {**carried(cur), "candidate": None}

        return self._edit(
            scope,
            skill,
            self._on_candidate(scope, skill, "abort", edit),
            expected_version=expected_version,
            actor=actor,
            message=message or "aborted the candidate",
            commit_id=commit_id,
        )

    def _on_candidate(
        self,
        scope: Scope,
        skill: str,
        what: str,
        change: Callable[[Manifest, Candidate], dict[str, Any]],
    ) -> Callable[[Manifest | None], dict[str, Any]]:
        """The edit of the step `what` (widen, promote, abort) of the skill's staged
        candidate: `change` gives the next version from the current one and its candidate."""

        def edit(cur: Manifest | None) -> dict[str, Any]:
            c = self._candidate(scope, skill, cur, what)
            assert cur is not None  # _candidate found one
            return {**change(cur, c), "operation": what}

        return edit

    def _candidate(self, scope: Scope, skill: str, cur: Manifest | None, what: str) -> Candidate:
        """The staged candidate `what` acts on; NotFound naming the fix when there is none."""
        check_skill_name(skill)
        if cur is None:
            raise NotFound(self._unknown(scope, skill))
        if cur.candidate is None:
            raise NotFound(
                f"{scope}/{skill} has no staged candidate to {what} (version {cur.version} is "
                "live for everyone): stage one first"
            )
        return cur.candidate


def candidate_of(
    source: Prepared | Manifest, rule: Rollout, commit_id: str, actor: str, at: float
) -> Candidate:
    """A candidate of `source`'s checked files (a staged Put, or an approved draft)."""
    assert source.files is not None  # a Put's, or a live draft's
    return Candidate(
        files=source.files,
        frontmatter=source.frontmatter,
        findings=tuple(source.findings),
        rollout=rule,
        commit_id=commit_id,
        actor=actor,
        staged_at=at,
    )


def staged(cur: Manifest | None, candidate: Candidate, operation: str) -> dict[str, Any]:
    """The next version of `cur` (none: a new skill, live for nobody) holding `candidate`."""
    return {**carried(cur), "candidate": candidate, "operation": operation}


def check_rule(scope: Scope, rollout: Rollout) -> Rollout:
    """The rule checked for `scope`: in a user's scope only that user ever sees the skill,
    so `users` may name no one else (a fraction buckets that one user)."""
    if not isinstance(rollout, Rollout):
        raise InvalidPath(
            f"a rollout is a skillfs.Rollout(environments=[...], users=[...], fraction=...), "
            f"not {type(rollout).__name__}"
        )
    rollout.check()
    others = sorted(set(rollout.users) - {scope.user_id}) if scope.kind == "user" else []
    if others:
        raise InvalidPath(
            f"{scope} is seen by user {scope.user_id!r} alone: a rollout there cannot name "
            f"{', '.join(others)} (stage in the shared scope to reach other users)"
        )
    return rollout


def narrowed(old: Rollout, new: Rollout) -> str:
    """What `new` drops of `old`'s reach ("" when it keeps everyone)."""
    parts = []
    envs = [e for e in old.environments if e not in new.environments]
    users = [u for u in old.users if u not in new.users]
    if envs:
        parts.append("environment " + ", ".join(envs))
    if users:
        parts.append("user " + ", ".join(users))
    if new.fraction < old.fraction:
        parts.append(f"users between fraction {new.fraction:g} and {old.fraction:g}")
    return "; ".join(parts)


def describe(rule: Rollout) -> str:
    """A rule in words, for messages and listings: `env prod, staging; users alice; 10 %`."""
    parts = []
    if rule.environments:
        parts.append("env " + ", ".join(rule.environments))
    if rule.users:
        parts.append("users " + ", ".join(rule.users))
    if rule.fraction:
        parts.append(f"{rule.fraction * 100:g} %")
    return "; ".join(parts) or "nobody"
