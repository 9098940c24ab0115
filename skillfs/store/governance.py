"""Governed change (docs/governance.md, DESIGN §9): who made each version and why, the audit
that lists them, and the kill switch (disable / enable). `Store` takes these methods from
`Governance`; each operation is one commit of `Store._commit` (C1), so it is seen at the
next step (C3) like any publish."""

from __future__ import annotations

import getpass
import math
import os
import socket
import uuid
from typing import TYPE_CHECKING, Any

from skillfs.errors import InvalidPath, NotFound
from skillfs.model import AuditEntry, CommitResult, Manifest, Put, Scope, target_domain
from skillfs.model.names import DRAFTS, check_entry, in_side, is_hidden_dir
from skillfs.store.commit import Edit, Prepared, edited

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from skillfs.engines.base import Engine

#: The longest actor name and commit message kept (longer ones are refused, not cut).
ACTOR_MAX, MESSAGE_MAX = 256, 4096


def default_actor() -> str:
    """`$SKILLFS_ACTOR`, else `user@host`: who a commit made from here is by."""
    named = os.environ.get("SKILLFS_ACTOR", "").strip()
    if named:
        return check_actor(named)
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return check_actor(f"{user}@{socket.gethostname()}")


def check_actor(actor: str) -> str:
    if not isinstance(actor, str) or not actor.strip() or len(actor) > ACTOR_MAX:
        raise InvalidPath(f"invalid actor {actor!r}: give 1-{ACTOR_MAX} characters")
    if any(ord(c) < 32 for c in actor):
        raise InvalidPath(f"invalid actor {actor!r}: no control characters")
    return actor.strip()


def agent_actor(agent_id: str, user_id: str) -> str:
    """The actor of an agent's own writes for one user."""
    return f"agent:{agent_id}/{user_id}"


def check_commit_id(commit_id: str) -> str:
    """A caller's commit id (the key that makes a retried commit happen once)."""
    if not isinstance(commit_id, str) or not 0 < len(commit_id) <= 128:
        raise InvalidPath("a commit id is 1-128 characters")
    return commit_id


def check_message(message: str | None) -> str:
    if message is None:
        return ""
    if not isinstance(message, str) or len(message) > MESSAGE_MAX:
        raise InvalidPath(
            f"a message or reason is text of at most {MESSAGE_MAX} characters: shorten it"
        )
    return message


def action(m: Manifest, before: Manifest | None) -> str:
    """What a version did: the operation it records (stage, widen, promote, abort, approve,
    reject, archive, restore), a draft's "propose", else from the version before it."""
    if m.operation:
        return m.operation
    if not m.deleted and in_side(m.skill, DRAFTS):
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
        actor: str | None

        def _retrying(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

        def _commit(
            self, domain: str, prepared: list[Prepared], commit_id: str
        ) -> CommitResult: ...

        def _prepared(
            self,
            changes: Sequence[Put],
            *,
            strict: bool,
            actor: str | None,
            message: str,
            bases: Mapping[tuple[Scope, str], int] | None = None,
        ) -> list[Prepared]: ...

        def markets(self) -> list[str]: ...

        def scopes(self, target: str | Scope) -> list[Scope]: ...

        def entries(self, scope: Scope) -> dict[str, Manifest]: ...

        def skills(self, scope: Scope) -> list[str]: ...

    def who(self, actor: str | None = None) -> str:
        """The actor a commit is recorded by: `actor`, else the store's, else the default."""
        if actor is not None:
            return check_actor(actor)
        return check_actor(self.actor) if self.actor else default_actor()

    def _edit(
        self,
        scope: Scope,
        skill: str,
        edit: Edit,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
        message: str | None = None,
        commit_id: str | None = None,
    ) -> CommitResult:
        """One commit that rewrites one skill's manifest by `edit` (retried on races)."""
        scope.check()
        check_entry(skill)
        prepared = edited(
            scope, skill, edit, expected_version, self.who(actor), check_message(message)
        )
        return self._commit(scope.domain, [prepared], commit_id or uuid.uuid4().hex)

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
        _only_skills(skill, "disabled")
        below = self._hideable(scope, skill)

        def edit(cur: Manifest | None) -> dict[str, Any]:
            if cur is None and not below:
                raise NotFound(self._unknown(scope, skill))
            if cur is not None and cur.disabled:
                raise InvalidPath(f"{scope}/{skill} is already disabled: enable it first")
            return {**carried(cur), "disabled": True, "disabled_reason": reason}

        return self._edit(
            scope,
            skill,
            edit,
            expected_version=expected_version,
            actor=actor,
            message=reason or "disabled",
        )

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
        the user sees the skill from below again."""
        _only_skills(skill, "enabled")

        def edit(cur: Manifest | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(self._unknown(scope, skill))
            if not cur.disabled:
                raise InvalidPath(f"{scope}/{skill} is not disabled: nothing to enable")
            if cur.hides:  # a hole: enabling removes it (recorded as an enable, not a delete)
                return {"deleted": True, "files": {}, "operation": "enable"}
            return {**carried(cur), "disabled": False, "disabled_reason": ""}

        return self._edit(
            scope,
            skill,
            edit,
            expected_version=expected_version,
            actor=actor,
            message=message or "enabled",
        )

    def _hideable(self, scope: Scope, skill: str) -> bool:
        """Whether a user's scope may hide `skill` it does not hold: the agent's shared scope
        or some market has it."""
        if scope.kind != "user" or scope.agent_id is None:
            return False
        shared = self._retrying(self.engine.load_skills, Scope.shared(scope.agent_id), [skill])
        if _present(shared.get(skill)):
            return True
        for market in self.markets():
            found = self._retrying(self.engine.load_skills, Scope.market(market), [skill])
            if _present(found.get(skill)):
                return True
        return False

    def _unknown(self, scope: Scope, skill: str) -> str:
        live = self.entries(scope)
        names = sorted(k for k, m in live.items() if not m.deleted and not is_hidden_dir(k))
        where = " (nor its agent's shared scope or any market)" if scope.kind == "user" else ""
        return f"skill {skill!r} does not exist in {scope}{where}; skills there: " + (
            ", ".join(names[:50]) or "none"
        )

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
                raise InvalidPath(f"audit {name}={at!r}: give a time in seconds since the epoch")
        if limit < 1:
            raise InvalidPath(f"audit limit={limit}: give 1 or more")
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


def _present(m: Manifest | None) -> bool:
    return m is not None and not m.deleted


def carried(cur: Manifest | None) -> dict[str, Any]:
    """The content of the current manifest, carried into the next version (none: an entry
    with no files yet)."""
    if cur is None:
        return {"files": {}}
    return {
        "frontmatter": cur.frontmatter,
        "findings": cur.findings,
        "files": cur.files,
        "disabled": cur.disabled,
        "disabled_reason": cur.disabled_reason,
        "candidate": cur.candidate,
    }


def _only_skills(skill: str, what: str) -> None:
    """disable and enable act on skills: a draft or an archived entry is not served, and
    switching one on would carry the switch to where it is approved or restored."""
    if is_hidden_dir(skill):
        raise InvalidPath(f"{skill!r} is not a skill: only skills can be {what}")
