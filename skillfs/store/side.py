"""Side entries (docs/governance.md, "Drafts and review", "Archive"): a scope's drafts and
archived skills, each its own entry `_drafts/<name>` or `.archive/<name>` with its own
manifest, versions, findings and history, never in a worker's view and never listed as a
skill. `Store` takes archive / restore and the split of a legacy side manifest from
`SideEntries`; each is one commit of `Store._commit` (C1) that moves a whole file table
between two entries of one scope, so a worker sees it at its next step (C3)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from skillfs.errors import Conflict, InvalidPath, NotFound
from skillfs.model import CommitResult, FileEntry, Manifest, Put, Remove, Scope
from skillfs.model.names import (
    ARCHIVE,
    DRAFTS,
    SIDE_DIRS,
    archive_entry,
    check_entry,
    check_live_name,
    draft_entry,
    entry_name,
    in_side,
    side_entry,
)
from skillfs.store.commit import Edit, edited
from skillfs.store.governance import Governance, check_message
from skillfs.store.governance import carried as content_of

if TYPE_CHECKING:
    from collections.abc import Sequence


#: One edit of a side commit: (entry, edit, the version its caller expects).
Move = tuple[str, Edit, "int | None"]


class Carried:
    """The manifest one edit of a commit read, for the edit after it: the edits of one
    attempt run in order on manifests read together, and the commit compares the versions
    of both, so what is carried is what the commit replaces."""

    def __init__(self) -> None:
        self.manifest: Manifest | None = None

    def take(self, cur: Manifest, operation: str) -> dict[str, Any]:
        """Remember `cur` and tombstone its entry."""
        self.manifest = cur
        return {"deleted": True, "files": {}, "operation": operation}

    @property
    def taken(self) -> Manifest:
        assert self.manifest is not None  # the edit before ran first
        return self.manifest


class SideEntries(Governance):
    """Archive and restore of `Store` (docs/governance.md, "Archive"); a move is a governed
    commit (`Governance`)."""

    if TYPE_CHECKING:

        def check_commit(
            self, targets: Sequence[tuple[Scope, str]], domain: str | None = None
        ) -> str: ...

        def commit(
            self,
            changes: Sequence[Put | Remove],
            *,
            commit_id: str | None = None,
            strict: bool = False,
            actor: str | None = None,
            message: str = "",
        ) -> CommitResult: ...

        def no_draft(self, scope: Scope, name: str) -> str: ...

    def _moves(
        self,
        scope: Scope,
        moves: list[Move],
        *,
        actor: str | None,
        message: str,
        scopes: Sequence[Scope] | None = None,
        commit_id: str | None = None,
    ) -> CommitResult:
        """One commit of several edits of one scope (or of each move's scope in `scopes`,
        all of one agent: a draft approved into the shared scope), retried on races like
        any commit."""
        where = list(scopes) if scopes is not None else [scope] * len(moves)
        for each in where:
            each.check()
        domain = self.check_commit([(s, m[0]) for s, m in zip(where, moves, strict=True)])
        who, said = self.who(actor), check_message(message)
        prepared = [
            edited(each, check_entry(entry), edit, expected, who, said)
            for each, (entry, edit, expected) in zip(where, moves, strict=True)
        ]
        return self._commit(domain, prepared, commit_id or uuid.uuid4().hex)

    def archive(
        self,
        scope: Scope,
        skill: str,
        reason: str = "",
        *,
        expected_version: int | None = None,
        replace: bool = False,
        actor: str | None = None,
    ) -> CommitResult:
        """Move a live skill to `.archive/<skill>` in one commit: the archive entry gets its
        files (and findings, and its kill switch as it was), the live skill a tombstone, so
        it leaves every view at the next step. An archive of that name already there is a
        Conflict unless `replace` (its versions stay in the archive entry's history)."""
        entry = archive_entry(skill)
        reason = check_message(reason)
        carried = Carried()

        def take(cur: Manifest | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(f"skill {skill!r} does not exist in {scope}: nothing to archive")
            if cur.hides:
                raise InvalidPath(
                    f"{scope}/{skill} has no files (it hides a skill from below): "
                    "enable it instead of archiving it"
                )
            if not cur.files:
                raise InvalidPath(
                    f"{scope}/{skill} was only staged, never live: abort its candidate "
                    "instead of archiving it"
                )
            return carried.take(cur, "archive")

        def put(cur: Manifest | None) -> dict[str, Any]:
            if cur is not None and not replace:
                raise Conflict(
                    f"{scope}/{entry} already holds an archived {skill} (version "
                    f"{cur.version}); nothing was written: restore or delete it first, or "
                    "archive with replace=True (the CLI's --replace; its versions stay in the "
                    "entry's history)",
                    skill=entry,
                    current_version=cur.version,
                )
            return {**content_of(carried.taken), "operation": "archive"}

        return self._moves(
            scope,
            [(skill, take, expected_version), (entry, put, None)],
            actor=actor,
            message=reason or "archived",
        )

    def restore(
        self,
        scope: Scope,
        name: str,
        *,
        expected_version: int | None = None,
        actor: str | None = None,
        message: str = "",
    ) -> CommitResult:
        """Bring `.archive/<name>` back live as `name` in one commit (the archive entry gets
        a tombstone). A live skill of that name is a Conflict: nothing is written."""
        entry = archive_entry(name)
        carried = Carried()

        def take(cur: Manifest | None) -> dict[str, Any]:
            if cur is None:
                raise NotFound(self._no_archived(scope, name))
            return carried.take(cur, "restore")

        def put(cur: Manifest | None) -> dict[str, Any]:
            if cur is not None:
                what, fix = (
                    ("hides a skill from below", "enable it (which removes the entry)")
                    if cur.hides
                    else ("is live", "archive or delete it")
                )
                raise Conflict(
                    f"{scope}/{name} {what} (version {cur.version}): restoring would "
                    f"overwrite it; nothing was written: {fix} first",
                    skill=name,
                    current_version=cur.version,
                )
            return {**content_of(carried.taken), "operation": "restore"}

        return self._moves(
            scope,
            [(entry, take, expected_version), (name, put, None)],
            actor=actor,
            message=message or "restored",
        )

    def _no_skill(self, scope: Scope, skill: str) -> str:
        """Why `skill` is not found in `scope`, naming what is there: the skills, or for
        `_drafts/<name>` the drafts (`.archive/<name>`: the archived skills)."""
        side = side_entry(skill)
        if side is not None:
            where, name = side
            return self.no_draft(scope, name) if where == DRAFTS else self._no_archived(scope, name)
        names = self.skills(scope)
        listing = ", ".join(names[:50]) + (" …" if len(names) > 50 else "") if names else "none"
        return f"skill {skill!r} does not exist in {scope}; skills there: {listing}"

    def _no_archived(self, scope: Scope, name: str) -> str:
        return f"no archived skill {name!r} in {scope}; archived there: " + (
            ", ".join(self._side_names(scope, ARCHIVE)) or "none"
        )

    def _side_names(self, scope: Scope, where: str) -> list[str]:
        """The names of a scope's live entries under `where` (`_drafts`, `.archive`)."""
        live = self.entries(scope)
        return sorted(entry_name(k) for k, m in live.items() if in_side(k, where) and not m.deleted)

    # ------------------------------------------------------------------ legacy manifests

    def split_legacy(self, scope: Scope, *, actor: str | None = None) -> CommitResult | None:
        """Split the single `_drafts` / `.archive` manifest an older skillfs wrote (its files
        `<name>/...`) into one entry per name, in one commit; None when there is none. An
        entry of a name already there is a Conflict: nothing is written."""
        legacy = self._retrying(self.engine.load_skills, scope, list(SIDE_DIRS))
        changes: list[Put | Remove] = []
        for where, m in sorted(legacy.items()):
            if m.deleted:
                continue
            for name, files in split_files(scope, m).items():
                entry = draft_entry(name) if where == DRAFTS else archive_entry(name)
                changes.append(Put(scope, entry, dict(files), expected_version=0))
            changes.append(Remove(scope, where, expected_version=m.version))
        if not changes:
            return None
        puts = [c.skill for c in changes if isinstance(c, Put)]
        found = self._retrying(self.engine.load_skills, scope, puts)
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
        return self.commit(changes, actor=actor, message="split into one entry per skill")


def split_files(scope: Scope, m: Manifest) -> dict[str, dict[str, FileEntry]]:
    """A legacy side manifest's file table, by the skill name each file is under."""
    out: dict[str, dict[str, FileEntry]] = {}
    for path, e in m.files.items():
        name, slash, rest = path.partition("/")
        if not slash:
            raise InvalidPath(
                f"{scope}/{m.skill}/{path} is not inside a skill directory: move or delete it, "
                "then split again"
            )
        out.setdefault(check_live_name(name), {})[rest] = e
    return out
