"""The `skillfs` command (docs/design.md §6b): one typer app, one function per subcommand.

Add a command with `@app.command()`; print listings through `emit_json` when `--json` is given,
otherwise with rich on `out` (both from `skillfs.cli.common`, which every command shares).
Exit 1 means "ran, and found problems"; exit 2 means bad usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import typer

from skillfs.cli.commands import register
from skillfs.cli.common import (
    JsonOption,
    StoreOption,
    TokenOption,
    emit_json,
    fail,
    opened,
    out,
    scope_option,
    shown,
)
from skillfs.cli.helptext import Command, Group
from skillfs.cli.logged import say_warnings
from skillfs.cli.serve import GrpcOption, HttpOption, run_examples, serve
from skillfs.errors import InvalidArgument, SkillfsError
from skillfs.model import Scope
from skillfs.spec.profiles import PROFILES, Profiles
from skillfs.spec.skill_dirs import ValidationReport, find_skill_dirs, validate_dir
from skillfs.spec.validation import SPEC

app = typer.Typer(
    name="skillfs",
    help="Agent Skills in a key-value store, served fresh to every agent worker.",
    no_args_is_help=True,
    add_completion=False,
    cls=Group,
)
register(app)  # the store commands, in skillfs/cli/
app.command(rich_help_panel="Serve", cls=Command)(serve)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"skillfs {version('skillfs')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Agent Skills in a key-value store, served fresh to every agent worker."""
    say_warnings()


def main() -> None:
    """The `skillfs` console script."""
    app()


def _validate_paths(paths: Sequence[Path], profiles: Profiles = SPEC) -> list[ValidationReport]:
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise fail(", ".join(f"path '{p}' does not exist" for p in missing), code=2)
    return [validate_dir(d, profiles) for p in paths for d in find_skill_dirs(p)]


def _print_reports(reports: Sequence[ValidationReport]) -> None:
    for r in reports:
        mark = "[green]✓[/green]" if r.valid else "[red]✗[/red]"
        if r.valid and r.warnings:
            mark = "[yellow]![/yellow]"
        out.print(f"{mark} [bold]{shown(r.name or '?')}[/bold]  [dim]{shown(r.path)}[/dim]")
        for message in r.errors:
            out.print(f"    [red]error[/red]    {shown(message)}")
        for message in r.warnings:
            out.print(f"    [yellow]warning[/yellow]  {shown(message)}")
    invalid = sum(not r.valid for r in reports)
    warned = sum(bool(r.warnings) for r in reports)
    out.print(
        f"{len(reports)} skill director{'y' if len(reports) == 1 else 'ies'}:"
        f" {len(reports) - invalid} valid, {invalid} with errors, {warned} with warnings"
    )


@app.command(cls=Command)
def validate(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH",
            help="Skill directories, or directories holding skills (searched recursively).",
            show_default=False,
        ),
    ],
    as_json: JsonOption = False,
    profile: Annotated[
        list[str] | None,
        typer.Option(
            "--profile",
            help=f"Accept a host's fields and names too ({', '.join(PROFILES)}; repeatable). "
            "Default: spec, the Agent Skills specification alone (skills-ref's verdicts).",
            show_default=False,
        ),
    ] = None,
    scope: Annotated[
        Scope | None,
        scope_option(
            "Judge under the host profiles this scope of --store accepts (skillfs profiles), "
            "as its commits would; instead of --profile."
        ),
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
) -> None:
    """Check skill directories against the Agent Skills spec; exit 1 when any has errors."""
    if scope is not None and profile:
        raise fail("give --profile or --scope, not both", code=2)
    try:
        if scope is None:
            profiles = Profiles.of(profile)
        else:
            with opened(store_url, token) as store:
                profiles = store.host_profiles.of(scope)
    except InvalidArgument as exc:
        raise fail(str(exc), code=2) from None
    except SkillfsError as exc:
        raise fail(str(exc)) from None
    reports = _validate_paths(paths, profiles)
    if as_json:
        emit_json([r.model_dump() for r in reports])
    else:
        _print_reports(reports)
    if any(not r.valid for r in reports):
        raise typer.Exit(code=1)


def _examples_dir() -> Path:
    """examples/skills of the source tree (`make run` uses an editable install), else of the cwd."""
    for root in (Path(__file__).resolve().parents[1], Path.cwd()):
        if (root / "examples" / "skills").is_dir():
            return root / "examples" / "skills"
    raise fail("examples/skills not found: run this from the skillfs source tree", code=2)


@app.command(rich_help_panel="Serve", cls=Command)
def run(
    store: StoreOption = None,
    grpc: GrpcOption = "127.0.0.1:7070",
    http: HttpOption = "127.0.0.1:7080",
) -> None:
    """What `make run` starts: the server and its admin console on the local store, with the
    example skills and an admin token."""
    examples = _examples_dir()
    out.print(f"Example skills in {shown(str(examples))}:")
    reports = _validate_paths([examples])
    _print_reports(reports)
    if any(not r.valid for r in reports):
        raise typer.Exit(code=1)
    run_examples(examples, store, grpc, http)


if __name__ == "__main__":  # `python -m skillfs.cli.app` ran nothing and exited 0
    main()
