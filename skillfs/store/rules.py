"""The rules every commit keeps, decided once (docs/architecture.md, "Rules at the commit"):
pure functions over what the commit writes and what its entries were, run by the store's
Committer before the atomic step, and by a skillfs server on every `Commit` a `grpc://`
client sends (the client runs them only to fail early). Who wrote the commit, and with which
store, does not change them."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from skillfs.engines.base import CommitOp
from skillfs.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    InvalidPath,
    InvalidSkill,
    NotFound,
    ReviewRequired,
    TooLarge,
)
from skillfs.model import FileEntry, Finding, LiveEdit, Manifest, Rollout, Scope, error_findings
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.names import check_new_name, check_new_path, entry_name, name_key
from skillfs.model.pins import MAX_LABELS, check_label
from skillfs.store import name_register, scope_profiles

#: What a commit read of its entries: (scope, entry) -> the manifest as it was (a tombstone
#: included), absent when there was none.
Current = Mapping[tuple[Scope, str], Manifest]
#: For each scope where a commit creates an entry, the live entries before it whose name is
#: or looks like a created one's (`Committer.names`; the others change nothing); a scope
#: left out is not checked here (a `grpc://` client leaves that to the server, which reads
#: them itself).
Names = Mapping[Scope, Collection[str]]


def live(m: Manifest | None) -> Manifest | None:
    return m if m is not None and not m.deleted else None


def check_shape(
    targets: Sequence[tuple[Scope, str]], domain: str | None, max_ops: int | None
) -> str:
    """At least one entry, each once, all in one domain (`domain` when given), no more than
    the engine commits atomically (`max_ops`). Returns the domain."""
    if not targets:
        raise InvalidArgument("empty commit: give at least one Put or Remove")
    domain = domain or targets[0][0].domain
    seen: set[tuple[Scope, str]] = set()
    for scope, entry in targets:
        scope.check()  # a Scope built with model_construct skips its own check
        if scope.domain != domain:
            raise InvalidArgument(
                f"one commit spans one agent or one market: {scope} is not in {domain}"
            )
        EntryRef.parse(entry)
        if (scope, entry) in seen:
            raise InvalidArgument(f"{scope}/{entry} appears twice in one commit")
        seen.add((scope, entry))
    if max_ops is not None and len(targets) > max_ops:
        raise TooLarge(
            f"a commit of {len(targets)} skills is over this store's limit of "
            f"{max_ops} per atomic commit: split it into several commits"
        )
    return domain


def check_expected(scope: Scope, entry: str, expected: int | None, cur: Manifest | None) -> None:
    """C6: a write naming the version it edited fails when another writer got there first
    (0: the entry must not exist, or be deleted)."""
    if expected is None:
        return
    version = cur.version if cur is not None else 0
    live_now = live(cur) is not None
    ok = (not live_now) if expected == 0 else (live_now and expected == version)
    if not ok:
        now_is = f"now at version {version}" if live_now else "it does not exist now"
        wanted = "to not exist yet" if expected == 0 else f"version {expected}"
        raise Conflict(
            f"{scope}/{entry} changed since you read it: you expected {wanted}, {now_is}; "
            "reload it and apply your edit again",
            skill=entry,
            current_version=version if live_now else 0,
        )


def check_moves(ops: Sequence[CommitOp], current: Current) -> None:
    """A commit that removes a skill and writes another is what a rename or a move is (the
    console's Rename, fsspec's `mv`, onto a new name or over an existing one, its SKILL.md
    perhaps edited on the way). The other skill does not carry the removed one's kill switch
    or staged candidate, so the commit is refused while the removed skill has either: a move
    must not serve what an operator switched off, nor drop a rollout. What the files are
    decides nothing (a move may change any of them), so such a skill is removed on its own."""
    if not any(not op.manifest.deleted and op.manifest.files for op in ops):
        return
    for op in ops:
        m = op.manifest
        if not m.deleted or m.operation:  # not a plain removal (an archive moves it whole)
            continue
        cur = live(current.get((op.scope, m.skill)))
        if cur is None:
            continue
        if cur.disabled:
            raise FailedPrecondition(
                f"{op.scope}/{m.skill} is disabled ({cur.disabled_reason or 'no reason given'}):"
                " removing it in a commit that writes another skill could serve what was "
                "switched off under another name; enable it first, or delete it on its own"
            )
        if cur.candidate is not None:
            raise FailedPrecondition(
                f"{op.scope}/{m.skill} has a staged candidate: promote or abort it before "
                "renaming or moving the skill (the new name would not carry the rollout), or "
                "delete it on its own"
            )
        if cur.labels:
            raise FailedPrecondition(
                f"{op.scope}/{m.skill} carries the labels {', '.join(sorted(cur.labels))}: "
                "remove them before renaming or moving the skill (workers pinned to them "
                "would jump to the new name's head), or delete it on its own"
            )


def check_not_empty(ops: Sequence[CommitOp]) -> None:
    """A live version holds at least one file (or a staged candidate's): an empty file set
    is not a skill, and a deletion is a tombstone (a set without SKILL.md is storable,
    docs/design.md §1). A disabled marker holds none: a user's hiding of a skill below."""
    for op in ops:
        m = op.manifest
        setting = EntryRef.parse(m.skill).kind is EntryKind.SETTING
        if not m.deleted and not m.files and m.candidate is None and not m.disabled and not setting:
            raise InvalidArgument(
                f"{op.scope}/{m.skill}: a skill needs at least one file; to delete it, delete it"
            )


def check_added_paths(ops: Sequence[CommitOp], current: Current) -> None:
    """A path a version adds — held neither by its entry now nor by an entry the commit
    removes (a move's source) — must be one `check_new_path` allows, whether its bytes are
    new or a stored file copied or moved there (fsspec's `cp` and `mv`): a file stored before
    that rule is carried by edits and moves, never written at a new path."""

    def paths(m: Manifest | None) -> set[str]:
        if m is None:
            return set()
        return set(m.files) | set(m.candidate.files if m.candidate is not None else ())

    moved = set().union(
        *(paths(current.get((op.scope, op.manifest.skill))) for op in ops if op.manifest.deleted)
    )
    for op in ops:
        for path in paths(op.manifest) - paths(current.get((op.scope, op.manifest.skill))) - moved:
            check_new_path(path)


def created(ops: Sequence[CommitOp], current: Current) -> list[CommitOp]:
    """The writes that make an entry live where none was (a skill, a draft or an archived
    skill): only these take a name, so only these are held to the name rules."""
    return [
        op
        for op in ops
        if serves(op.manifest) and live(current.get((op.scope, op.manifest.skill))) is None
    ]


def check_new_names(ops: Sequence[CommitOp], current: Current, names: Names) -> None:
    """An identity rule, like the path rule (docs/security.md, "Look-alike names"): an entry
    made live under a name its scope does not hold yet takes a name `check_new_name` allows,
    whose case-folded confusable skeleton (`name_key`) is no other live entry's in the scope
    nor another entry's this commit makes. A name the scope already holds (a draft of a
    skill, an archive, an approval, a move of a twin stored before this rule) is not new, nor
    is an older skillfs's single `_drafts` or `.archive` entry (`split_legacy`), and
    entries the commit removes do not count (renaming `pdf` to `PDF` is allowed). Names are
    never rewritten: refused, with the twin named."""
    made: dict[Scope, list[str]] = {}
    for op in created(ops, current):
        held = names.get(op.scope)
        if held is None:
            continue
        ref = EntryRef.parse(op.manifest.skill)
        name = ref.name
        if ref.kind is EntryKind.LEGACY or name in {entry_name(entry) for entry in held}:
            continue
        check_new_name(name)
        removed = {o.manifest.skill for o in ops if o.scope == op.scope and o.manifest.deleted}
        others = [(entry_name(e), f"already in {op.scope}") for e in held if e not in removed]
        others += [(n, f"written to {op.scope} by the same commit") for n in made.get(op.scope, [])]
        key = name_key(name)
        twin = next(((n, where) for n, where in others if n != name and name_key(n) == key), None)
        if twin is not None:
            raise InvalidPath(
                f"invalid skill name {name!r}: it looks like {twin[0]!r}, {twin[1]} (the same "
                "once case, look-alike letters and Unicode forms are set aside, per Unicode "
                f"TR39), so readers could not tell them apart; nothing was written: edit "
                f"{twin[0]!r} itself, or pick a name that reads differently"
            )
        made.setdefault(op.scope, []).append(name)


def check_rollouts(ops: Sequence[CommitOp]) -> None:
    """A staged candidate's rule is a valid one, and in a user's scope, which that user alone
    sees, it names no other user."""
    for op in ops:
        c = op.manifest.candidate
        if c is not None:
            check_rule(op.scope, c.rollout)


def check_labels(ops: Sequence[CommitOp]) -> None:
    """A version's labels (docs/governance.md, "Labels and pins") are settable names, at most
    MAX_LABELS of them, each naming an earlier version that held files."""
    for op in ops:
        m = op.manifest
        if len(m.labels) > MAX_LABELS:
            raise FailedPrecondition(
                f"{op.scope}/{m.skill} would carry {len(m.labels)} labels: at most {MAX_LABELS}"
            )
        for name, held in m.labels.items():
            check_label(name, settable=True)
            if not 1 <= held.version < m.version or not held.files:
                raise InvalidArgument(
                    f"{op.scope}/{m.skill}: label {name!r} names version {held.version}, which "
                    f"is not an earlier version with files of version {m.version}"
                )


def check_rule(scope: Scope, rollout: Rollout) -> Rollout:
    if not isinstance(rollout, Rollout):
        raise InvalidArgument(
            f"a rollout is a skillfs.Rollout(environments=[...], users=[...], fraction=..., "
            f"match='any' | 'all', excluded_users=[...]), not {type(rollout).__name__}"
        )
    rollout.check()
    named = {*rollout.users, *rollout.excluded_users}
    others = sorted(named - {scope.user_id}) if scope.kind == "user" else []
    if others:
        raise InvalidArgument(
            f"{scope} is seen by user {scope.user_id!r} alone: a rollout there cannot name "
            f"{', '.join(others)} (stage in the shared scope to reach other users)"
        )
    return rollout


def track_live(cur: Manifest | None, m: Manifest) -> Manifest:
    """A candidate's record of the live files beside it (docs/governance.md, "Promote guards
    a later live edit"): one this commit stages notes the live version it is staged beside;
    one kept while the commit changes the live files notes that live save (its version,
    actor and time), which promote refuses unless asked to promote anyway. `m` is the next
    version as committed (stamped)."""
    c = m.candidate
    if c is None:
        return m
    was = live(cur)
    if c.commit_id == m.commit_id:  # staged by this commit (a stage, an approval as canary)
        on = was.version if was is not None and was.files else 0
        return replace(m, candidate=replace(c, staged_on=on, live_edit=None))
    held = was.candidate if was is not None else None
    if held is None or held.commit_id != c.commit_id:
        return m
    if was is not None and rows(m.files) == rows(was.files):  # a file's time alone is no edit
        return m
    edit = LiveEdit(version=m.version, actor=m.actor, at=m.committed_at)
    return replace(m, candidate=replace(c, live_edit=edit))


# ---------------------------------------------------------------------------- the kill switch


def serves(m: Manifest) -> bool:
    """Whether a version holds something a worker could be served (files, or a candidate)."""
    return not m.deleted and (bool(m.files) or m.candidate is not None)


def guarded(
    ops: Sequence[CommitOp], current: Current, markets: Sequence[str] = ()
) -> list[tuple[Scope, str]]:
    """The lower-layer entries the kill switch reads for this commit, for every write that
    serves a skill in a user's scope: a copy's origin; for a skill new there, the skill of
    its name in the agent's shared scope and in each market. The engine compares those of
    the commit's domain with it atomically (a market is another domain: read only)."""
    out: list[tuple[Scope, str]] = []
    for op, mine in _user_writes(ops, current):
        m = op.manifest
        if m.origin is not None:
            out.append((Scope.parse(m.origin.scope), m.origin.skill))
        if mine is None:
            assert op.scope.agent_id is not None
            out.append((Scope.shared(op.scope.agent_id), m.skill))
            out.extend((Scope.market(market), m.skill) for market in markets)
    return list(dict.fromkeys(out))


def check_kill_switch(
    ops: Sequence[CommitOp], current: Current, markets: Sequence[str] = ()
) -> None:
    """A user-scope write can never bring back a skill an operator disabled below it
    (docs/governance.md, "Disable"): a new skill under a name the agent's shared scope or a
    market has switched off, and a copy whose origin is switched off, are refused; so is a
    new copy of an origin deleted since it was read. (`current` holds the entries `guarded`
    names; a copy made before the disable is hidden when the view is built.)"""
    for op, mine in _user_writes(ops, current):
        m = op.manifest
        assert op.scope.agent_id is not None
        below = [Scope.shared(op.scope.agent_id), *(Scope.market(x) for x in markets)]
        for layer in below if mine is None else ():
            held = live(current.get((layer, m.skill)))
            if held is not None and held.disabled:
                raise FailedPrecondition(_off(m.skill, held, str(layer)))
        if m.origin is None:
            continue
        origin = live(current.get((Scope.parse(m.origin.scope), m.origin.skill)))
        if origin is not None and origin.disabled:
            raise FailedPrecondition(_off(m.skill, origin, m.origin.scope))
        if origin is None and mine is None:
            raise NotFound(
                f"skill {m.skill!r} was deleted from {m.origin.scope} since it was read: a "
                "copy of it cannot be made; nothing was written (read it again)"
            )


def reads_markets(ops: Sequence[CommitOp], current: Current) -> bool:
    """Whether the commit makes a skill new in a user's scope: only then does the kill
    switch read the markets."""
    return any(mine is None for _, mine in _user_writes(ops, current))


def _user_writes(
    ops: Sequence[CommitOp], current: Current
) -> list[tuple[CommitOp, Manifest | None]]:
    """The writes that serve a skill in a user's scope, with the entry each replaces."""
    return [
        (op, live(current.get((op.scope, op.manifest.skill))))
        for op in ops
        if op.scope.kind == "user"
        and op.scope.agent_id is not None
        and serves(op.manifest)
        and EntryRef.parse(op.manifest.skill).is_skill
    ]


def _off(skill: str, below: Manifest, where: str) -> str:
    why = f" ({below.disabled_reason})" if below.disabled_reason else ""
    return (
        f"skill {skill!r} is disabled in {where} by an operator{why}: a user's skill cannot "
        "bring it back under that name; nothing was written (propose it for review, ask an "
        "operator to enable it, or use another name)"
    )


# ---------------------------------------------------------------------------- two persons

#: The entry of a scope's two-person rule: live while the scope requires review.
REVIEW = EntryRef.setting("review").key


def goes_live(m: Manifest, before: Manifest | None) -> bool:
    """Whether version `m` serves files that the version before it (None: none) did not: a
    new file set, or a new staged candidate. A promote serves the candidate already staged, a
    widen the same candidate to more workers; a disable, an enable, an abort, a delete or an
    archive serve nothing new."""
    if m.deleted:
        return False
    held = rows(before.files) if before is not None else []
    staged = rows(before.candidate.files) if before and before.candidate else None
    files = rows(m.files)
    if files and files != held and files != staged:
        return True
    return m.candidate is not None and rows(m.candidate.files) != staged


def held_to_review(ops: Sequence[CommitOp], current: Current) -> list[CommitOp]:
    """The ops the two-person rule looks at: skills whose version serves new files. The
    Committer compares the rule's entry of their scopes with the commit (`_checks`) and
    `check_review` decides by it: one choice for both."""
    return [
        op
        for op in ops
        if EntryRef.parse(op.manifest.skill).is_skill
        and goes_live(op.manifest, live(current.get((op.scope, op.manifest.skill))))
    ]


def check_review(ops: Sequence[CommitOp], current: Current) -> None:
    """The two-person rule (docs/governance.md): in a scope whose `_settings/review` entry is
    live, a write that serves new files to workers (`goes_live`) is refused unless it is the
    approval, in the same commit, of a draft holding exactly those files and written by
    another actor than the approver's. Drafts, disable, enable, abort, delete and archive are
    not held to it. `current` holds the rule's entries (the Committer reads them with the
    commit's)."""
    for op in held_to_review(ops, current):
        rule = live(current.get((op.scope, REVIEW)))
        m = op.manifest
        if rule is None:
            continue
        draft = _approved(op, ops, current)
        by = rule.actor or "an operator"
        if draft is None:
            raise ReviewRequired(
                f"{op.scope} requires review (the two-person rule, turned on by {by}): "
                f"{m.skill} cannot be changed live directly; nothing was written: propose the "
                "change as a draft (store.drafts.propose, the console's review, `skillfs edit` "
                f"of _drafts/{m.skill}/FILE, fsspec under skills/_drafts/{m.skill}/), and "
                "another person approves it"
            )
        if draft.actor == m.actor:
            raise ReviewRequired(
                f"{op.scope} requires review (the two-person rule, turned on by {by}): "
                f"{m.actor!r} wrote the draft of {m.skill} (version {draft.version}) and cannot "
                "approve it too; nothing was written: another person approves it, with a token "
                "of their own"
            )


def _approved(op: CommitOp, ops: Sequence[CommitOp], current: Current) -> Manifest | None:
    """The draft whose approval `op` is: the commit removes it as an approval, and `op`
    serves exactly its files (live, or as the staged candidate)."""
    m = op.manifest
    if m.operation != "approve":
        return None
    entry = EntryRef.draft(m.skill).key
    for other in ops:
        o = other.manifest
        if o.skill != entry or not o.deleted or o.operation != "approve":
            continue
        draft = live(current.get((other.scope, entry)))
        served = m.candidate.files if m.candidate is not None else m.files
        if draft is not None and rows(served) == rows(draft.files):
            return draft
    return None


def rows(files: Mapping[str, FileEntry]) -> list[tuple[str, str, int]]:
    """A file table as what its files are (path, bytes, mode): two tables that differ only
    in file times hold the same files."""
    return sorted((path, e.sha256, e.mode) for path, e in files.items())


def check_settings(ops: Sequence[CommitOp]) -> None:
    """A setting's entry (`_settings/<name>`) holds no files, candidate or kill switch: it is
    on while live, and changed only by its own command; the profiles setting names known
    profiles (`scope_profiles.check_setting`); the name register is the store's own
    (`name_register.check_not_written`)."""
    name_register.check_not_written(ops)
    for op in ops:
        m = op.manifest
        if EntryRef.parse(m.skill).kind is EntryKind.SETTING and (
            m.files or m.candidate is not None or m.disabled
        ):
            raise InvalidArgument(
                f"{op.scope}/{m.skill} is a setting of the scope, not a skill: it holds no "
                "files; change it with its own command (`skillfs review-rule`, `skillfs "
                "profiles`)"
            )
        scope_profiles.check_setting(op)


# ---------------------------------------------------------------------------- what is written


def storable(scope: Scope, manifest: Manifest) -> Manifest:
    """The manifest, once it is known to read back as written: one that could not would
    break its skill for every reader (the checks before this name the usual causes)."""
    try:
        back = Manifest.model_validate_json(manifest.model_dump_json())
    except (ValidationError, PydanticSerializationError) as exc:
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        problem = errors[0]["msg"] if errors else str(exc)
        raise InvalidSkill(
            f"{scope}/{manifest.skill} cannot be stored readably ({problem}); "
            "nothing was written: fix the frontmatter or file attributes it names"
        ) from None
    if back != manifest:
        raise InvalidSkill(
            f"{scope}/{manifest.skill} would not read back as written (a value JSON cannot "
            "hold exactly); nothing was written: fix its frontmatter or file attributes"
        )
    return manifest


def refuse_errors(skill: str, findings: Sequence[Finding]) -> None:
    """The strict surfaces' rule (docs/design.md §7): a skill with error findings is refused,
    with the findings, unless the caller forces it (and so does not call this)."""
    errors = error_findings(findings)
    if errors:
        raise InvalidSkill(
            f"{skill} breaks the Agent Skills spec: "
            + "; ".join(e.message for e in errors)
            + " (fix it, or force the write to store it with these findings)",
            list(errors),
        )


def check_ops(
    ops: Sequence[CommitOp],
    current: Current,
    markets: Sequence[str] = (),
    names: Names | None = None,
) -> None:
    """Every rule over what a commit writes (its shape and versions checked before);
    `current` holds its entries and those `guarded` names, `names` the live entries of the
    scopes where it creates one."""
    check_moves(ops, current)
    check_not_empty(ops)
    check_added_paths(ops, current)
    check_new_names(ops, current, names or {})
    check_rollouts(ops)
    check_labels(ops)
    check_kill_switch(ops, current, markets)
    check_settings(ops)
    check_review(ops, current)
