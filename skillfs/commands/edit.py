"""Commands that change skills by hand: edit, rm, rollback.

These are admin surfaces (DESIGN §7): a result that breaks the Agent Skills spec is rejected
unless the operator passes --force. Every write names the version it read, so a concurrent
change is a Conflict, never a lost update.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer
from rich.markup import escape

from skillfs.commands import common
from skillfs.commands.common import (
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
    command,
    confirmed,
    emit_json,
    fail,
    opened,
    out,
    parse_target,
    print_findings,
    print_patch,
    skill_only,
    when,
)
from skillfs.commands.text import has_markers, merge3, unified
from skillfs.errors import Conflict, NotFound
from skillfs.model import CommitResult, File, Finding, Manifest, Scope
from skillfs.skill import SKILL_MD, inspect_skill
from skillfs.store import Store

TEMPLATE = """---
name: {name}
description: What this skill does, and when the agent should use it.
---

# {name}

Step-by-step instructions for the agent.
"""


class OnConflict(StrEnum):
    """What `edit` does when someone else saved the skill since it was read."""

    ask = "ask"
    reopen = "reopen"
    overwrite = "overwrite"
    abort = "abort"


@dataclass(frozen=True)
class _Base:
    """The skill as read: its version (0: absent) and its files."""

    version: int
    manifest: Manifest | None
    files: dict[str, File]

    @classmethod
    def load(cls, store: Store, scope: Scope, skill: str) -> _Base:
        m = store.manifests(scope, [skill]).get(skill)
        if m is None:
            return cls(0, None, {})
        data = store.read_entries(m.files.values())
        files = {p: File(data[e.sha256], mode=e.mode, mtime=e.mtime) for p, e in m.files.items()}
        return cls(m.version, m, files)

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


def _run_editor(path: Path) -> bytes:
    editor = os.environ.get("EDITOR") or "vi"
    try:
        code = subprocess.run([*shlex.split(editor), str(path)], check=False).returncode
    except FileNotFoundError:
        raise fail(f"editor {editor!r} not found: set $EDITOR (your copy is in {path})") from None
    if code != 0:
        raise fail(f"editor {editor!r} exited with status {code}: nothing saved (copy in {path})")
    return path.read_bytes()


def _check(skill: str, files: dict[str, File]) -> list[Finding]:
    _, findings = inspect_skill(skill, {p: f.data for p, f in files.items()})
    return findings


def _describe(scope: Scope, skill: str, path: str, base: _Base, latest: _Base) -> None:
    """Tell the operator what the concurrent change was."""
    if latest.manifest is None:
        out.print(
            f"[yellow]{scope}/{escape(skill)} was deleted since you read version "
            f"{base.version}[/yellow]"
        )
        return
    m = latest.manifest
    out.print(
        f"[yellow]{scope}/{escape(skill)} changed since you read version {base.version}: now "
        f"version {m.version}, saved {when(m.committed_at)} (commit {m.commit_id[:12]})[/yellow]"
    )
    paths = sorted(base.files.keys() | latest.files.keys())
    for p in paths:
        a, b = base.files.get(p), latest.files.get(p)
        what = "added" if a is None else "removed" if b is None else "modified"
        if a is None or b is None or (a.data, a.mode) != (b.data, b.mode):
            out.print(f"    {what:<9} {escape(p)}")
    if path in base.files and path in latest.files:
        before, after = base.text(path), latest.text(path)
        if before != after:
            out.print(f"their change to {escape(path)}:")
            print_patch(unified(before, after, f"version {base.version}", f"version {m.version}"))


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

    A file or skill that does not exist yet is created (SKILL.md from a template)."""
    path = target.path
    if path is None:
        raise typer.BadParameter("name a file: SKILL/PATH, e.g. my-skill/SKILL.md")
    skill = target.skill
    with opened(store_url, token, create=True) as store:
        base = _Base.load(store, scope, skill)
        if path in base.files:
            try:
                base.files[path].data.decode("utf-8")
            except UnicodeDecodeError:
                raise fail(
                    f"{skill}/{path} is binary, not UTF-8 text: replace it with `skillfs import`"
                ) from None
        original = (
            base.files[path].data
            if path in base.files
            else TEMPLATE.format(name=skill).encode()
            if path == "SKILL.md" and base.version == 0
            else b""
        )
        workdir = Path(tempfile.mkdtemp(prefix="skillfs-edit-"))
        copy = workdir / PurePosixPath(path).name
        copy.write_bytes(original)
        mine = _run_editor(copy)
        if mine == original:
            out.print("no changes: nothing saved")
            shutil.rmtree(workdir)
            return
        result = _save_loop(store, scope, skill, path, base, mine, copy, force, on_conflict)
    shutil.rmtree(workdir)
    out.print(
        f"[green]saved[/green] {scope}/{escape(skill)}/{escape(path)}: version "
        f"{result.version} (revision {result.revision})"
    )


def _save_loop(
    store: Store,
    scope: Scope,
    skill: str,
    path: str,
    base: _Base,
    mine: bytes,
    copy: Path,
    force: bool,
    on_conflict: OnConflict,
) -> CommitResult:
    """Validate and publish `mine` on `base` until it is saved or the operator gives up."""
    kept = f"your edit is kept in {copy}"
    while True:
        if has_markers(mine.decode("utf-8", errors="replace")):
            out.print("[red]the file still holds conflict markers (<<<<<<< … >>>>>>>)[/red]")
            if _ask("Resolve them?", {"e": "edit again", "a": "abort"}) == "a":
                raise fail(f"not saved: resolve the conflict markers; {kept}")
            mine = _run_editor(copy)
            continue
        old = base.files.get(path)
        files = dict(base.files)
        files[path] = File(mine, mode=old.mode if old else None)
        findings = _check(skill, files)
        errors = [f for f in findings if f.severity == "error"]
        if findings:
            warnings = len(findings) - len(errors)
            out.print(f"{escape(skill)}: {len(errors)} error(s), {warnings} warning(s)")
            print_findings(findings)
        if errors and not force:
            choice = _ask(
                "The skill breaks the Agent Skills spec.",
                {"e": "edit again", "s": "save anyway", "a": "abort"},
            )
            if choice == "a":
                raise fail(
                    f"not saved: {skill} would break the Agent Skills spec ({len(errors)} "
                    f"error(s)); fix it or pass --force; {kept}"
                )
            if choice == "e":
                mine = _run_editor(copy)
                continue
            force = True  # "save anyway" holds for the retries after a conflict too
        try:
            return store.publish(scope, skill, files, expected_version=base.version)
        except Conflict:
            latest = _Base.load(store, scope, skill)
        _describe(scope, skill, path, base, latest)
        theirs = latest.files.get(path)
        if (old.data if old else None) == (theirs.data if theirs else None) and latest.manifest:
            out.print(
                f"{escape(path)} itself is unchanged there: saving your edit on version "
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
            copy.write_bytes(merged.encode("utf-8", errors="surrogateescape"))
            mine = _run_editor(copy)
        base = latest if latest.manifest else _Base(0, None, base.files)


def _removed(files: dict[str, File], path: str) -> dict[str, File]:
    return {p: f for p, f in files.items() if p != path and not p.startswith(path + "/")}


@command("rm", EDIT)
def rm(
    target: Annotated[
        Target,
        typer.Argument(
            parser=parse_target,
            metavar="SKILL[/PATH]",
            show_default=False,
            help="A skill (deleted whole), or one file or directory of it.",
        ),
    ],
    scope: ScopeOption,
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            "-v",
            min=1,
            metavar="N",
            show_default=False,
            help="The version you mean to remove: a Conflict if the skill moved on since.",
        ),
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
            base = _Base.load(store, scope, target.skill)
            files = _removed(base.files, target.path)
            if len(files) == len(base.files):
                Store.entry(m, scope, target.path)  # raises NotFound naming the files
            if not files:
                raise NotFound(
                    f"that would leave {target.skill} without files: use `skillfs rm "
                    f"{target.skill}` to delete the skill"
                )
            errors = [f for f in _check(target.skill, files) if f.severity == "error"]
            if errors and not force:
                print_findings(errors)
                raise fail(
                    f"not removed: {target.skill} would break the Agent Skills spec; "
                    "pass --force to remove it anyway"
                )
            result = store.publish(scope, target.skill, files, expected_version=base.version)
    _report(f"removed {scope}/{escape(str(target))}", scope, target, result, as_json)


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
        errors = [
            f for f in _check(skill, _Base.skill_md_only(store, old)) if f.severity == "error"
        ]
        if errors and not force:
            print_findings(errors)
            raise fail(
                f"not rolled back: version {to} of {skill} breaks the Agent Skills spec; "
                "pass --force to bring it back anyway"
            )
        result = store.rollback(
            scope, skill, to, expected_version=current.version if current else 0
        )
    message = f"rolled {scope}/{escape(target.skill)} back to version {to}"
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
