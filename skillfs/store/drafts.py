"""Drafts and review (docs/governance.md, "Drafts and review"): a proposed skill is the entry
`_drafts/<name>` of its scope, written through the publish path (validated, findings
recorded), listed for review, then approved (its files become the live skill and the draft
is removed, in one commit) or rejected (the draft removed, the reason in its history).
`Store` takes these methods from `Drafts`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from skillfs.errors import Conflict, NotFound
from skillfs.model import (
    CommitResult,
    File,
    FileEntry,
    Finding,
    Manifest,
    Put,
    Rollout,
    Scope,
)
from skillfs.model.names import DRAFTS, draft_entry, entry_name, in_side
from skillfs.store.commit import Prepared, refuse_errors
from skillfs.store.governance import check_message
from skillfs.store.rollouts import candidate_of, check_rule, describe, staged
from skillfs.store.side import Carried, SideEntries, split_files


class Draft(BaseModel):
    """One draft awaiting review: who proposed which version, its findings, and the live
    skill's version it was proposed against next to the live version now."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    name: str
    version: int
    actor: str
    message: str
    committed_at: float
    findings: list[Finding]
    #: The live skill's version when proposed (0: there was none; None: not recorded, a
    #: draft written by an older skillfs).
    base_version: int | None
    #: The live skill's version now (0: none).
    live_version: int
    #: Held in the single `_drafts` manifest of an older skillfs: split it to review it.
    legacy: bool = False

    @property
    def stale(self) -> bool:
        """The live skill moved since the draft was proposed: approving it is refused."""
        return self.base_version is not None and self.base_version != self.live_version


class Drafts(SideEntries):
    """propose / drafts / approve / reject of `Store` (docs/governance.md); an approval or a
    rejection is a move of side entries (`SideEntries._moves`)."""

    if TYPE_CHECKING:
        clock: Callable[[], float]

    def propose(
        self,
        scope: Scope,
        name: str,
        files: Mapping[str, File | bytes | FileEntry],
        *,
        message: str = "",
        actor: str | None = None,
        expected_version: int | None = None,
        strict: bool = False,
        based_on: int | None = None,
    ) -> CommitResult:
        """Write the draft `_drafts/<name>` (a new one, or its next version: `expected_version`
        is the draft's) through the publish path: checked and validated like a publish, its
        findings recorded, and the live skill's version it is proposed against kept in it:
        the live version now, or `based_on` for files built on an older one (an edit of the
        pending draft passes the draft's own base, so that a live edit made since still
        shows it stale)."""
        put = Put(scope, draft_entry(name), dict(files), expected_version)
        domain = self.check_commit([(scope, put.skill)])
        bases = {} if based_on is None else {(scope, name): based_on}
        prepared = self._prepared([put], strict=strict, actor=actor, message=message, bases=bases)
        return self._commit(domain, prepared, uuid.uuid4().hex)

    def _based(
        self, prepared: list[Prepared], given: Mapping[tuple[Scope, str], int] | None = None
    ) -> list[Prepared]:
        """Each Put of a draft records the live skill's version it is proposed against, read
        once per scope before the commit (a live skill that moves in between makes the draft
        look stale, never fresh); `given`: (scope, name) -> the base its files were built on
        (`propose`'s `based_on`)."""
        drafts = [p for p in prepared if p.files is not None and in_side(p.skill, DRAFTS)]
        if not drafts:
            return prepared
        bases: dict[tuple[Scope, str], int] = dict(given or {})
        for scope in {p.scope for p in drafts}:  # the live versions of the others, read once
            names = [entry_name(p.skill) for p in drafts if p.scope == scope]
            unread = [n for n in names if (scope, n) not in bases]
            if unread:
                live = self._retrying(self.engine.load_skills, scope, unread)
                bases.update({(scope, n): m.version for n, m in live.items() if not m.deleted})
        return [
            p.model_copy(update={"edit": _put(p, bases.get((p.scope, entry_name(p.skill)), 0))})
            if any(p is d for d in drafts)
            else p
            for p in prepared
        ]

    def drafts(self, target: str | Scope) -> list[Draft]:
        """The drafts of a scope, or of every scope of an agent (by id or `agents/<id>`) or of
        a market (`markets/<id>`) that this store may read, by scope and name."""
        out: list[Draft] = []
        for scope in self.scopes_named(target):
            live: dict[str, Manifest] = self.entries(scope)
            for key, m in sorted(live.items()):
                if m.deleted or not (key == DRAFTS or in_side(key, DRAFTS)):
                    continue
                now = live.get(entry_name(key))
                now_v = now.version if now is not None and not now.deleted else 0
                if key != DRAFTS:
                    out.append(draft_of(scope, entry_name(key), m, now_v))
                    continue
                for name in split_files(scope, m):  # an older skillfs's single manifest
                    held = live.get(name)
                    held_v = held.version if held is not None and not held.deleted else 0
                    found = [_legacy_finding(scope)]
                    out.append(draft_of(scope, name, m, held_v, found, legacy=True))
        return out

    def approve(
        self,
        scope: Scope,
        name: str,
        *,
        expected_version: int | None = None,
        strict: bool = False,
        actor: str | None = None,
        message: str = "",
        rollout: Rollout | None = None,
        into: Scope | None = None,
    ) -> CommitResult:
        """Make the draft's files the live skill `name` and remove the draft, in one commit.
        Refused (Conflict, nothing written) when the live skill moved since the draft was
        proposed; `expected_version` is the draft's version the reviewer saw; `strict`
        refuses a draft with error findings.

        With `rollout`, the draft becomes the skill's staged candidate for the workers the
        rule names instead (the live version stays for everyone else; `store.widen`,
        `promote`, `abort` go on from there), in the same one commit. `into` is another
        scope of the same agent the skill goes to, e.g. an agent's draft in a user's scope
        approved into the agent's shared scope; the draft's base is its own scope's, so it
        is not compared there (a rollout leaves the live version there untouched)."""
        entry = draft_entry(name)
        target = into if into is not None else scope
        rule = check_rule(target, rollout) if rollout is not None else None
        commit_id = uuid.uuid4().hex
        carried = Carried()

        def take(cur: Manifest | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(self.no_draft(scope, name))
            if strict:
                refuse_errors(name, cur.findings)
            return carried.take(cur, "approve")

        def put(cur: Manifest | None) -> dict[str, Any]:
            draft = carried.taken
            if target == scope:
                _check_base(scope, name, draft, cur)
            if rule is not None:
                return self._staged(target, name, cur, draft, rule, commit_id, actor)
            out: dict[str, Any] = {
                "frontmatter": draft.frontmatter,
                "findings": draft.findings,
                "files": draft.files,
                "operation": "approve",
            }
            if cur is not None:  # a new file set keeps the kill switch and a candidate
                out.update(
                    disabled=cur.disabled,
                    disabled_reason=cur.disabled_reason,
                    candidate=cur.candidate,
                )
            return out

        said = check_message(message) or "approved" + (
            f" as a canary for {describe(rule)}" if rule is not None else ""
        )
        return self._moves(
            scope,
            [(entry, take, expected_version), (name, put, None)],
            actor=actor,
            message=said,
            scopes=[scope, target],
            commit_id=commit_id,
        )

    def _staged(
        self,
        scope: Scope,
        name: str,
        cur: Manifest | None,
        draft: Manifest,
        rule: Rollout,
        commit_id: str,
        actor: str | None,
    ) -> dict[str, Any]:
        """The live entry with the draft as its candidate (store.rollouts's `stage`)."""
        if cur is not None and cur.candidate is not None:
            raise Conflict(
                f"{scope}/{name} already has a staged candidate (for "
                f"{describe(cur.candidate.rollout)}); nothing was written: promote or abort "
                "it first, then approve the draft",
                skill=name,
                current_version=cur.version,
            )
        candidate = candidate_of(draft, rule, commit_id, self.who(actor), self.clock())
        return staged(cur, candidate, "approve")

    def reject(
        self,
        scope: Scope,
        name: str,
        reason: str = "",
        *,
        expected_version: int | None = None,
        actor: str | None = None,
    ) -> CommitResult:
        """Remove the draft; the reason is the commit's message, kept in its history and in
        the audit (as `reject`)."""

        def take(cur: Manifest | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(self.no_draft(scope, name))
            return {"deleted": True, "files": {}, "operation": "reject"}

        return self._moves(
            scope,
            [(draft_entry(name), take, expected_version)],
            actor=actor,
            message=check_message(reason) or "rejected",
        )

    def no_draft(self, scope: Scope, name: str) -> str:
        """Why there is no draft `name` to act on in `scope`, naming the drafts there."""
        held = self.drafts(scope)
        if any(d.name == name and d.legacy for d in held):
            return (
                f"the draft {name!r} in {scope} is held in the single `_drafts` manifest of an "
                "older skillfs: split it into entries first (store.split_legacy, `skillfs "
                "drafts split`), then review it"
            )
        names = ", ".join(d.name for d in held if not d.legacy) or "none"
        return f"no draft {name!r} in {scope}; drafts there: {names}"


def _put(p: Prepared, base: int) -> Callable[[Manifest | None], dict[str, Any]]:
    """The edit writing a draft's prepared files with the base it was proposed against."""

    def edit(cur: Manifest | None) -> dict[str, Any]:
        return {
            "frontmatter": p.frontmatter,
            "findings": p.findings,
            "files": p.files or {},
            "base_version": base,
        }

    return edit


def _check_base(scope: Scope, name: str, draft: Manifest, cur: Manifest | None) -> None:
    """Conflict when the live skill is not at the version the draft was proposed against
    (not checked for a draft that does not record it: one an older skillfs wrote)."""
    base, now = draft.base_version, cur.version if cur is not None else 0
    if base is None or base == now:
        return
    based = f"version {base} of it" if base else "no live skill"
    is_now = f"version {now}" if now else "deleted"
    raise Conflict(
        f"{scope}/{name} moved since its draft was proposed: the draft (version "
        f"{draft.version}) was proposed against {based}, the live skill is now {is_now}; "
        "nothing was written: look at the live skill, then propose the draft again on it "
        "(its next version) or reject it",
        skill=name,
        current_version=now,
    )


def draft_of(
    scope: Scope,
    name: str,
    m: Manifest,
    live_version: int,
    legacy_findings: Sequence[Finding] = (),
    *,
    legacy: bool = False,
) -> Draft:
    """The draft of `name` that `m` holds (its own `_drafts/<name>` entry, or an older
    skillfs's single `_drafts` manifest: `legacy`), against the live version `live_version`."""
    findings = legacy_findings if legacy else m.findings
    base = None if legacy else m.base_version
    return Draft(
        scope=scope,
        name=name,
        version=m.version,
        actor=m.actor,
        message=m.message,
        committed_at=m.committed_at,
        findings=list(findings),
        base_version=base,
        live_version=live_version,
        legacy=legacy,
    )


def _legacy_finding(scope: Scope) -> Finding:
    return Finding(
        severity="warning",
        rule="legacy-drafts",
        message=(
            f"held in the single `_drafts` manifest an older skillfs wrote in {scope}: split it "
            "into one entry per draft (store.split_legacy, `skillfs drafts split`) to review it"
        ),
    )
