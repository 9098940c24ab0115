"""Staged rollout (docs/governance.md, "Staged rollout"): `stage`, `widen`, `promote`,
`abort`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from skillfs.cli.common import (
    EDIT,
    ForceOption,
    JsonOption,
    MessageOption,
    ScopeOption,
    SkillArgument,
    StoreOption,
    TokenOption,
    command,
    opened,
    print_findings,
    skill_only,
    version_option,
)
from skillfs.cli.govern import done
from skillfs.cli.transfer import read_source, skill_sources
from skillfs.errors import FailedPrecondition, InvalidArgument, InvalidPath
from skillfs.model import Rollout
from skillfs.model.ops import WriteOptions

EnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        "-e",
        metavar="ENV",
        show_default=False,
        help="Workers declaring this environment get the candidate (repeatable).",
    ),
]
UserOption = Annotated[
    list[str] | None,
    typer.Option(
        "--user",
        "-u",
        metavar="USER",
        show_default=False,
        help="This user gets the candidate (repeatable).",
    ),
]


ExcludeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        metavar="USER",
        show_default=False,
        help="This user never gets the candidate, whatever the rest of the rule says (repeatable).",
    ),
]


def parse_match(text: str) -> str:
    """`any` or `all`, checked by the rule's own check (a bad one is bad usage, exit 2)."""
    try:
        return Rollout(match=text).match
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc)) from None


MatchOption = Annotated[
    str | None,
    typer.Option(
        "--match",
        metavar="any|all",
        parser=parse_match,
        show_default=False,
        help="How --env, --user and --fraction combine: a worker matching any one of them "
        "gets the candidate (the default), or only one matching all of them (--env prod "
        "--fraction 0.1 --match all: 10 % of prod's users).",
    ),
]


def parse_fraction(text: str) -> float:
    """A share of users, checked by the rule's own check before anything is opened (a bad
    one is bad usage, exit 2: `widen` said "no staged candidate" first)."""
    try:
        return Rollout(fraction=float(text)).fraction
    except (ValueError, InvalidArgument) as exc:
        raise typer.BadParameter(
            str(exc) if isinstance(exc, InvalidArgument) else f"{text!r} is not a number"
        ) from None


FractionOption = Annotated[
    float | None,
    typer.Option(
        "--fraction",
        metavar="F",
        parser=parse_fraction,
        show_default=False,
        help="This share of users (0-1) gets it, bucketed by a stable hash of the user.",
    ),
]


def rule_of(
    env: list[str] | None,
    user: list[str] | None,
    fraction: float | None,
    match: str | None,
    exclude: list[str] | None,
) -> Rollout:
    """The rollout rule the --env, --user, --fraction, --match and --exclude options name."""
    return Rollout(
        environments=env or [], users=user or [], fraction=fraction or 0.0,
        match=match or "any", excluded_users=exclude or [],
    )  # fmt: skip


ExpectOption = Annotated[
    int | None,
    version_option("The version you staged against: a Conflict if the skill moved on since."),
]


@command("stage", EDIT)
def stage(
    directory: Annotated[
        Path,
        typer.Argument(
            exists=True,
            file_okay=False,
            metavar="DIRECTORY",
            show_default=False,
            help="One skill directory; the skill is named after it.",
        ),
    ],
    scope: ScopeOption,
    env: EnvOption = None,
    user: UserOption = None,
    fraction: FractionOption = None,
    match: MatchOption = None,
    exclude: ExcludeOption = None,
    version: ExpectOption = None,
    message: MessageOption = "",
    force: ForceOption = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stage a skill directory as the skill's candidate: the workers the rule names (--env,
    --user, --fraction: any one is enough, or all of them with --match all; never an
    --exclude'd user) get it at their next step, everyone else keeps the live version (a
    new skill: nobody else sees it). Staging again replaces the candidate. A candidate that
    breaks the spec needs --force."""
    rule = rule_of(env, user, fraction, match, exclude)
    with opened(store_url, token, create=True) as store:
        sources = skill_sources(directory, store.limits)
        if len(sources) != 1 or sources[0].root.resolve() != directory.resolve():
            raise InvalidPath(
                f"{directory} is not one skill directory (a SKILL.md at its top): stage one "
                "skill at a time"
            )
        source = sources[0]
        files = read_source(source)
        options = WriteOptions(expected_version=version, message=message)
        result = store.rollouts.stage(
            scope, source.name, files, rule, options=options, strict=not force
        )
        staged = store.manifest(scope, source.name).candidate
    if staged is not None and staged.findings and not as_json:
        print_findings(staged.findings)
    done(f"staged for {rule.describe()}:", scope, source.name, result, as_json)


@command("widen", EDIT)
def widen(
    target: SkillArgument,
    scope: ScopeOption,
    env: EnvOption = None,
    user: UserOption = None,
    fraction: FractionOption = None,
    match: MatchOption = None,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give a skill's candidate to more workers: the environments and users given are added
    to its rule, --fraction raises its share and --match any loosens an all-rule (never
    narrowing: everyone already in stays in; its excluded users stay excluded). To narrow,
    abort and stage again."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        m = store.manifest(scope, skill)
        if m.candidate is None:
            raise FailedPrecondition(f"{scope}/{skill} has no staged candidate: stage one first")
        old = m.candidate.rollout
        rule = Rollout(  # sorted and deduplicated by the rule itself
            environments=[*old.environments, *(env or [])],
            users=[*old.users, *(user or [])],
            fraction=old.fraction if fraction is None else fraction,
            match=old.match if match is None else match,
            excluded_users=old.excluded_users,
        )
        options = WriteOptions(expected_version=m.version, message=message)
        result = store.rollouts.widen(scope, skill, rule, options=options)
    done(f"widened to {rule.describe()}:", scope, skill, result, as_json)


@command("promote", EDIT)
def promote(
    target: SkillArgument,
    scope: ScopeOption,
    version: ExpectOption = None,
    force: ForceOption = False,
    anyway: Annotated[
        bool,
        typer.Option(
            "--anyway",
            help="Promote even though a live save landed after the candidate was staged "
            "(that edit's files are replaced by the candidate's; history keeps them).",
        ),
    ] = False,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make a skill's candidate the live version for everyone, in one commit (the version it
    replaces stays in history). Refused when a live save landed after the candidate was
    staged, naming it: stage again on top of it, or --anyway. A candidate that breaks the
    spec needs --force."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        expected = store.manifest(scope, skill).version if version is None else version
        options = WriteOptions(expected_version=expected, message=message)
        result = store.rollouts.promote(
            scope, skill, options=options, strict=not force, anyway=anyway
        )
    done("promoted the candidate of", scope, skill, result, as_json)


@command("abort", EDIT)
def abort(
    target: SkillArgument,
    scope: ScopeOption,
    version: ExpectOption = None,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Drop a skill's candidate: everyone sees the live version again (a skill that was only
    staged is deleted; history keeps it)."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        options = WriteOptions(expected_version=version, message=message)
        result = store.rollouts.abort(scope, skill, options=options)
    done("aborted the candidate of", scope, skill, result, as_json)
