"""Whole skill directories into a scope: `skillfs import` (export: `skillfs.cli.export`).

Import is a bulk surface (docs/design.md §7): skills that break the spec are stored with
their findings recorded, and the summary lists them. Bytes, modes and modification times
survive the round trip both ways. An import is decided whole by one `store.edits.import_skills`
dry run over the files' digests, then written by one call per batch under the policy the
operator chose (docs/cli.md, "Import sources").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from skillfs.api import Store
from skillfs.cli.common import (
    TRANSFER,
    JsonOption,
    MessageOption,
    ScopeOption,
    StoreOption,
    TokenOption,
    check_write,
    command,
    emit_json,
    err,
    opened,
    out,
    plural,
    print_findings,
    shown,
)
from skillfs.errors import InvalidArgument, InvalidPath, NotFound, SkillfsError, TooLarge
from skillfs.governance.edits import Imported, ImportPolicy, ImportResult
from skillfs.model import File, FileEntry, Finding, Scope, error_findings
from skillfs.model.import_mark import check_source
from skillfs.model.names import (
    check_skill_name,
    normalize_path,
)
from skillfs.model.ops import WriteOptions
from skillfs.spec.skill_dirs import (
    SKIPPED_DIRS,
    NotRegular,
    file_to_read,
    find_skill_dirs,
    read_regular,
)
from skillfs.spec.skill_md import SKILL_MD, inspect_skill
from skillfs.store.blobs import sha256
from skillfs.store.limits import Limits

#: Skills per commit when the store sets no limit of its own: small enough that the progress
#: bar moves, big enough that an import is few commits.
DEFAULT_BATCH = 64


@dataclass(frozen=True)
class SkillSource:
    """A skill directory on disk: its files (relative POSIX path -> the path to read, a
    followed link's target) and what was skipped (relative path -> why)."""

    name: str
    root: Path
    files: dict[str, Path]
    size: int
    skipped: dict[str, str]


def skill_sources(
    directory: Path, limits: Limits, follow_symlinks: bool = False
) -> list[SkillSource]:
    """Every skill DIRECTORY holds (itself when it is one), checked against the path rules and
    the store's size limits before anything is written; what is not a regular file is
    skipped (see `file_to_read`)."""
    found = [d for d in find_skill_dirs(directory) if (d / SKILL_MD).is_file()]
    if not found:
        raise NotFound(f"no skill in {directory}: no SKILL.md in it or in any directory below")
    by_name: dict[str, Path] = {}
    sources = []
    for root in found:
        name = check_skill_name(Path(os.path.abspath(root)).name)
        if name in by_name:
            raise InvalidPath(
                f"two skills are named {name!r}: {by_name[name]} and {root}; "
                "import them into different scopes"
            )
        by_name[name] = root
        files: dict[str, Path] = {}
        skipped: dict[str, str] = {}
        total = 0
        inside = (directory.resolve(), root.resolve())  # a linked skill: its own directory
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            links = sorted(d for d in dirnames if (here / d).is_symlink())
            for d in links:  # os.walk lists them and does not enter them
                rel = (here / d).relative_to(root).as_posix()
                skipped[rel] = "a symbolic link to a directory; directories are not followed"
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and d not in links)
            for filename in sorted(filenames):
                path = here / filename
                try:
                    rel = normalize_path(path.relative_to(root).as_posix())
                except InvalidArgument as exc:  # said with the whole path: which file to rename
                    raise InvalidPath(f"{os.fsencode(path)!r}: {exc}") from None
                readable = file_to_read(
                    path,
                    inside,
                    follow=follow_symlinks,
                    where="the imported directory",
                    how="--follow-symlinks reads links inside DIRECTORY",
                )
                if isinstance(readable, str):
                    skipped[rel] = readable
                    continue
                path = readable
                n = path.stat().st_size
                if n > limits.max_file_size:
                    raise TooLarge(
                        f"{path} is {n} bytes, over the store's limit of "
                        f"{limits.max_file_size} bytes per file; nothing was imported"
                    )
                files[rel] = path
                total += n
        if len(files) > limits.max_files or total > limits.max_skill_size:
            raise TooLarge(
                f"{root} holds {len(files)} files, {total} bytes: over the store's limit of "
                f"{limits.max_files} files, {limits.max_skill_size} bytes per skill; "
                "nothing was imported"
            )
        sources.append(SkillSource(name, root, files, total, skipped))
    return sources


def not_skills(directory: Path) -> list[dict[str, str]]:
    """The directories below DIRECTORY that `skillfs validate` reports as skills without a
    SKILL.md (none, or one misnamed, as `skill.md`): an import leaves them out and says so."""
    rows = []
    for d in find_skill_dirs(directory):
        if d.is_dir() and not (d / SKILL_MD).is_file():
            top = {p.name: b"" for p in d.iterdir() if p.is_file()}  # for the misnamed hint
            findings = inspect_skill(d.name, top).findings
            reason = f"{findings[0].message}; not imported"
            rows.append({"skill": d.name, "path": "", "reason": reason})
    return rows


def _read(path: Path) -> tuple[bytes, os.stat_result]:
    """`read_regular`, said as the import's error: a file may be swapped since it was listed."""
    try:
        return read_regular(path)
    except NotRegular as exc:
        raise InvalidPath(
            f"{path} became {exc.kind} while it was imported: the import stopped there; re-run it"
        ) from None


def read_source(source: SkillSource) -> dict[str, File]:
    files = {}
    for rel, path in source.files.items():
        data, st = _read(path)
        files[rel] = File(data, mode=st.st_mode & 0o777, mtime=st.st_mtime)
    return files


@contextmanager
def progress() -> Iterator[Progress]:
    """A progress bar in bytes on stderr, so stdout stays clean for --json."""
    columns = [
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TaskProgressColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=err, transient=True) as progress:
        yield progress


#: What `--policy` says of each `ImportPolicy`, in `import --help`.
POLICIES = {
    ImportPolicy.UPDATE: "nothing at all is written, and each such skill is named with who "
    "wrote its version (the default)",
    ImportPolicy.KEEP: "they are kept as they are, and the other skills are imported",
    ImportPolicy.REPLACE: "the import's files replace them (their versions stay in history)",
}


@command("import", TRANSFER)
def import_(
    directory: Annotated[
        Path,
        typer.Argument(
            exists=True,
            file_okay=False,
            metavar="DIRECTORY",
            show_default=False,
            help="A skill directory, or a directory holding skills (searched recursively).",
        ),
    ],
    scope: ScopeOption,
    policy: Annotated[
        ImportPolicy | None,
        typer.Option(
            "--policy",
            metavar="|".join(ImportPolicy),
            show_default=False,
            help="What to do with a skill the scope holds with other files that an import of "
            "this source did not leave as it is now (changed since, or from elsewhere): "
            + "; ".join(f"{p.value}: {said}" for p, said in POLICIES.items())
            + ". A skill this source wrote and nobody changed since is updated; skills "
            "whose files are the same are never written again.",
        ),
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="The same as --policy replace.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="List what the import would create, update, leave unchanged, keep and "
            "refuse, and write nothing.",
        ),
    ] = False,
    source: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            show_default=False,
            help="The source recorded in each version written, and whose earlier imports "
            "may be updated (default: DIRECTORY's absolute path; name it, e.g. "
            "git:team-skills, when the same skills are imported from changing paths).",
        ),
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            show_default=False,
            help=f"Skills per commit (default: the store's limit, else {DEFAULT_BATCH}).",
        ),
    ] = None,
    follow_symlinks: Annotated[
        bool,
        typer.Option(
            "--follow-symlinks",
            help="Read symbolic links to regular files inside DIRECTORY (others are skipped).",
        ),
    ] = False,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store every skill below DIRECTORY in a scope, bytes and modes kept.

    Each version written records the import's source (DIRECTORY's path, or --source). A skill
    the scope holds with other files is updated when an import of this source wrote it and
    nobody changed it since; one someone else changed is not reverted: the import writes
    nothing and names it, unless --replace (or --policy keep, which imports the rest).
    Skills that break the spec are stored anyway, their findings recorded and listed below.
    Only regular files are read: symbolic links (unless --follow-symlinks), pipes and devices
    are skipped with a warning."""
    if replace and policy not in (None, ImportPolicy.REPLACE):
        raise typer.BadParameter(
            f"--replace is --policy replace: give one of them, not --policy {policy.value}",
            param_hint="--replace",
        )
    chosen = ImportPolicy.REPLACE if replace else policy or ImportPolicy.UPDATE
    origin = check_source(source if source is not None else str(directory.resolve()))
    with opened(store_url, token, create=True) as store:
        sources = skill_sources(directory, store.limits, follow_symlinks)
        skipped = not_skills(directory) + [
            {"skill": s.name, "path": path, "reason": why}
            for s in sources
            for path, why in s.skipped.items()
        ]
        for row in skipped:
            err.print(
                f"[yellow]warning:[/yellow] skipped {shown(row['skill'])}/{shown(row['path'])}: "
                f"{shown(row['reason'])}"
            )
        check_write(store, scope)  # the grant to ask for, before any upload
        limit = store.max_ops
        size = batch or limit or DEFAULT_BATCH
        if limit is not None:  # the store's limit per atomic commit caps any batch
            size = min(size, limit)
        importer = _Importer(store, scope, origin, chosen, size, WriteOptions(message=message))
        with progress() as bar:
            # the whole import is decided first, from the files' digests (none held in
            # memory), so a refusal writes nothing; then only what changes is read again
            plan = importer.plan(sources, bar)
            if not dry_run:
                refusal = plan.refusal(scope)
                if refusal is not None:
                    raise refusal
                writes = {i.skill for i in plan.skills if i.status in ("created", "updated")}
                todo = [s for s in sources if s.name in writes]
                task = bar.add_task("importing", total=sum(s.size for s in todo))
                for i in range(0, len(todo), size):
                    importer.run(todo[i : i + size], bar, task)
    rows = [importer.rows[s.name] for s in sources]
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "source": origin,
                "policy": chosen.value,
                "dry_run": dry_run,
                "commits": importer.commits,
                "skills": rows,
                "skipped": skipped,
            }
        )
    else:
        _summary(scope, origin, rows, importer.commits, importer.findings, dry_run)


@dataclass
class _Importer:
    """One import's calls of `store.edits.import_skills`, and the report they add up to."""

    store: Store
    scope: Scope
    source: str
    policy: ImportPolicy
    batch: int
    options: WriteOptions
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    commits: list[dict[str, Any]] = field(default_factory=list)
    findings: dict[str, list[Finding]] = field(default_factory=dict)

    def plan(self, sources: list[SkillSource], progress: Progress) -> ImportResult:
        """The import decided for every skill (a dry run), each file hashed, not kept."""
        task = progress.add_task("checking", total=sum(s.size for s in sources))
        rows: dict[str, dict[str, FileEntry]] = {}
        profiles = self.store.host_profiles.of(self.scope)  # the scope's, as its commits judge
        for source in sources:
            progress.update(task, description=f"checking {source.name}")
            rows[source.name] = entries = {}
            md = b""
            for rel, path in source.files.items():
                data, st = _read(path)
                md = data if rel == SKILL_MD else md
                entries[rel] = FileEntry(
                    sha256=sha256(data), size=len(data), mode=st.st_mode & 0o777,
                    mtime=st.st_mtime,
                )  # fmt: skip
            texts = dict.fromkeys(entries, b"") | {SKILL_MD: md}
            self.findings[source.name] = inspect_skill(source.name, texts, profiles).findings
            self.rows[source.name] = _row(source, self.findings[source.name])
            progress.advance(task, source.size)
        result = self.store.edits.import_skills(
            self.scope, rows, source=self.source, policy=self.policy, dry_run=True
        )
        self._add(result)
        return result

    def run(self, chunk: list[SkillSource], progress: Progress, task: TaskID) -> None:
        """Read `chunk`'s skills and import them in one call (commits of `batch` skills)."""
        skills: dict[str, dict[str, File]] = {}
        for source in chunk:
            progress.update(task, description=f"reading {source.name}")
            skills[source.name] = read_source(source)
            progress.advance(task, source.size)
        progress.update(task, description=f"importing {plural(len(chunk), 'skill')}")
        try:
            result = self.store.edits.import_skills(
                self.scope,
                skills,
                source=self.source,
                policy=self.policy,
                batch=self.batch,
                options=self.options,
            )
        except SkillfsError:
            _partial(self.scope, self.commits)
            raise
        self._add(result)

    def _add(self, result: ImportResult) -> None:
        for done in result.commits:
            self.commits.append(
                {
                    "revision": str(done.revision),
                    "commit_id": done.commit_id,
                    "skills": sorted(done.versions),
                }
            )
        for item in result.skills:
            self.rows[item.skill].update(_status(item))


def _status(item: Imported) -> dict[str, Any]:
    """A skill's status, its version, and who wrote the version a kept or refused one holds."""
    row: dict[str, Any] = {"status": item.status, "version": item.version}
    if item.status in ("kept", "refused"):
        row["actor"] = item.actor
    return row


def _partial(scope: Scope, commits: list[dict[str, Any]]) -> None:
    """Before a batch's failure is reported: what the batches before it committed, which stays."""
    if commits:
        done = sorted(name for c in commits for name in c["skills"])
        err.print(
            f"[yellow]warning:[/yellow] {plural(len(done), 'skill')} of this import "
            f"{'were' if len(done) != 1 else 'was'} committed to {scope} before the failure "
            f"(revision {commits[-1]['revision']}); run the same import again to finish it: "
            "skills already imported are unchanged, so they are not written again"
        )


def _row(source: SkillSource, findings: list[Finding]) -> dict[str, Any]:
    """One skill of the import report (its status and version as the import leaves them)."""
    errors = [f.message for f in error_findings(findings)]
    return {
        "skill": source.name,
        "source": str(source.root),
        "status": None,
        "version": None,
        "files": len(source.files),
        "size": source.size,
        "valid": not errors,
        "errors": errors,
        "warnings": [f.message for f in findings if f.severity == "warning"],
    }


def _summary(
    scope: Scope,
    source: str,
    rows: list[dict[str, Any]],
    commits: list[dict[str, Any]],
    findings: dict[str, list[Finding]],
    dry_run: bool,
) -> None:
    statuses = ("created", "updated", "unchanged", "kept", "refused")
    counts = {s: sum(r["status"] == s for r in rows) for s in statuses}
    said = [f"{counts[s]} {s}" for s in statuses if counts[s] or s not in ("kept", "refused")]
    skills = f"{len(rows)} skill{'s' * (len(rows) != 1)}"
    if dry_run:
        out.print(f"dry run: nothing written; importing {skills} from {shown(source)} into "
                  f"{scope} would leave: " + ", ".join(said))  # fmt: skip
        for r in rows:
            if r["status"] != "unchanged":
                who = f" (version {r['version']} by {shown(r['actor'])})" if "actor" in r else ""
                out.print(f"  {r['status']:<9} {shown(r['skill'])}{who}")
        return
    where = f"in {len(commits)} commit{'s' * (len(commits) != 1)}"
    if commits:
        where += f", now at revision {commits[-1]['revision']}"
    out.print(f"imported {skills} into {scope} {where}: " + ", ".join(said))
    for r in rows:
        if r["status"] == "kept":
            out.print(
                f"  kept {shown(r['skill'])}: version {r['version']} by {shown(r['actor'])} "
                "is not what an import of this source wrote"
            )
    flagged = [r for r in rows if r["errors"] or r["warnings"]]
    for r in flagged:
        mark = "[red]✗[/red]" if r["errors"] else "[yellow]![/yellow]"
        out.print(f"{mark} [bold]{shown(r['skill'])}[/bold]  [dim]{shown(r['source'])}[/dim]")
        print_findings(findings[r["skill"]])
    invalid = sum(bool(r["errors"]) for r in rows)
    if flagged:
        out.print(
            f"{invalid} with errors (stored; a worker shows a skill only if its SKILL.md has a "
            f"name and description), {len(flagged) - invalid} with warnings only"
        )
