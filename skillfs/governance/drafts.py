"""`store.drafts` (docs/governance.md, "Drafts and review"): a proposed skill is the entry
`_drafts/<name>` of its scope, written through the publish path (validated, findings
recorded), listed for review, then approved (its files become the live skill and the draft
is removed, in one commit) or rejected (the draft removed, the reason in its history)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from skillfs.errors import Conflict, FailedPrecondition
from skillfs.governance.audit import scopes_named
from skillfs.governance.ports import Commits, Reads
from skillfs.model import CommitResult, FileEntry, Finding, Manifest, Put, Remove, Rollout, Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.names import ARCHIVE, DRAFTS, check_live_name
from skillfs.model.ops import DEFAULT, Approve, FileValue, Propose, Reject, WriteOptions
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


class Drafts:
    """propose / list / approve / reject, and the split of an older skillfs's single side
    manifests."""

    def __init__(self, reads: Reads, commits: Commits) -> None:
        self._reads = reads
        self._commits = commits

    def propose(
        self,
        scope: Scope,
        name: str,
        files: Mapping[str, FileValue],
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
        based_on: int | None = None,
    ) -> CommitResult:
        """Write the draft `_drafts/<name>` (a new one, or its next version:
        `options.expected_version` is the draft's) through the publish path: checked and
        validated like a publish, its findings recorded, and the live skill's version it is
        proposed against kept in it: the live version now, or `based_on` for files built on
        an older one (an edit of the pending draft passes the draft's own base, so that a
        live edit made since still shows it stale)."""
        command = Propose(
            scope=scope, name=name, files=dict(files), based_on=based_on,
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([command], options=options, strict=strict)

    def list(self, target: str | Scope) -> builtins.list[Draft]:
        """The drafts of a scope, or of every scope of an agent (by id or `agents/<id>`) or of
        a market (`markets/<id>`) that this store may read, by scope and name."""
        out: builtins.list[Draft] = []
        for scope in scopes_named(self._reads, target):
            live: dict[str, Manifest] = self._reads.entries(scope)
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
        options: WriteOptions = DEFAULT,
        strict: bool = False,
        rollout: Rollout | None = None,
        into: Scope | None = None,
    ) -> CommitResult:
        """Make the draft's files the live skill `name` and remove the draft, in one commit.
        Refused (Conflict, nothing written) when the live skill moved since the draft was
        proposed; `options.expected_version` is the draft's version the reviewer saw;
        `strict` refuses a draft with error findings.

        With `rollout`, the draft becomes the skill's staged candidate for the workers the
        rule names instead (the live version stays for everyone else; `store.rollouts` widens,
        promotes or aborts it from there), in the same one commit. `into` is another
        scope of the same agent the skill goes to, e.g. an agent's draft in a user's scope
        approved into the agent's shared scope; the draft's base is its own scope's, so it
        is not compared there (a rollout leaves the live version there untouched)."""
        command = Approve(
            scope=scope, name=name, rollout=rollout, into=into,
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([command], options=options, strict=strict)

    def reject(
        self, scope: Scope, name: str, reason: str = "", *, options: WriteOptions = DEFAULT
    ) -> CommitResult:
        """Remove the draft; the reason is the commit's message (unless `options.message`
        gives another), kept in its history and in the audit (as `reject`)."""
        command = Reject(scope=scope, name=name, expected_version=options.expected_version)
        return self._commits.commit([command], options=options.or_message(check_message(reason)))

    # ------------------------------------------------------------------ legacy manifests

    def split_legacy(self, scope: Scope, *, options: WriteOptions = DEFAULT) -> CommitResult | None:
        """Split the single `_drafts` / `.archive` manifest an older skillfs wrote (its files
        `<name>/...`) into one entry per name, drafts and archived skills alike, in one
        commit (`options.message`, default "split into one entry per skill"); None when
        there is none. An entry of a name already there is a Conflict: nothing is written."""
        legacy = self._reads.retrying(self._reads.engine.load_skills, scope, [DRAFTS, ARCHIVE])
        changes: builtins.list[Put | Remove] = []
        for where, m in sorted(legacy.items()):
            if m.deleted:
                continue
            for name, files in split_files(scope, m).items():
                ref = EntryRef.draft(name) if where == DRAFTS else EntryRef.archived(name)
                changes.append(Put(scope, ref.key, dict(files), expected_version=0))
            changes.append(Remove(scope, where, expected_version=m.version))
        if not changes:
            return None
        puts = [c.skill for c in changes if isinstance(c, Put)]
        found = self._reads.retrying(self._reads.engine.load_skills, scope, puts)
        there = {k: m for k, m in found.items() if m is not None and not m.deleted}
        if there:  # written by a newer skillfs meanwhile: the split would overwrite it
            first = min(there)
            raise Conflict(
                f"{scope}/{first} already exists beside the legacy manifest it would be split "
                f"from; nothing was written: approve, reject, restore or delete {first} first, "
                "then split again",
                skill=first,
                current_version=there[first].version,
            )
        said = options.or_message("split into one entry per skill")
        return self._commits.commit(changes, options=said)


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
            "into one entry per draft (store.drafts.split_legacy, `skillfs drafts split`) to "
            "review it"
        ),
    )


def split_files(scope: Scope, m: Manifest) -> dict[str, dict[str, FileEntry]]:
    """A legacy side manifest's file table, by the skill name each file is under."""
    out: dict[str, dict[str, FileEntry]] = {}
    for path, e in m.files.items():
        name, slash, rest = path.partition("/")
        if not slash:
            raise FailedPrecondition(
                f"{scope}/{m.skill}/{path} is not inside a skill directory: move or delete it, "
                "then split again"
            )
        out.setdefault(check_live_name(name), {})[rest] = e
    return out
