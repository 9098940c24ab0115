"""Commands that change skills by hand: edit, rm, rollback.

These are admin surfaces (docs/design.md §7): a result that breaks the Agent Skills spec is rejected
unless the operator passes --force. Every write names the version it read, so a concurrent
change is a Conflict, never a lost update.
"""

from __future__ import annotations

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
from skillfs.errors import Conflict, InvalidSkill, NotFound, SkillfsError
from skillfs.model import CommitResult, File, Finding, Manifest, Scope, error_findings
from skillfs.model.names import entry_name
from skillfs.spec.skill_md import SKILL_MD, TEMPLATE_DESCRIPTION, inspect_skill, skill_template
from skillfs.store.core import file_of
from skillfs.store.rules import refuse_errors
from skillfs.util.text_merge import has_markers, merge3


class OnConflict(StrEnum):
    """What `edit` does when someone else saved the skill since it was read."""

    ask = "ask"
    reopen = "reopen"
    overwrite = "overwrite"
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

    @staticmethod
    def skill_md_only(store: Store, m: Manifest) -> dict[str, File]:
        """A version's files for a spec check: SKILL.md's bytes, the other files empty (the
        check looks only at SKILL.md and the paths)."""
        files = {p: File(b"") for p in m.files}
        if SKILL_MD in m.files:
            files[SKILL_MD] = File(store.read_entry(m.files[SKILL_MD]))
        return files

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


def _check(skill: str, files: dict[str, File]) -> list[Finding]:
    """The spec findings, plus one the CLI adds: a SKILL.md whose description is still the
    template's placeholder would go live with it, so it counts as an error (--force saves)."""
    # a draft's or an archived skill's SKILL.md names the skill it holds, as the store checks
    frontmatter, findings = inspect_skill(entry_name(skill), {p: f.data for p, f in files.items()})
    if (frontmatter or {}).get("description") == TEMPLATE_DESCRIPTION:
        findings = [
            Finding(
                severity="error",
                field="description",
                rule="template-description",
                message=f"description is still the template's placeholder "
                f"({TEMPLATE_DESCRIPTION!r}): say what the skill does and when to use it",
            ),
            *findings,
        ]
    return findings


def _refuse(skill: str, files: dict[str, File], refused: str) -> None:
    """The strict surfaces' rule (`refuse_errors`) on the CLI's findings: print the errors and
    fail with `refused` when there are any."""
    try:
        refuse_errors(skill, _check(skill, files))
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
            help="When someone saved the skill meanwhile: ask; reopen the editor on their "
            "version with your edit merged in; overwrite their version of this file with "
            "yours; or abort keeping your copy.",
        ),
    ] = OnConflict.ask,
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
            try:
                result = _save_loop(store, scope, skill, path, base, mine, copy, force, on_conflict)
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


def _save_loop(
    store: Store,
    scope: Scope,
    skill: str,
    path: str,
    base: _Base,
    mine: bytes,
    copy: EditorCopy,
    force: bool,
    on_conflict: OnConflict,
) -> CommitResult:
    """Validate and publish `mine` on `base` until it is saved or the operator gives up."""
    kept = copy.kept
    while True:
        if has_markers(mine.decode("utf-8", errors="replace")):
            out.print("[red]the file still holds conflict markers (<<<<<<< … >>>>>>>)[/red]")
            if _ask("Resolve them?", {"e": "edit again", "a": "abort"}) == "a":
                raise fail(f"not saved: resolve the conflict markers; {kept}")
            mine = copy.edit()
            continue
        old = base.files.get(path)
        files = dict(base.files)
        files[path] = File(mine, mode=old.mode if old else None)
        findings = _check(skill, files)
        errors = error_findings(findings)
        if findings:
            warnings = len(findings) - len(errors)
            counts = [plural(n, w) for n, w in ((len(errors), "error"), (warnings, "warning")) if n]
            out.print(f"{shown(skill)}: {', '.join(counts)}")
            print_findings(findings)
        if errors and not force:
            spec = [f for f in errors if f.rule != "template-description"]
            problems = (
                [f"would break the Agent Skills spec ({plural(len(spec), 'error')})"]
                if spec
                else []
            )
            if len(spec) < len(errors):
                problems.append("still has the template's placeholder description")
            choice = _ask(
                f"{skill} {' and '.join(problems)}.",
                {"e": "edit again", "s": "save anyway", "a": "abort"},
            )
            if choice == "a":
                raise fail(
                    f"not saved: {skill} {' and '.join(problems)}; fix it or pass --force; {kept}"
                )
            if choice == "e":
                mine = copy.edit()
                continue
            force = True  # "save anyway" holds for the retries after a conflict too
        try:
            return store.publish(
                scope, skill, files, expected_version=base.version, strict=not force
            )
        except Conflict:
            latest = _Base.load(store, scope, skill)
        _describe(scope, skill, path, base, latest)
        theirs = latest.files.get(path)
        if (old.data if old else None) == (theirs.data if theirs else None) and latest.manifest:
            out.print(
                f"{shown(path)} itself is unchanged there: saving your edit on version "
                f"{latest.version}"
            )
            base = latest
            continue
        action = on_conflict
        if action is OnConflict.ask:
            choice = _ask(
                f"{path} changed there too." if latest.manifest else "It was deleted.",
                {"r": "reopen with your edit", "o": "overwrite with yours", "a": "abort"},
            )
            action = {"r": OnConflict.reopen, "o": OnConflict.overwrite, "a": OnConflict.abort}[
                choice
            ]
        if action is OnConflict.abort:
            raise fail(
                f"not saved: {skill} changed since you read it; re-run with --on-conflict "
                f"reopen or overwrite; {kept}"
            )
        if action is OnConflict.reopen:
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
            copy.write(merged.encode("utf-8", errors="surrogateescape"))
            mine = copy.edit()
        base = latest if latest.manifest else _Base(0, None, base.files)


def _removed(files: dict[str, File], path: str) -> dict[str, File]:
    return {p: f for p, f in files.items() if p != path and not p.startswith(path + "/")}


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
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a skill (history keeps it: `rollback` brings it back), or one file or directory
    of a skill.

    Deleting a skill asks first (--yes does not ask; without a terminal, --yes is needed).
    Removing a file that leaves the skill off-spec needs --force."""
    with opened(store_url, token, create=True) as store:
        m = store.manifest(scope, target.skill)
        if version is not None and version != m.version:
            raise Conflict(
                f"{scope}/{target.skill} is at version {m.version}, not {version}: "
                "look at `skillfs diff` and retry",
                skill=target.skill,
                current_version=m.version,
            )
        if target.path is None:
            confirmed(
                f"Delete {scope}/{target.skill} (version {m.version}, {len(m.files)} files)?",
                f"not deleted: {scope}/{target.skill}",
                yes,
            )
            result = store.delete(scope, target.skill, expected_version=m.version)
        else:
            current = _read_files(store, m)  # the version checked above, not a re-read
            files = _removed(current, target.path)
            if len(files) == len(current):
                file_of(m, scope, target.path)  # raises NotFound naming the files
            if not files:
                raise NotFound(
                    f"that would leave {target.skill} without files: use `skillfs rm "
                    f"{target.skill}` to delete the skill"
                )
            if not force:
                _refuse(
                    target.skill,
                    files,
                    f"not removed: {target.skill} would break the Agent Skills spec; "
                    "pass --force to remove it anyway",
                )
            result = store.publish(scope, target.skill, files, expected_version=m.version)
    _report(f"removed {scope}/{shown(str(target))}", scope, target, result, as_json)


@command("rollback", EDIT)
def rollback(
    target: SkillArgument,
    scope: ScopeOption,
    to: Annotated[int, typer.Option("--to", min=1, metavar="N", help="The version to bring back.")],
    force: ForceOption = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Publish a new version whose files equal those of an older one (works after `rm` too).

    A version that breaks the Agent Skills spec is brought back only with --force."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        current = store.manifests(scope, [skill]).get(skill)
        old = store.manifest(scope, skill, version=to)
        if not force and not old.deleted:  # a deletion: the store says to pick another
            _refuse(
                skill,
                _Base.skill_md_only(store, old),
                f"not rolled back: version {to} of {skill} breaks the Agent Skills spec; "
                "pass --force to bring it back anyway",
            )
        result = store.rollback(
            scope, skill, to, expected_version=current.version if current else 0
        )
    message = f"rolled {scope}/{shown(target.skill)} back to version {to}"
    _report(message, scope, target, result, as_json)


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
