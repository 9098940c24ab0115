"""The audit (docs/governance.md, "Audit"): who made each kept version of a skill, what it did
and why, read from manifests and their history (kept by the history policy), not from the
bounded change log."""

from __future__ import annotations

import math
from typing import Any

from skillfs.errors import InvalidArgument
from skillfs.governance.ports import Reads
from skillfs.model import AuditEntry, Manifest, Scope, target_domain
from skillfs.model.entry import EntryKind, EntryRef


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


def scopes_named(reads: Reads, target: str | Scope) -> list[Scope]:
    """The scopes a target names: a scope itself, else every written scope of its domain
    (an agent by id or `agents/<id>`, a market by `markets/<id>`)."""
    if isinstance(target, Scope):
        return [target]
    return list(reads.retrying(reads.engine.scopes, target_domain(target)))


def audit(
    reads: Reads,
    target: str | Scope,
    *,
    since: float | None = None,
    until: float | None = None,
    actor: str | None = None,
    skill: str | None = None,
    limit: int = 1000,
) -> list[AuditEntry]:
    """The audit of an agent (by id or domain), a market or a scope; a skillfs server
    (`grpc://`) answers it in one call, within its token's read grants."""
    wanted: dict[str, Any] = {
        "since": since, "until": until, "actor": actor, "skill": skill, "limit": limit
    }  # fmt: skip
    remote = reads.retrying(reads.engine.audit, str(target), **wanted)
    if remote is not None:
        return list(remote)
    return audit_scopes(reads, scopes_named(reads, target), **wanted)


def audit_scopes(
    reads: Reads,
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
            raise InvalidArgument(f"audit {name}={at!r}: give a time in seconds since the epoch")
    if limit < 1:
        raise InvalidArgument(f"audit limit={limit}: give 1 or more")
    out: list[AuditEntry] = []
    for scope in scopes:
        live = reads.entries(scope)
        names = [skill] if skill is not None else sorted(live)
        older = reads.retrying(reads.engine.scope_history, scope, names)
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
