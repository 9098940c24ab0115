"""`store.governance` (docs/governance.md, "Disable and enable", "Audit"): the kill switch and
the audit. Each switch is one commit (C1), seen at the next step (C3) like any publish; the
rules it keeps are the Committer's."""

from __future__ import annotations

from skillfs.governance import audit
from skillfs.governance.ports import Commits, Reads
from skillfs.model import AuditEntry, CommitResult, Scope
from skillfs.model.ops import DEFAULT, Disable, Enable, WriteOptions
from skillfs.store.who import check_message


class Governance:
    """disable / enable (each taking one `WriteOptions`), and the audit of who changed
    what."""

    def __init__(self, reads: Reads, commits: Commits) -> None:
        self._reads = reads
        self._commits = commits

    def disable(
        self, scope: Scope, skill: str, reason: str = "", *, options: WriteOptions = DEFAULT
    ) -> CommitResult:
        """Switch a skill off without deleting it: its files and history stay, and the entry
        shadows its name and contributes nothing (a skill-shaped hole at its layer). In a
        user's scope a skill the user sees from the shared scope or a market is hidden from
        that user alone, by an entry with no files. `reason` is kept in the entry and is the
        commit's message unless `options.message` gives another."""
        command = Disable(
            scope=scope, skill=skill, reason=check_message(reason),
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([command], options=options)

    def enable(self, scope: Scope, skill: str, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """Switch a disabled skill back on; a user's hiding entry (no files) is removed, so
        the user sees the skill from below again. A user's copy of a skill an operator
        disabled below is that user's own from then on (docs/governance.md)."""
        command = Enable(scope=scope, skill=skill, expected_version=options.expected_version)
        return self._commits.commit([command], options=options)

    def audit(
        self,
        target: str | Scope,
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        skill: str | None = None,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        """Every kept version of an agent's (by id or domain) or a scope's skills committed
        in [since, until], newest first: what each did, who made it and why. Filtered by
        `actor` and `skill`; at most `limit` entries."""
        return audit.audit(
            self._reads, target, since=since, until=until, actor=actor, skill=skill, limit=limit
        )

    def audit_scopes(
        self,
        scopes: list[Scope],
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        skill: str | None = None,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        """`audit` of these scopes (a server answers a token's audit with the scopes it may
        read)."""
        return audit.audit_scopes(
            self._reads, scopes, since=since, until=until, actor=actor, skill=skill, limit=limit
        )

    def scopes_named(self, target: str | Scope) -> list[Scope]:
        """The scopes a target names (a scope, an agent, a market)."""
        return audit.scopes_named(self._reads, target)
