"""How each command of a commit becomes the next versions of the entries it writes
(docs/architecture.md, "The Committer"): which entries it writes, what each becomes from what
the attempt read, and when it does not apply (the error says what to do first). A plan is
run again on every attempt of its commit, on what that attempt read, so a retried commit
never writes over a concurrent one and a move always copies its source as committed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from skillfs.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    LiveEditAfterStage,
    NotFound,
)
from skillfs.model import Candidate, Manifest, Origin, Rollout, Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.import_mark import ImportMark, check_source, files_digest
from skillfs.model.ops import (
    Abort,
    Approve,
    Archive,
    Command,
    Copy,
    Disable,
    Enable,
    Move,
    Operation,
    Promote,
    Propose,
    Put,
    Reject,
    Remove,
    RemoveLabel,
    RequireReview,
    Restore,
    SetLabel,
    SetProfiles,
    Stage,
    Widen,
)
from skillfs.model.pins import LATEST, MAX_LABELS, check_label
from skillfs.store import rules, scope_profiles
from skillfs.store.steps import Attempt, Plan, Prepared, Step


def plan(command: Command) -> Plan:
    """What `command` writes."""
    return _PLANS[type(command)](command)


# ---------------------------------------------------------------------------- files


def _put(c: Put) -> Plan:
    ref = EntryRef.parse(c.skill)
    if ref.kind is EntryKind.DRAFT:  # a draft written as a Put keeps the base it is proposed on
        return _draft(c, c.scope, ref.name, None, c.expected_version)

    def make(a: Attempt) -> Manifest:
        p = a.prepared(c)
        cur = a.live(c.scope, c.skill)
        origin = c.origin if c.origin is not None else cur.origin if cur is not None else None
        base = cur if cur is not None else Manifest.empty(c.skill)
        m = base.with_files(p.files, p.frontmatter, p.findings, p.typed, origin)
        if c.import_source is None:
            return m
        mark = ImportMark(source=check_source(c.import_source), digest=files_digest(p.files))
        return m.model_copy(update={"imported": mark})

    return Plan([Step(c.scope, c.skill, c.expected_version, make, payload=c)], [])


def _remove(c: Remove) -> Plan:
    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.skill)
        if cur is None:
            raise NotFound(f"skill {c.skill!r} does not exist in {c.scope}: nothing to delete")
        return cur.tombstone()

    return Plan([Step(c.scope, c.skill, c.expected_version, make, removes=True)], [])


def _propose(c: Propose) -> Plan:
    return _draft(c, c.scope, c.name, c.based_on, c.expected_version)


def _draft(
    c: Put | Propose, scope: Scope, name: str, based_on: int | None, expected: int | None
) -> Plan:
    """The draft `_drafts/<name>` of `c`'s files, recording the live skill's version it is
    proposed against (read with the commit: a live skill that moves meanwhile makes the draft
    look stale, never fresh), or `based_on` for files built on an older one."""
    entry = EntryRef.draft(name).key

    def make(a: Attempt) -> Manifest:
        p = a.prepared(c)
        live = a.live(scope, name)
        base = based_on if based_on is not None else live.version if live else 0
        draft = Manifest.empty(entry).with_files(p.files, p.frontmatter, p.findings, p.typed)
        return draft.with_base(base)

    return Plan([Step(scope, entry, expected, make, payload=c)], [(scope, name)])


# ---------------------------------------------------------------------------- the kill switch


def _only_skills(skill: str, what: str) -> None:
    """A draft or an archived entry is not served: switching one would carry the switch to
    where it is approved or restored."""
    if not EntryRef.parse(skill).is_skill:
        raise InvalidArgument(f"{skill!r} is not a skill: only skills can be {what}")


def _disable(c: Disable) -> Plan:
    _only_skills(c.skill, "disabled")

    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.skill)
        if cur is None and not a.held_below(c.scope, c.skill):
            raise a.missing(c.scope, c.skill, below=c.scope.kind == "user")
        if cur is not None and cur.disabled:
            raise FailedPrecondition(f"{c.scope}/{c.skill} is already disabled: enable it first")
        return (cur or Manifest.empty(c.skill)).with_disabled(c.reason)

    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], c.reason or "disabled")


def _enable(c: Enable) -> Plan:
    _only_skills(c.skill, "enabled")

    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.skill)
        if cur is None:
            raise a.missing(c.scope, c.skill)
        if not cur.disabled and cur.origin is None:
            raise FailedPrecondition(f"{c.scope}/{c.skill} is not disabled: nothing to enable")
        if cur.hides:  # a hole: enabling removes it (recorded as an enable, not a delete)
            return cur.tombstone().did(Operation.ENABLE)
        return cur.enabled().did(Operation.ENABLE if not cur.disabled else "")

    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], "enabled")


# ---------------------------------------------------------------------------- staged rollout


def candidate(
    p: Prepared | Manifest, rule: Rollout, commit_id: str, actor: str, at: float
) -> Candidate:
    """A candidate of checked files (a staged Put's, or an approved draft's)."""
    return Candidate(
        files=p.files,
        frontmatter=p.frontmatter,
        findings=tuple(p.findings),
        typed=p.typed,
        rollout=rule,
        commit_id=commit_id,
        actor=actor,
        staged_at=at,
    )


def _stage(c: Stage) -> Plan:
    if not EntryRef.parse(c.skill).is_skill:
        raise InvalidArgument(f"{c.skill!r} is not a skill: only skills can be staged")
    if not c.files:
        raise InvalidArgument(f"staging {c.scope}/{c.skill} needs its files (SKILL.md at least)")

    def make(a: Attempt) -> Manifest:
        staged = candidate(a.prepared(c), c.rollout, a.commit_id, a.actor, a.now)
        cur = a.live(c.scope, c.skill)
        return (cur or Manifest.empty(c.skill)).with_candidate(staged).did(Operation.STAGE)

    message = f"staged for {c.rollout.describe()}"
    return Plan([Step(c.scope, c.skill, c.expected_version, make, payload=c)], [], message)


def _staged(a: Attempt, scope: Scope, skill: str, what: str) -> tuple[Manifest, Candidate]:
    """The live entry and its candidate that step `what` (widen, promote, abort) acts on."""
    cur = a.live(scope, skill)
    if cur is None:
        raise a.missing(scope, skill)
    if cur.candidate is None:
        raise FailedPrecondition(
            f"{scope}/{skill} has no staged candidate to {what} (version {cur.version} is "
            "live for everyone): stage one first"
        )
    return cur, cur.candidate


def _widen(c: Widen) -> Plan:
    def make(a: Attempt) -> Manifest:
        cur, staged = _staged(a, c.scope, c.skill, "widen")
        if not staged.rollout.known:
            raise FailedPrecondition(
                f"{c.scope}/{c.skill} is staged for {staged.rollout.describe()}: widen it with "
                "a release that knows its format, or abort and stage again"
            )
        dropped = staged.rollout.dropped_by(c.rollout)
        if dropped:
            raise FailedPrecondition(
                f"widening {c.scope}/{c.skill} must keep everyone already in, but the new rule "
                f"drops {dropped}: list them again, or abort and stage again to narrow"
            )
        if c.rollout == staged.rollout:
            raise FailedPrecondition(
                f"{c.scope}/{c.skill} is already staged for {c.rollout.describe()}: nothing to "
                "widen"
            )
        widened = staged.model_copy(update={"rollout": c.rollout})
        return cur.with_candidate(widened).did(Operation.WIDEN)

    message = f"widened to {c.rollout.describe()}"
    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], message)


def _promote(c: Promote) -> Plan:
    """Refused, unless `anyway`, when a live save landed after the candidate was staged:
    promoting would replace that edit's files with the candidate's, which never held it
    (docs/governance.md, "Promote guards a later live edit")."""

    def make(a: Attempt) -> Manifest:
        cur, staged = _staged(a, c.scope, c.skill, "promote")
        edit = staged.live_edit
        if edit is not None and not c.anyway:
            raise LiveEditAfterStage(
                f"{c.scope}/{c.skill}: live version {edit.version} was saved by "
                f"{edit.actor or 'an unnamed actor'} at {_when(edit.at)}, after the candidate "
                f"was staged by {staged.actor or 'an unnamed actor'} at {_when(staged.staged_at)}"
                ": promoting would replace that edit with the candidate's files, which never "
                "held it; nothing was written. Stage the candidate again on top of the live "
                "version, or promote anyway to drop the live edit (`skillfs promote "
                "--anyway`, the console's Promote anyway, `promote(..., anyway=True)`)"
            )
        a.refuse_errors(c.skill, staged.findings)
        return cur.promoted().did(Operation.PROMOTE)

    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], "promoted the candidate")


def _when(at: float) -> str:
    """A commit's time as an operator reads it in a message (UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _abort(c: Abort) -> Plan:
    """A skill that was only staged (never live) is deleted, so nobody sees it, also when it
    was disabled since; in a user's scope a disabled entry without files stays: it is how a
    user hides a skill."""

    def make(a: Attempt) -> Manifest:
        cur, _ = _staged(a, c.scope, c.skill, "abort")
        if not cur.files and not (cur.disabled and c.scope.kind == "user"):  # staged only
            return cur.tombstone().did(Operation.ABORT)
        return cur.with_candidate(None).did(Operation.ABORT)

    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], "aborted the candidate")


# ---------------------------------------------------------------------------- labels


def _set_label(c: SetLabel) -> Plan:
    """The label names the kept version asked for (the live one when none is): its files,
    frontmatter and findings copied into the live manifest, so a pinned worker needs no read
    of history (docs/governance.md, "Labels and pins")."""
    _only_skills(c.skill, "labelled")
    label = check_label(c.label, settable=True)

    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.skill)
        if cur is None:
            raise a.missing(c.scope, c.skill)
        version = cur.version if c.version is None else c.version
        if version > cur.version or version < 1:
            raise NotFound(
                f"{c.scope}/{c.skill} has no version {version} (the live one is "
                f"{cur.version}): label a version it holds"
            )
        target = cur if version == cur.version else a.kept(c.scope, c.skill, version)
        if target is None:
            raise NotFound(
                f"version {version} of {c.scope}/{c.skill} is no longer kept (history "
                "retention dropped it): label a version `skillfs history` lists"
            )
        if target.deleted or not target.files:
            what = "a deletion" if target.deleted else "staged only, with no live files"
            raise FailedPrecondition(
                f"version {version} of {c.scope}/{c.skill} is {what}: a label names a version "
                "with files; pick another version"
            )
        held = cur.labels.get(label)
        if held is not None and held.version == version:
            raise FailedPrecondition(
                f"{label} already names version {version} of {c.scope}/{c.skill}: nothing to move"
            )
        if held is None and len(cur.labels) >= MAX_LABELS:
            raise FailedPrecondition(
                f"{c.scope}/{c.skill} carries {len(cur.labels)} labels, the most one skill "
                f"may (MAX_LABELS): remove one first"
            )
        labels = {**cur.labels, label: target.labelled(a.actor, a.now)}
        return cur.with_labels(labels).did(Operation.LABEL)

    moved = f"version {c.version}" if c.version is not None else "the live version"
    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], f"set {label} to {moved}")


def _remove_label(c: RemoveLabel) -> Plan:
    label = check_label(c.label, settable=True)

    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.skill)
        if cur is None:
            raise a.missing(c.scope, c.skill)
        if label not in cur.labels:
            held = ", ".join(sorted(cur.labels)) or "none"
            raise NotFound(
                f"{c.scope}/{c.skill} carries no label {label!r} (its labels: {held}; "
                f"{LATEST!r} is the head, never removed)"
            )
        labels = {k: v for k, v in cur.labels.items() if k != label}
        return cur.with_labels(labels).did(Operation.UNLABEL)

    return Plan([Step(c.scope, c.skill, c.expected_version, make)], [], f"removed {label}")


# ---------------------------------------------------------------------------- side entries


def _approve(c: Approve) -> Plan:
    entry = EntryRef.draft(c.name).key
    target = c.into if c.into is not None else c.scope

    def take(a: Attempt) -> Manifest:
        draft = a.live(c.scope, entry)
        if draft is None:
            raise a.missing(c.scope, entry)
        a.refuse_errors(c.name, draft.findings)
        return draft.tombstone().did(Operation.APPROVE)

    def put(a: Attempt) -> Manifest:
        draft = a.live(c.scope, entry)
        assert draft is not None  # `take` found it
        cur = a.live(target, c.name)
        if target == c.scope:
            _check_base(c.scope, c.name, draft, cur)
        if c.rollout is not None:
            if cur is not None and cur.candidate is not None:
                raise Conflict(
                    f"{target}/{c.name} already has a staged candidate (for "
                    f"{cur.candidate.rollout.describe()}); nothing was written: promote or "
                    "abort it first, then approve the draft",
                    skill=c.name,
                    current_version=cur.version,
                )
            staged = candidate(draft, c.rollout, a.commit_id, a.actor, a.now)
            return (cur or Manifest.empty(c.name)).with_candidate(staged).did(Operation.APPROVE)
        base = cur if cur is not None else Manifest.empty(c.name)
        return base.with_files(draft.files, draft.frontmatter, draft.findings, draft.typed).did(
            Operation.APPROVE
        )

    canary = f" as a canary for {c.rollout.describe()}" if c.rollout is not None else ""
    steps = [Step(c.scope, entry, c.expected_version, take), Step(target, c.name, None, put)]
    return Plan(steps, [], f"approved{canary}")


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


def _reject(c: Reject) -> Plan:
    entry = EntryRef.draft(c.name).key

    def make(a: Attempt) -> Manifest:
        draft = a.live(c.scope, entry)
        if draft is None:
            raise a.missing(c.scope, entry)
        return draft.tombstone().did(Operation.REJECT)

    return Plan([Step(c.scope, entry, c.expected_version, make)], [], "rejected")


def _archive(c: Archive) -> Plan:
    entry = EntryRef.archived(c.skill).key

    def take(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.skill)
        if cur is None:
            raise NotFound(f"skill {c.skill!r} does not exist in {c.scope}: nothing to archive")
        if cur.hides:
            raise FailedPrecondition(
                f"{c.scope}/{c.skill} has no files (it hides a skill from below): enable it "
                "instead of archiving it"
            )
        if not cur.files:
            raise FailedPrecondition(
                f"{c.scope}/{c.skill} was only staged, never live: abort its candidate instead "
                "of archiving it"
            )
        return cur.tombstone().did(Operation.ARCHIVE)

    def put(a: Attempt) -> Manifest:
        held = a.live(c.scope, entry)
        if held is not None and not c.replace:
            raise Conflict(
                f"{c.scope}/{entry} already holds an archived {c.skill} (version {held.version}); "
                "nothing was written: restore or delete it first, or archive with replace=True "
                "(the CLI's --replace; its versions stay in the entry's history)",
                skill=entry,
                current_version=held.version,
            )
        source = a.live(c.scope, c.skill)
        assert source is not None  # `take` found it
        return source.moved_to(entry).did(Operation.ARCHIVE)

    steps = [Step(c.scope, c.skill, c.expected_version, take), Step(c.scope, entry, None, put)]
    return Plan(steps, [], "archived")


def _restore(c: Restore) -> Plan:
    entry = EntryRef.archived(c.name).key

    def take(a: Attempt) -> Manifest:
        held = a.live(c.scope, entry)
        if held is None:
            raise a.missing(c.scope, entry)
        return held.tombstone().did(Operation.RESTORE)

    def put(a: Attempt) -> Manifest:
        cur = a.live(c.scope, c.name)
        if cur is not None:
            what, fix = (
                ("hides a skill from below", "enable it (which removes the entry)")
                if cur.hides
                else ("is live", "archive or delete it")
            )
            raise Conflict(
                f"{c.scope}/{c.name} {what} (version {cur.version}): restoring would overwrite "
                f"it; nothing was written: {fix} first",
                skill=c.name,
                current_version=cur.version,
            )
        held = a.live(c.scope, entry)
        assert held is not None  # `take` found it
        return held.moved_to(c.name).did(Operation.RESTORE)

    steps = [Step(c.scope, entry, c.expected_version, take), Step(c.scope, c.name, None, put)]
    return Plan(steps, [], "restored")


def _move(c: Move) -> Plan:
    """The target is written from the source as this attempt read it, never from files read
    before: a conflict (the source edited, or moved by another writer) runs it again."""
    target = c.into if c.into is not None else c.scope
    if (target, c.target) == (c.scope, c.source):
        raise InvalidArgument(f"{c.scope}/{c.source} is already named {c.target!r}")

    def put(a: Attempt) -> Manifest:
        held = a.live(target, c.target)
        if held is not None:  # said as what it is, not as a version the caller expected
            what = "a user's entry hiding a skill from below" if held.hides else "a skill"
            raise Conflict(
                f"{target}/{c.target} already holds {what} (version {held.version}): renaming "
                f"{c.scope}/{c.source} onto it would overwrite it; nothing was written: pick "
                f"another name, or delete, archive or rename {c.target} first",
                skill=c.target,
                current_version=held.version,
            )
        source = a.live(c.scope, c.source)
        if source is None:
            raise a.missing(c.scope, c.source)
        moved = a.renamed(target, c.target, dict(source.files), c.source)
        a.refuse_errors(c.target, moved.findings)
        return Manifest.empty(c.target).with_files(
            moved.files, moved.frontmatter, moved.findings, moved.typed, source.origin
        )

    def take(a: Attempt) -> Manifest:
        source = a.live(c.scope, c.source)
        if source is None:
            raise a.missing(c.scope, c.source)
        return source.tombstone()

    steps = [  # the target's absence is checked by `put`, as read in this attempt
        Step(target, c.target, None, put),
        Step(c.scope, c.source, c.expected_version, take),
    ]
    return Plan(steps, [], f"renamed {c.source} to {c.target}")


def _copy(c: Copy) -> Plan:
    """The copy is made from the source as this attempt read it; the source's version is
    compared with the commit (the kill switch's origin check), so a source edited or
    switched off meanwhile makes the commit read again."""
    if c.into.domain != c.scope.domain or c.into == c.scope:
        raise InvalidArgument(
            f"a copy of {c.scope}/{c.skill} goes to another scope of its agent, not {c.into}"
        )

    def make(a: Attempt) -> Manifest:
        source = a.live(c.scope, c.skill)
        if source is None or not source.files:
            raise a.missing(c.scope, c.skill)
        rules.check_expected(c.scope, c.skill, c.expected_version, source)
        a.refuse_errors(c.skill, source.findings)
        origin = Origin(scope=str(c.scope), skill=c.skill, version=source.version)
        return Manifest.empty(c.skill).with_files(
            dict(source.files), source.frontmatter, source.findings, source.typed, origin
        )

    message = f"copied from {c.scope}"
    return Plan([Step(c.into, c.skill, 0, make)], [(c.scope, c.skill)], message)


# ---------------------------------------------------------------------------- settings


def _require_review(c: RequireReview) -> Plan:
    """The scope's `_settings/review` entry: live (no files) while the rule holds, a
    tombstone once lifted, each change a version the audit lists."""
    entry = EntryRef.setting("review").key

    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, entry)
        if c.required and cur is not None:
            raise FailedPrecondition(
                f"{c.scope} already requires review (since version {cur.version}, by "
                f"{cur.actor or 'an unknown actor'}): nothing to change"
            )
        if c.required:
            return Manifest.empty(entry).did(Operation.REQUIRE_REVIEW)
        if cur is None:
            raise FailedPrecondition(f"{c.scope} does not require review: nothing to lift")
        return cur.tombstone().did(Operation.LIFT_REVIEW)

    said = "review required: live writes go through an approved draft"
    message = said if c.required else "review no longer required"
    return Plan([Step(c.scope, entry, c.expected_version, make)], [], message)


_PLANS: dict[type, Callable[[Any], Plan]] = {
    Put: _put,
    Remove: _remove,
    Propose: _propose,
    Disable: _disable,
    Enable: _enable,
    Stage: _stage,
    Widen: _widen,
    Promote: _promote,
    Abort: _abort,
    SetLabel: _set_label,
    RemoveLabel: _remove_label,
    Approve: _approve,
    Reject: _reject,
    Archive: _archive,
    Restore: _restore,
    Move: _move,
    Copy: _copy,
    RequireReview: _require_review,
    SetProfiles: scope_profiles.plan,
}
