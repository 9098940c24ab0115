"""Governed change (docs/governance.md): the audit of who made each version and why, and the
kill switch (disable / enable). `Store` takes these methods from `Governance`; each operation
is one commit (C1), so it is seen at the next step (C3) like any publish."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from skillfs.errors import InvalidArgument
from skillfs.model import AuditEntry, CommitResult, Manifest, Scope, target_domain
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.ops import Command, Disable, Enable
from skillfs.store.who import check_message

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from skillfs.engines.base import Engine


def action(m: Manifest, before: Manifest | None) -> str:
    """What a version did: the operation it records (stage, widen, promote, abort, approve,
    reject, archive, restore), a draft's "propose", else from the version before it."""
    if m.operation:
        return m.operation
    if not m.deleted and EntryRef.parse(m.skill).kind is EntryKind.DRAFT:
        return "propose"
    if m.deleted:
        return "delete"
    if before is not None and not before.deleted and before.disabled != m.disabled:
        return "disable" if m.disabled else "enable"
    if m.disabled and not m.files:
        return "disable"
    return "publish"


class Governance:
    """The governed-change operations of `Store` (docs/governance.md)."""

    if TYPE_CHECKING:
        engine: Engine

        def _retrying(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

        def commit(
            self,
            changes: Sequence[Command],
            *,
            commit_id: str | None = None,
            strict: bool = False,
            actor: str | None = None,
            message: str = "",
        ) -> CommitResult: ...

        def entries(self, scope: Scope) -> dict[str, Manifest]: ...

    # ------------------------------------------------------------------ disable / enable

    def disable(
        self,
        scope: Scope,
        skill: str,
        reason: str = "",
        *,
        expected_version: int | None = None,
        actor: str | None = None,
    ) -> CommitResult:
        """Switch a skill off without deleting it: its files and history stay, and the entry
        shadows its name and contributes nothing (a skill-shaped hole at its layer). In a
        user's scope a skill the user sees from the shared scope or a market is hidden from
        that user alone, by an entry with no files."""
        reason = check_message(reason)
        command = Disable(
            scope=scope, skill=skill, reason=reason, expected_version=expected_version
        )
        return self.commit([command], actor=actor, message=reason)

    def enable(
        self,
        scope: Scope,
        skill: str,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Switch a disabled skill back on; a user's hiding entry (no files) is removed, so
        the user sees the skill from below again. A user's copy of a skill an operator
        disabled below is that user's own from then on (docs/governance.md)."""
        command = Enable(scope=scope, skill=skill, expected_version=expected_version)
        return self.commit([command], actor=actor, message=message)

    # ------------------------------------------------------------------ audit

    def scopes_named(self, target: str | Scope) -> list[Scope]:
        """The scopes a target names: a scope itself, else every written scope of its domain
        (an agent by id or `agents/<id>`, a market by `markets/<id>`)."""
        if isinstance(target, Scope):
            return [target]
        return list(self._retrying(self.engine.scopes, target_domain(target)))

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
        `actor` and `skill`; at most `limit` entries. Read from manifests and their history
        (kept by the history policy), not from the bounded change log. A skillfs server
        (`grpc://`) answers it in one call, within its token's read grants."""
        wanted: dict[str, Any] = {
            "since": since, "until": until, "actor": actor, "skill": skill, "limit": limit
        }  # fmt: skip
        remote = self._retrying(self.engine.audit, str(target), **wanted)
        if remote is not None:
            return list(remote)
        scopes = self.scopes_named(target)
        return self.audit_scopes(scopes, **wanted)

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
        """`audit` of these scopes, read from their manifests and history."""
        for name, at in (("since", since), ("until", until)):
            if at is not None and not math.isfinite(at):  # NaN would match nothing, silently
                raise InvalidArgument(
                    f"audit {name}={at!r}: give a time in seconds since the epoch"
                )
        if limit < 1:
            raise InvalidArgument(f"audit limit={limit}: give 1 or more")
        out: list[AuditEntry] = []
        for scope in scopes:
            live = self.entries(scope)
            names = [skill] if skill is not None else sorted(live)
            older = self._retrying(self.engine.scope_history, scope, names)
            for name in names:
                versions = ([live[name]] if name in live else []) + older.get(name, [])
                for i, m in enumerate(versions):
                    entry = _entry(scope, m, versions[i + 1] if i + 1 < len(versions) else None)
                    if _wanted(entry, since, until, actor):
                        out.append(entry)
        out.sort(key=lambda e: (e.committed_at, e.version), reverse=True)
        return out[:limit]


def _entry(scope: Scope, m: Manifest, before: Manifest | None) -> AuditEntry:
    return AuditEntry(
        scope=scope,
        skill=m.skill,
        version=m.version,
        action=action(m, before),
        actor=m.actor,
        message=m.message,
        committed_at=m.committed_at,
        commit_id=m.commit_id,
    )


def _wanted(e: AuditEntry, since: float | None, until: float | None, actor: str | None) -> bool:
    return (
        (since is None or e.committed_at >= since)
        and (until is None or e.committed_at <= until)
        and (actor is None or e.actor == actor)
    )
