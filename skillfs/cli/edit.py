"""Commands that change skills by hand: edit, rm, rollback, mv.

These are admin surfaces (docs/design.md §7): a result that breaks the Agent Skills spec is rejected
unless the operator passes --force. Every write names the version it read, so a concurrent
change is a Conflict, never a lost update. Each is one call of `store.edits` (the operations
every surface calls, docs/governance.md "Edits") with the operator's --message: the rules are
the store's, this module asks, calls and says what happened.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, cast

import typer

import skillfs.cli.common as common
from skillfs.api import Store
from skillfs.cli.common import (
    EDIT,
    FileArgument,
    ForceOption,
    JsonOption,
    MessageOption,
    ScopeOption,
    SkillArgument,
    StoreOption,
    Target,
    TokenOption,
    YesOption,
    check_write,
    command,
    confirmed,
    emit_json,
    fail,
    file_only,
    opened,
    out,
    parse_scope,
    plural,
    print_findings,
    print_patch,
    shown,
    skill_only,
    target_argument,
    version_option,
    when,
)
from skillfs.cli.editor import EditorCopy
from skillfs.cli.text import unified
from skillfs.errors import Conflict, EditConflict, InvalidArgument, InvalidSkill, SkillfsError
from skillfs.governance.edits import ConflictPolicy
from skillfs.model import CommitResult, File, Finding, Manifest, Scope, error_findings
from skillfs.model.names import check_live_name, entry_name
from skillfs.model.ops import WriteOptions
from skillfs.spec.profiles import Profiles
from skillfs.spec.skill_md import SKILL_MD, inspect_skill
from skillfs.spec.template import placeholder_findings, skill_template
from skillfs.util.text_merge import has_markers, merge3


class OnConflict(StrEnum):
    """What `edit` does when someone else saved the skill since it was read and changed the
    edited file too (`store.edits.edit_file` saves an edit of a file unchanged there by
    itself)."""

    ask = "ask"
    #: The store's merge policy: their change and yours merged and saved when they touch
    #: different lines; the editor reopens on the conflict markers otherwise.
    merge = "merge"
    reopen = "reopen"
    #: The store's retry policy: yours written over theirs.
    overwrite = "overwrite"
    #: The store's fail policy: nothing saved.
    abort = "abort"


def _read_files(store: Store, m: Manifest) -> dict[str, File]:
    """A version's files with their bytes, modes and mtimes, read in one batch."""
    data = store.read_entries(m.files.values())
    return {p: File(data[e.sha256], mode=e.mode, mtime=e.mtime) for p, e in m.files.items()}


@dataclass(frozen=True)
class _Base:
    """The skill as read: its version in the edited scope (0: absent) and its files.

    A user scope that does not have the skill but whose agent's shared scope does starts from
    the shared skill's files (`shared` is that manifest): saving then creates the user's
    override, copy on write, as the console and the fsspec filesystem do."""

    version: int
    manifest: Manifest | None
    files: dict[str, File]
    shared: Manifest | None = None

    @classmethod
    def load(cls, store: Store, scope: Scope, skill: str) -> _Base:
        found = store.resolve(scope, skill)
        if found is None:
            return cls(0, None, {})
        where, m = found
        if where == scope:
            return cls(m.version, m, _read_files(store, m))
        return cls(0, None, _read_files(store, m), m)

    def data(self, path: str) -> bytes | None:
        """A file's bytes as read (None: absent), the base of an edit of it."""
        f = self.files.get(path)
        return None if f is None else f.data

    def text(self, path: str) -> str:
        """A file as text ("" when absent); undecodable bytes survive a round trip."""
        f = self.files.get(path)
        return "" if f is None else f.data.decode("utf-8", errors="surrogateescape")


def _ask(question: str, choices: dict[str, str]) -> str:
    """A one-letter choice from a person; 'a' (abort) when nobody can answer."""
    if not common.interactive():
        return "a"
    hint = ", ".join(
        f"[{k}]{v[1:]}" if v.startswith(k) else f"{k}: {v}" for k, v in choices.items()
    )
    while True:
        answer = str(typer.prompt(f"{question} {hint}")).strip().lower()[:1]
        if answer in choices:
            return answer


def _check(skill: str, files: dict[str, File], profiles: Profiles) -> list[Finding]:
    """The findings under the scope's host `profiles`, as its commit makes them, plus the
    template's placeholder text still in SKILL.md (skillfs.spec.template): it would go live
    with it, so it counts as an error here (--force saves)."""
    # a draft's or an archived skill's SKILL.md names the skill it holds, as the store checks
    frontmatter, findings, _ = inspect_skill(
        entry_name(skill), {p: f.data for p, f in files.items()}, profiles
    )
    skill_md = files.get(SKILL_MD)
    text = skill_md.data.decode("utf-8", errors="replace") if skill_md else ""
    return [*placeholder_findings(frontmatter, text), *findings]


def _placeholders(errors: list[Finding]) -> str:
    """What of the template is left, for the refusal: "description", "text" or both."""
    rules = {f.rule for f in errors}
    kinds = [k for k in ("description", "text") if f"template-{k}" in rules]
    return " and ".join(kinds)


@contextmanager
def _refused(refused: str) -> Iterator[None]:
    """A strict write the store refused for breaking the spec (InvalidSkill): its findings
    printed, then `refused` (which says how to go ahead) as the error line."""
    try:
        yield
    except InvalidSkill as exc:
        print_findings(cast(list[Finding], exc.findings))
        raise fail(refused) from None


def _describe(scope: Scope, skill: str, path: str, base: _Base, latest: _Base) -> None:
    """Tell the operator what the concurrent change was."""
    label = f"version {base.version}"
    read = label
    if base.shared is not None:
        label = f"shared version {base.shared.version}"
        read = f"the {label} (no override yet)"
    if latest.manifest is None:
        out.print(f"[yellow]{scope}/{shown(skill)} was deleted since you read {read}[/yellow]")
        return
    m = latest.manifest
    out.print(
        f"[yellow]{scope}/{shown(skill)} changed since you read {read}: now "
        f"version {m.version}, saved {when(m.committed_at)} (commit {m.commit_id[:12]})[/yellow]"
    )
    paths = sorted(base.files.keys() | latest.files.keys())
    for p in paths:
        a, b = base.files.get(p), latest.files.get(p)
        what = "added" if a is None else "removed" if b is None else "modified"
        if a is None or b is None or (a.data, a.mode) != (b.data, b.mode):
            out.print(f"    {what:<9} {shown(p)}")
    if path in base.files and path in latest.files:
        before, after = base.text(path), latest.text(path)
        if before != after:
            out.print(f"their change to {shown(path)}:")
            print_patch(unified(before, after, label, f"version {m.version}"))


@command("edit", EDIT)
def edit(
    target: FileArgument,
    scope: ScopeOption,
    force: ForceOption = False,
    on_conflict: Annotated[
        OnConflict,
        typer.Option(
            metavar="ACTION",
            help="When someone saved the skill meanwhile and changed this file too: ask; merge "
            "their change and yours and save (the editor reopens on conflict markers when you "
            "both changed the same lines); reopen the editor on their version with your edit "
            "merged in; overwrite their version of this file with yours; or abort keeping your "
            "copy.",
        ),
    ] = OnConflict.ask,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
) -> None:
    """Edit one file of a skill in $EDITOR and save it with the version you read.

    A file or skill that does not exist yet is created (SKILL.md from a template). In a user's
    scope, a skill only the agent's shared scope has is copied into the user's scope with your
    edit, in one commit: the user's override."""
    path = file_only(target)
    skill = target.skill
    with opened(store_url, token, create=True) as store:
        check_write(store, scope)  # before anyone types: a server may refuse the save
        base = _Base.load(store, scope, skill)
        if path in base.files:
            try:
                base.files[path].data.decode("utf-8")
            except UnicodeDecodeError:
                raise fail(
                    f"{skill}/{path} is binary, not UTF-8 text: replace it with `skillfs import`"
                ) from None
        if base.shared is not None:
            out.print(
                f"creating {shown(scope.user_id or '')}'s override of "
                f"{Scope.shared(scope.agent_id or '')}/{shown(skill)} (shared version "
                f"{base.shared.version}): saving copies it into {scope} with your edit"
            )
        original = (
            base.files[path].data
            if path in base.files
            else skill_template(skill)
            if path == SKILL_MD and not base.files
            else b""
        )
        copy = EditorCopy(path, original)
        saved = False
        try:
            mine = copy.edit()
            if mine == original:
                out.print("no changes: nothing saved")
                return
            session = _Edit(store, scope, skill, path, copy, on_conflict, message)
            try:
                result = session.save(base, mine, force)
            except SkillfsError as exc:  # the store refused: the text must not be lost
                raise fail(f"{exc}; {copy.not_saved()}") from None
            except KeyboardInterrupt:
                raise fail(f"interrupted: {copy.not_saved()}", code=130) from None
            saved = True
        finally:
            if saved or not copy.unsaved():
                copy.remove()
    override = (
        f", {scope.user_id}'s override of shared version {base.shared.version}"
        if base.shared is not None
        else ""
    )
    out.print(
        f"[green]saved[/green] {scope}/{shown(skill)}/{shown(path)}: version "
        f"{result.version} (revision {result.revision}){shown(override)}"
    )


@dataclass
class _Edit:
    """One `skillfs edit` session's saves: each a `store.edits.edit_file` call under the
    conflict policy the operator chose, the editor reopened when they must resolve."""

    store: Store
    scope: Scope
    skill: str
    path: str
    copy: EditorCopy
    on_conflict: OnConflict
    message: str

    def save(self, base: _Base, mine: bytes, force: bool) -> CommitResult:
        """Validate `mine` and save it on `base` until it is saved or the operator gives up."""
        path, skill, kept = self.path, self.skill, self.copy.kept
        policy = (
            ConflictPolicy.MERGE if self.on_conflict is OnConflict.merge else ConflictPolicy.FAIL
        )
        while True:
            if has_markers(mine.decode("utf-8", errors="replace")):
                out.print("[red]the file still holds conflict markers (<<<<<<< … >>>>>>>)[/red]")
                if _ask("Resolve them?", {"e": "edit again", "a": "abort"}) == "a":
                    raise fail(f"not saved: resolve the conflict markers; {kept}")
                mine = self.copy.edit()
                continue
            choice = self._spec_check(base, mine, force)
            if choice == "e":
                mine = self.copy.edit()
                continue
            force = force or choice == "s"  # "save anyway" holds after a conflict too
            options = WriteOptions(expected_version=base.version, message=self.message)
            try:
                result = self.store.edits.edit_file(
                    self.scope, skill, path, mine, base=base.data(path), on_conflict=policy,
                    options=options, strict=not force,
                )  # fmt: skip
            except EditConflict as exc:  # merged, but both changed the same lines
                latest = _Base.load(self.store, self.scope, skill)
                _describe(self.scope, skill, path, base, latest)
                out.print("both changed the same lines: resolve the conflict markers")
                self.copy.write(exc.merged or b"")
                mine, base = self.copy.edit(), latest if latest.manifest else _Base(0, None, {})
                continue
            except Conflict:
                latest = _Base.load(self.store, self.scope, skill)
            else:
                if policy is not ConflictPolicy.RETRY:
                    self._moved_on(base, result, policy)
                return result
            _describe(self.scope, skill, path, base, latest)
            action = self._action(latest)
            if action is OnConflict.abort:
                raise fail(
                    f"not saved: {skill} changed since you read it; re-run with --on-conflict "
                    f"merge, reopen or overwrite; {kept}"
                )
            if action is OnConflict.overwrite:
                policy = ConflictPolicy.RETRY  # the store writes yours over theirs
                continue
            merged, clean = merge3(
                base.text(path),
                mine.decode("utf-8", errors="surrogateescape"),
                latest.text(path),
                f"version {latest.version}" if latest.manifest else "deleted",
            )
            out.print(
                "merged their change with yours"
                if clean
                else "both changed the same lines: resolve the conflict markers"
            )
            self.copy.write(merged.encode("utf-8", errors="surrogateescape"))
            mine, base = self.copy.edit(), latest if latest.manifest else _Base(0, None, {})

    def _spec_check(self, base: _Base, mine: bytes, force: bool) -> str:
        """The findings of the skill as saving would leave it, shown; with errors and no
        --force, what the operator chose: [e]dit again, [s]ave anyway ("": nothing to ask)."""
        old = base.files.get(self.path)
        files = dict(base.files)
        files[self.path] = File(mine, mode=old.mode if old else None)
        findings = _check(self.skill, files, self.store.host_profiles.of(self.scope))
        errors = error_findings(findings)
        if findings:
            warnings = len(findings) - len(errors)
            counts = [plural(n, w) for n, w in ((len(errors), "error"), (warnings, "warning")) if n]
            out.print(f"{shown(self.skill)}: {', '.join(counts)}")
            print_findings(findings)
        if not errors or force:
            return ""
        spec = [f for f in errors if not f.rule.startswith("template-")]
        problems = (
            [f"would break the Agent Skills spec ({plural(len(spec), 'error')})"] if spec else []
        )
        if len(spec) < len(errors):
            problems.append(f"still has the template's placeholder {_placeholders(errors)}")
        said = f"{self.skill} {' and '.join(problems)}"
        choice = _ask(f"{said}.", {"e": "edit again", "s": "save anyway", "a": "abort"})
        if choice == "a":
            raise fail(f"not saved: {said}; fix it or pass --force; {self.copy.kept}")
        return choice

    def _action(self, latest: _Base) -> OnConflict:
        """What to do about their change to the file: --on-conflict, or the operator's answer."""
        if self.on_conflict not in (OnConflict.ask, OnConflict.merge):
            return self.on_conflict
        question = (
            f"{self.path} changed there too."
            if latest.manifest
            else "It was deleted: saving makes it again with this file alone."
        )
        choice = _ask(
            question, {"r": "reopen with your edit", "o": "overwrite with yours", "a": "abort"}
        )
        return {"r": OnConflict.reopen, "o": OnConflict.overwrite, "a": OnConflict.abort}[choice]

    def _moved_on(self, base: _Base, result: CommitResult, policy: ConflictPolicy) -> None:
        """Say what the store did when the skill had moved on since `base` was read: the edit
        saved on top of their version (the file unchanged there), or merged with it."""
        before = result.version - 1
        if before == base.version:
            return
        try:
            m = self.store.manifest(self.scope, self.skill, version=before)
        except SkillfsError:  # not kept: the versions say enough
            m = None
        if m is not None:
            theirs = (
                _Base(0, None, {}) if m.deleted else _Base(m.version, m, _read_files(self.store, m))
            )
            _describe(self.scope, self.skill, self.path, base, theirs)
        if policy is ConflictPolicy.MERGE:
            out.print(f"merged their change to {shown(self.path)} with yours, on version {before}")
        else:
            out.print(
                f"{shown(self.path)} itself is unchanged there: your edit is saved on top of "
                f"version {before}"
            )


@command("rm", EDIT)
def rm(
    target: Annotated[
        Target,
        target_argument("SKILL[/PATH]", "A skill (deleted whole), or one file or directory of it."),
    ],
    scope: ScopeOption,
    version: Annotated[
        int | None,
        version_option("The version you mean to remove: a Conflict if the skill moved on since."),
    ] = None,
    yes: YesOption = False,
    force: ForceOption = False,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a skill (history keeps it: `rollback` brings it back), or one file or directory
    of a skill.

    Deleting a skill asks first (--yes does not ask; without a terminal, --yes is needed).
    Removing a file that leaves the skill off-spec needs --force."""
    with opened(store_url, token, create=True) as store:
        if target.path is None:
            m = store.manifest(scope, target.skill)
            confirmed(
                f"Delete {scope}/{target.skill} (version {m.version}, {len(m.files)} files)?",
                f"not deleted: {scope}/{target.skill}",
                yes,
            )
            seen = m.version if version is None else version  # what the question showed
            options = WriteOptions(expected_version=seen, message=message)
            result = store.edits.delete(scope, target.skill, options=options)
        else:
            options = WriteOptions(expected_version=version, message=message)
            with _refused(
                f"not removed: {target.skill} would break the Agent Skills spec; pass --force "
                "to remove it anyway"
            ):
                result = store.edits.remove_files(
                    scope, target.skill, [target.path], options=options, strict=not force
                )
    _report(f"removed {scope}/{shown(str(target))}", scope, target, result, as_json)


@command("rollback", EDIT)
def rollback(
    target: SkillArgument,
    scope: ScopeOption,
    to: Annotated[int, typer.Option("--to", min=1, metavar="N", help="The version to bring back.")],
    force: ForceOption = False,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Publish a new version whose files equal those of an older one (works after `rm` too).

    A version that breaks the Agent Skills spec is brought back only with --force. Without
    --message the version says "rollback to version N"."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        current = store.manifests(scope, [skill]).get(skill)
        options = WriteOptions(expected_version=current.version if current else 0, message=message)
        with _refused(
            f"not rolled back: version {to} of {skill} breaks the Agent Skills spec; "
            "pass --force to bring it back anyway"
        ):
            result = store.edits.rollback(scope, skill, to, options=options, strict=not force)
    said = f"rolled {scope}/{shown(target.skill)} back to version {to}"
    _report(said, scope, target, result, as_json)


def parse_new_name(text: str) -> str:
    """A name a skill can be live under (bad usage, exit 2, before anything is opened)."""
    try:
        return check_live_name(text)
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc)) from None


@command("mv", EDIT)
def mv(
    target: SkillArgument,
    new_name: Annotated[
        str,
        typer.Argument(
            parser=parse_new_name,
            metavar="NEW-NAME",
            show_default=False,
            help="The skill's new name.",
        ),
    ],
    scope: ScopeOption,
    into: Annotated[
        Scope | None,
        typer.Option(
            "--into",
            parser=parse_scope,
            metavar="SCOPE",
            show_default=False,
            help="Move it to this scope of the same agent (default: it stays in --scope).",
        ),
    ] = None,
    version: Annotated[
        int | None,
        version_option("The version you mean to rename: a Conflict if the skill moved on since."),
    ] = None,
    force: ForceOption = False,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rename a skill in one commit: SKILL.md's `name` follows, the new name starts its own
    history and the old name is deleted (its history kept: `rollback` brings it back).

    Refused, nothing written, when the new name is taken, and while the skill is disabled or
    has a staged candidate. A result that breaks the Agent Skills spec needs --force."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        options = WriteOptions(expected_version=version, message=message)
        with _refused(
            f"not renamed: {new_name} would break the Agent Skills spec; pass --force to "
            "rename it anyway"
        ):
            result = store.edits.rename(
                scope, skill, new_name, into=into, options=options, strict=not force
            )
    where = into or scope
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "skill": skill,
                "into": str(where),
                "new_name": new_name,
                "version": result.versions[new_name],
                "revision": str(result.revision),
                "commit_id": result.commit_id,
            }
        )
        return
    out.print(
        f"renamed {scope}/{shown(skill)} to {where}/{shown(new_name)}: now version "
        f"{result.versions[new_name]} (revision {result.revision})"
    )


def _report(
    message: str, scope: Scope, target: Target, result: CommitResult, as_json: bool
) -> None:
    """What a write did: `message` with the new version and revision, or JSON for scripts."""
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "skill": target.skill,
                "path": target.path,
                "version": result.version,
                "revision": str(result.revision),
                "commit_id": result.commit_id,
            }
        )
    else:
        out.print(f"{message}: now version {result.version} (revision {result.revision})")
