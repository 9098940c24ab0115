"""`store.edits` (docs/governance.md, "Edits"): the operations every surface calls to change
skills — rename, an override for a user, an edit of one file under a conflict policy, files
removed, an import under a policy, delete, rollback. Each takes one `WriteOptions` (actor, message,
expected version, commit id) and ends in the store's Committer, which holds it to every
rule. None replays files read earlier: a rename and a copy read their source in the commit's
own attempt, and an edit that meets another writer reads the skill again and decides by its
policy."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from skillfs.errors import Conflict, EditConflict, FailedPrecondition, InvalidArgument, NotFound
from skillfs.governance.ports import Commits, Reads
from skillfs.model import CommitResult, File, FileEntry, Manifest, Origin, Put, Remove, Scope
from skillfs.model.import_mark import check_source
from skillfs.model.names import normalize_path
from skillfs.model.ops import DEFAULT, Command, Copy, FileValue, Move, WriteOptions
from skillfs.store.blobs import sha256
from skillfs.store.limits import default_mode
from skillfs.util.backoff import pause
from skillfs.util.deadline import deadline
from skillfs.util.text_merge import merge3


class ConflictPolicy(StrEnum):
    """What an edit of one file does when the skill moved on since the editor read it and
    that file changed there too (other files' changes are always kept, and a file unchanged
    there takes the edit whatever the policy)."""

    #: Merge the file three ways (the editor's base, the edit, theirs); when both changed
    #: the same lines, nothing is written and `EditConflict.merged` holds the markers.
    MERGE = "merge"
    #: Write the edit over their version of the file.
    RETRY = "retry"
    #: Nothing is written: a `Conflict`.
    FAIL = "fail"


class ImportPolicy(StrEnum):
    """What an import does with a skill the scope holds with other files that an import of
    the same source did not leave as it is now: someone changed it since, or it never came
    from this source (docs/cli.md, "Import sources"). A skill this source wrote and nobody
    changed since is updated, and one holding the same files is never written again."""

    #: Write nothing at all, naming each such skill with who wrote its version.
    UPDATE = "update"
    #: Keep them as they are (`kept`) and write the rest.
    KEEP = "keep"
    #: Write over them too (their versions stay in history).
    REPLACE = "replace"


@dataclass(frozen=True)
class Imported:
    """One skill of an import: `created`, `updated`, `unchanged` (the same files: not
    written), `kept` (changed by someone else, kept under the `keep` policy) or `refused`
    (the same, under `update`: the import writes nothing); its version after the import
    (before it, for a dry run; None: not in the scope) and who wrote the version held."""

    skill: str
    status: str
    version: int | None
    actor: str = ""


@dataclass
class ImportResult:
    source: str
    dry_run: bool = False
    skills: list[Imported] = field(default_factory=list)
    commits: list[CommitResult] = field(default_factory=list)

    @property
    def refused(self) -> list[Imported]:
        return [i for i in self.skills if i.status == "refused"]

    def refusal(self, scope: Scope) -> FailedPrecondition | None:
        """The error an import that refuses skills ends with, naming each (None: none)."""
        refused = self.refused
        if not refused:
            return None
        named = "; ".join(
            f"{i.skill} (version {i.version} by {i.actor or 'an unknown actor'})"
            for i in refused[:20]
        )
        more = f" and {len(refused) - 20} more" if len(refused) > 20 else ""
        return FailedPrecondition(
            f"the import from {self.source} would overwrite {len(refused)} skill(s) of {scope} "
            f"that it did not write as they are now (changed since, or from another source): "
            f"{named}{more}; nothing was written: look at their history, then import with the "
            "replace policy to overwrite them, or the keep policy to leave them and import the "
            "rest"
        )


class Edits:
    """rename, override, edit_file, remove_files, import_skills, delete, rollback."""

    def __init__(self, reads: Reads, commits: Commits) -> None:
        self._reads = reads
        self._commits = commits

    def rename(
        self,
        scope: Scope,
        skill: str,
        new_name: str,
        *,
        into: Scope | None = None,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """`skill` becomes `new_name` (in `into`, another scope of its agent, when given) in
        one commit; SKILL.md's `name` follows when it named the skill. The source is read
        in the commit's attempt: an edit landing first is carried, a second rename of the
        same skill finds nothing to rename. `options.expected_version` is the source's."""
        move = Move(
            scope=scope, source=skill, target=new_name, into=into,
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([move], options=options, strict=strict)

    def override(
        self, user: Scope, skill: str, *, options: WriteOptions = DEFAULT, strict: bool = False
    ) -> CommitResult:
        """A user's own copy of the agent's shared skill (copy on write by an operator): its
        files by reference, its origin recorded, so the shared skill's kill switch still
        holds for it. `options.expected_version` is the shared version copied."""
        if user.kind != "user" or user.agent_id is None:
            raise InvalidArgument(
                f"an override is made in a user's scope, not {user}: give "
                "Scope.user(agent, user) of the agent whose shared skill it copies"
            )
        copy = Copy(
            scope=Scope.shared(user.agent_id), skill=skill, into=user,
            expected_version=options.expected_version,
        )  # fmt: skip
        return self._commits.commit([copy], options=options, strict=strict)

    def edit_file(
        self,
        scope: Scope,
        skill: str,
        path: str,
        data: bytes | None,
        *,
        base: bytes | None,
        on_conflict: ConflictPolicy = ConflictPolicy.FAIL,
        mode: int | None = None,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """One file of `skill` as `scope` sees it set to `data` (None: removed), the other
        files kept by reference. A skill only the agent's shared scope holds is copied into
        the user's scope with the edit (its origin recorded). `base` is the file as the
        editor read it (None: absent) and `options.expected_version` the skill's version in
        `scope` then (0: none there; None: whatever is there now, last writer wins). When
        the skill moved on, `on_conflict` decides, as often as another writer gets in
        between, until the store's retry time is spent."""
        path = normalize_path(path)
        end, attempt = deadline(self._reads.retry_for), 0
        while True:
            found = self._reads.resolve(scope, skill)
            held = found[1] if found is not None else None
            own = held if found is not None and found[0] == scope else None
            version = own.version if own is not None else 0
            wanted = options.expected_version
            write = data
            if wanted is not None and version != wanted:
                write = self._decide(scope, skill, path, held, version, base, data, on_conflict)
            files: dict[str, FileValue] = dict(held.files) if held is not None else {}
            old = held.files.get(path) if held is not None else None
            files.pop(path, None)
            if write is not None:
                kept = mode if mode is not None else old.mode if old is not None else None
                files[path] = File(write, mode=kept)
            origin = None
            if held is not None and own is None and found is not None:
                origin = Origin(scope=str(found[0]), skill=skill, version=held.version)
            command: Command = Remove(scope, skill, version)
            if files:
                command = Put(scope, skill, files, version, origin)
            try:
                return self._commits.commit([command], options=options, strict=strict)
            except Conflict:
                if time.monotonic() > end:
                    raise
                pause(attempt)
                attempt += 1

    def remove_files(
        self,
        scope: Scope,
        skill: str,
        paths: Sequence[str],
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """Files of `skill` in `scope` removed in one commit, the others kept by reference:
        each path a file, or a directory (every file below it); one that names neither is a
        NotFound listing the files. `options.expected_version` is the skill's version the
        caller read (None: the version there now, read again when another writer gets in
        first, until the store's retry time is spent)."""
        wanted = [normalize_path(p) for p in paths]
        end, attempt = deadline(self._reads.retry_for), 0
        while True:
            held = self._reads.manifest(scope, skill)
            gone: set[str] = set()
            for path in wanted:
                below = {p for p in held.files if p == path or p.startswith(path + "/")}
                if not below:
                    raise NotFound(
                        f"{scope}/{skill} (version {held.version}) has no file or directory "
                        f"{path!r}; files: {', '.join(sorted(held.files))}"
                    )
                gone |= below
            kept = {p: e for p, e in held.files.items() if p not in gone}
            version = options.expected_version
            put = Put(scope, skill, kept, held.version if version is None else version)
            try:
                return self._commits.commit([put], options=options, strict=strict)
            except Conflict:
                if version is not None or time.monotonic() > end:
                    raise
                pause(attempt)
                attempt += 1

    def _decide(
        self,
        scope: Scope,
        skill: str,
        path: str,
        held: Manifest | None,
        version: int,
        base: bytes | None,
        mine: bytes | None,
        policy: ConflictPolicy,
    ) -> bytes | None:
        """What the edit writes over a skill that moved on since the editor read it."""
        entry = held.files.get(path) if held is not None else None
        theirs = self._reads.read_entry(entry) if entry is not None else None
        if theirs == base or policy is ConflictPolicy.RETRY:
            return mine
        where = f"{scope}/{skill}/{path}"
        now = f"version {version}" if version else "deleted"
        if policy is ConflictPolicy.FAIL:
            raise Conflict(
                f"{where} changed since you read it (now {now}): reload it and edit again, "
                "or save with the merge or retry policy",
                skill=skill,
                current_version=version,
            )
        texts = [_text(b) for b in (base, mine, theirs)]
        if any(t is None for t in texts):
            raise Conflict(
                f"{where} changed since you read it (now {now}) and is not text, so it cannot "
                "be merged: reload it, or save with the retry policy to write yours over it",
                skill=skill,
                current_version=version,
            )
        b, m, t = (x or "" for x in texts)
        merged, clean = merge3(b, m, t, now)
        if not clean:
            raise EditConflict(
                f"{where}: you and another writer ({now}) changed the same lines: resolve the "
                "conflict markers in the merged text and save it on that version",
                skill=skill,
                current_version=version,
                merged=merged.encode("utf-8", errors="surrogateescape"),
            )
        return merged.encode("utf-8", errors="surrogateescape")

    def import_skills(
        self,
        scope: Scope,
        skills: Mapping[str, Mapping[str, FileValue]],
        *,
        source: str,
        policy: ImportPolicy = ImportPolicy.UPDATE,
        dry_run: bool = False,
        batch: int | None = None,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> ImportResult:
        """Whole skills from `source` (docs/cli.md, "Import sources") into `scope`, `batch`
        skills per commit (default: the store's limit per atomic commit, else 100); each
        version written records the source and its files' digest. A skill held with other
        files is updated when an import of `source` wrote it and nobody changed it since;
        any other is handled by `policy`. `dry_run` decides and writes nothing (files may be
        `FileEntry` rows then: only their digests and modes count). Each skill is written
        against the version read when the import began: one another writer changes
        meanwhile is a Conflict, not reverted. Batches committed before a failure stay (run
        the same import again to finish: what it wrote is unchanged then)."""
        check_source(source)
        current = self._reads.manifests(scope, list(skills))
        result = ImportResult(source, dry_run)
        puts: list[Put] = []
        for name, files in skills.items():
            held = current.get(name)
            status = _import_status(files, held, source, policy)
            if status in ("created", "updated") and not dry_run:
                expected = held.version if held is not None else 0
                puts.append(Put(scope, name, files, expected, import_source=source))
                continue
            version, actor = (held.version, held.actor) if held is not None else (None, "")
            result.skills.append(Imported(name, status, version, actor))
        refusal = result.refusal(scope)
        if dry_run or refusal is not None:
            if refusal is not None and not dry_run:
                raise refusal
            return result
        size = batch or self._reads.max_ops or 100
        for i in range(0, len(puts), size):
            chunk = puts[i : i + size]
            done = self._commits.commit(chunk, options=options, strict=strict)
            result.commits.append(done)
            for put in chunk:
                status = "updated" if put.expected_version else "created"
                result.skills.append(Imported(put.skill, status, done.versions[put.skill]))
        return result

    def delete(self, scope: Scope, skill: str, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """Delete a skill (its history keeps it: `rollback` brings it back)."""
        return self._commits.commit(
            [Remove(scope, skill, options.expected_version)], options=options
        )

    def rollback(
        self,
        scope: Scope,
        skill: str,
        version: int,
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult:
        """A new version whose files are those of `version` (also after a delete)."""
        return self._commits.rollback(scope, skill, version, options=options, strict=strict)


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _text(data: bytes | None) -> str | None:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _import_status(
    files: Mapping[str, FileValue], held: Manifest | None, source: str, policy: ImportPolicy
) -> str:
    """What an import of `source` does with one skill (`Imported.status`)."""
    if held is None:
        return "created"
    if _same(files, held):
        return "unchanged"
    mark = held.imported
    if policy is ImportPolicy.REPLACE or (mark is not None and mark.wrote(source, held.files)):
        return "updated"
    return "kept" if policy is ImportPolicy.KEEP else "refused"


def _same(files: Mapping[str, FileValue], held: Manifest) -> bool:
    """Whether `files` are the skill's files now: the same paths, bytes and modes (a file
    without a mode gets the store's default for it, as a write would; mtimes aside)."""
    if set(files) != set(held.files):
        return False
    for path, value in files.items():
        entry = held.files[path]
        if isinstance(value, FileEntry):
            row = (value.sha256, value.mode)
        else:
            f = value if isinstance(value, File) else File(_bytes(value))
            row = (sha256(f.data), f.mode if f.mode is not None else default_mode(path, f.data))
        if row != (entry.sha256, entry.mode):
            return False
    return True
