"""Drafts and review (docs/governance.md, "Drafts and review"): a proposed skill is the entry
`_drafts/<name>` of its scope, written through the publish path (validated, findings
recorded), listed for review, then approved (its files become the live skill and the draft
is removed, in one commit) or rejected (the draft removed, the reason in its history).
`Store` takes these methods from `Drafts`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from skillfs.model import CommitResult, Finding, Manifest, Rollout, Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.ops import Approve, FileValue, Propose, Reject
from skillfs.store.side import SideEntries, split_files
from skillfs.store.who import check_message


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
    """propose / drafts / approve / reject of `Store` (docs/governance.md)."""

    def propose(
        self,
        scope: Scope,
        name: str,
        files: Mapping[str, FileValue],
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
        command = Propose(
            scope=scope, name=name, files=dict(files), based_on=based_on,
            expected_version=expected_version,
        )  # fmt: skip
        return self.commit([command], strict=strict, actor=actor, message=message)

    def drafts(self, target: str | Scope) -> list[Draft]:
        """The drafts of a scope, or of every scope of an agent (by id or `agents/<id>`) or of
        a market (`markets/<id>`) that this store may read, by scope and name."""
        out: list[Draft] = []
        for scope in self.scopes_named(target):
            live: dict[str, Manifest] = self.entries(scope)
            for key, m in sorted(live.items()):
                ref = EntryRef.parse(key)
                legacy = ref.kind is EntryKind.LEGACY and ref.name == "_drafts"
                if m.deleted or not (ref.kind is EntryKind.DRAFT or legacy):
                    continue
                now = live.get(ref.name)
                now_v = now.version if now is not None and not now.deleted else 0
                if not legacy:
                    out.append(draft_of(scope, ref.name, m, now_v))
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
        command = Approve(
            scope=scope, name=name, rollout=rollout, into=into, expected_version=expected_version
        )
        return self.commit([command], strict=strict, actor=actor, message=message)

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
        command = Reject(scope=scope, name=name, expected_version=expected_version)
        return self.commit([command], actor=actor, message=check_message(reason))


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
