"""Side entries (docs/governance.md, "Drafts and review", "Archive"): a scope's drafts and
archived skills, each its own entry `_drafts/<name>` or `.archive/<name>` with its own
manifest, versions, findings and history, never in a worker's view and never listed as a
skill. `Store` takes archive / restore and the split of a legacy side manifest from
`SideEntries`; each is one commit (C1) that moves a whole file table
between two entries of one scope, so a worker sees it at its next step (C3)."""

from __future__ import annotations

from skillfs.errors import Conflict, FailedPrecondition
from skillfs.model import CommitResult, FileEntry, Manifest, Put, Remove, Scope
from skillfs.model.entry import ARCHIVE, DRAFTS, EntryRef
from skillfs.model.names import check_live_name
from skillfs.model.ops import Archive, Restore
from skillfs.store.governance import Governance
from skillfs.store.who import check_message


class SideEntries(Governance):
    """Archive and restore of `Store` (docs/governance.md, "Archive")."""

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
        command = Archive(
            scope=scope, skill=skill, replace=replace, expected_version=expected_version
        )
        return self.commit([command], actor=actor, message=check_message(reason))

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
        command = Restore(scope=scope, name=name, expected_version=expected_version)
        return self.commit([command], actor=actor, message=message)

    # ------------------------------------------------------------------ legacy manifests

    def split_legacy(self, scope: Scope, *, actor: str | None = None) -> CommitResult | None:
        """Split the single `_drafts` / `.archive` manifest an older skillfs wrote (its files
        `<name>/...`) into one entry per name, in one commit; None when there is none. An
        entry of a name already there is a Conflict: nothing is written."""
        legacy = self._retrying(self.engine.load_skills, scope, [DRAFTS, ARCHIVE])
        changes: list[Put | Remove] = []
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
            raise FailedPrecondition(
                f"{scope}/{m.skill}/{path} is not inside a skill directory: move or delete it, "
                "then split again"
            )
        out.setdefault(check_live_name(name), {})[rest] = e
    return out
