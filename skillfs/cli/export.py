"""`skillfs export`: a scope's skills written to a directory, bytes, modes and modification
times kept, so that an import of it gives them back (docs/cli.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from skillfs.cli.common import (
    TRANSFER,
    JsonOption,
    ScopeOption,
    StoreOption,
    TokenOption,
    YesOption,
    command,
    confirmed,
    emit_json,
    err,
    nothing_in,
    opened,
    out,
    shown,
)
from skillfs.cli.transfer import progress
from skillfs.errors import InvalidPath, NotFound
from skillfs.model import Manifest
from skillfs.model.names import is_hidden_dir, normalize_path, unwritable


@command("export", TRANSFER)
def export(
    directory: Annotated[
        Path,
        typer.Argument(
            file_okay=False, metavar="DIRECTORY", show_default=False, help="Where to write."
        ),
    ],
    scope: ScopeOption,
    skills: Annotated[
        list[str] | None,
        typer.Option(
            "--skill", metavar="NAME", show_default=False, help="Only this skill (repeatable)."
        ),
    ] = None,
    yes: YesOption = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write a scope's skills to DIRECTORY, one sub-directory each, bytes and modes kept.

    Into a DIRECTORY that is not empty it asks first (--yes does not ask): each exported
    skill's directory is then replaced whole, everything else is left alone."""
    if directory.exists() and any(directory.iterdir()):
        confirmed(
            f"{directory} is not empty: replace the exported skills' directories in it?",
            f"nothing exported: {directory} is not empty",
            yes,
            unattended=f"nothing exported: {directory} is not empty and there is no terminal to "
            "ask; pass --yes to replace the exported skills' directories in it, or export into "
            "an empty directory",
        )
    with opened(store_url, token) as store:
        manifests = {  # drafts and archived skills are not the scope's skills (`_drafts/`)
            name: m for name, m in store.manifests(scope, skills).items() if not is_hidden_dir(name)
        }
        if not manifests and store.revision(scope) is None:  # a typo: no backup of nothing
            raise NotFound(nothing_in(store, scope))
        if skills:
            missing = sorted(set(skills) - manifests.keys())
            if missing:
                raise NotFound(
                    f"no skill {', '.join(map(repr, missing))} in {scope}; skills there: "
                    + (", ".join(store.skills(scope)) or "none")
                )
        skipped = _unwritable(manifests)  # paths stored before the caps: skip, not fail
        for row in skipped:
            err.print(f"[yellow]warning:[/yellow] skipped {shown(row['skill'])}: {row['reason']}")
            del manifests[row["skill"]]
        rows = []
        # every skill is written beside the directory's own first, and moved in once all
        # are: a store or disk failure midway leaves DIRECTORY as it was
        made = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".skillfs-export-", dir=directory))
        done = False
        try:
            with progress() as bar:
                total = sum(m.size for m in manifests.values())
                task = bar.add_task("exporting", total=total)
                for name in sorted(manifests):
                    m = manifests[name]
                    bar.update(task, description=f"writing {name}")
                    try:
                        _write_skill(staging / name, m, store.read_entries(m.files.values()))
                    except OSError as exc:
                        raise InvalidPath(
                            f"nothing exported: writing {name} failed ({exc.strerror or exc})"
                        ) from None
                    bar.advance(task, m.size)
                    rows.append(
                        {"skill": name, "version": m.version, "files": len(m.files), "size": m.size}
                    )
            for name in sorted(manifests):
                _replace(directory / name)
                os.replace(staging / name, directory / name)
            done = True
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if made and not done:
                shutil.rmtree(directory, ignore_errors=True)
    if as_json:
        emit_json(
            {"scope": str(scope), "directory": str(directory), "skills": rows, "skipped": skipped}
        )
    else:
        out.print(f"exported {len(rows)} skill{'s' * (len(rows) != 1)} of {scope} to {directory}")


def _unwritable(manifests: dict[str, Manifest]) -> list[dict[str, str]]:
    """The skills with a path stored before the path caps (docs/security.md), longer or
    deeper than a file system may hold: each with why, for one warning."""
    found = {name: unwritable(m.files) for name, m in sorted(manifests.items())}
    return [{"skill": name, "reason": why} for name, why in found.items() if why is not None]


def _replace(root: Path) -> None:
    """Make room for an exported skill's directory: what stood there goes, whole."""
    if root.is_symlink() or root.is_file():
        root.unlink()
    elif root.exists():
        shutil.rmtree(root)


def _write_skill(root: Path, m: Manifest, data: dict[str, bytes]) -> None:
    for path, entry in sorted(m.files.items()):
        target = root / normalize_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[entry.sha256])
        os.chmod(target, entry.mode & 0o777)  # the exact bits, for the round trip (cli.md)
        os.utime(target, (entry.mtime, entry.mtime))
