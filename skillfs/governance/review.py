"""`store.review` (docs/governance.md, "The two-person rule"): a scope's setting that makes
review mandatory — every write that serves new files there goes through a draft another
person approves. The rule itself is the Committer's (`store.rules.check_review`), held for
every surface; this namespace turns it on and off (each change one commit the audit lists)
and says whether it holds."""

from __future__ import annotations

from dataclasses import dataclass

from skillfs.governance.ports import Commits, Reads
from skillfs.model import CommitResult, Manifest, Scope
from skillfs.model.ops import DEFAULT, RequireReview, WriteOptions
from skillfs.store.rules import REVIEW


@dataclass(frozen=True)
class ReviewRule:
    """Whether a scope requires review, and the version of the setting that said so last:
    who changed it, when and why (version 0: never set)."""

    scope: Scope
    required: bool
    version: int = 0
    actor: str = ""
    message: str = ""
    changed_at: float = 0.0

    @classmethod
    def of(cls, scope: Scope, held: Manifest | None) -> ReviewRule:
        """The rule the setting's entry as read says (None: never set)."""
        if held is None:
            return cls(scope, required=False)
        return cls(
            scope,
            required=not held.deleted,
            version=held.version,
            actor=held.actor,
            message=held.message,
            changed_at=held.committed_at,
        )


class Review:
    """require / lift a scope's two-person rule, and read it."""

    def __init__(self, reads: Reads, commits: Commits) -> None:
        self._reads = reads
        self._commits = commits

    def require(self, scope: Scope, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """From this commit on, a write serving new files in `scope` goes through a draft
        another actor approves (over `grpc://`, this needs an admin grant on the scope)."""
        return self._set(scope, True, options)

    def lift(self, scope: Scope, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """Writes to `scope` are live again without review."""
        return self._set(scope, False, options)

    def rule(self, scope: Scope) -> ReviewRule:
        """The scope's rule as stored now (one read of one entry)."""
        reads = self._reads
        held = reads.retrying(reads.engine.load_skills, scope, [REVIEW]).get(REVIEW)
        return ReviewRule.of(scope, held)

    def _set(self, scope: Scope, required: bool, options: WriteOptions) -> CommitResult:
        command = RequireReview(
            scope=scope, required=required, expected_version=options.expected_version
        )
        return self._commits.commit([command], options=options)
