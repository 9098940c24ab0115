"""Drafts and archived skills (docs/governance.md, "Drafts and review", "Archive"):
`skillfs drafts ls|show|approve|reject|split`, `skillfs archive`, `skillfs restore`."""

from __future__ import annotations

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
    emit_json,
    guarded,
    iso,
    one_line,
    opened,
    out,
    parse_scope,
    print_table,
    shown,
    skill_only,
    when,
)
from skillfs.cli.govern import (
    AgentFilter,
    MarketFilter,
    ReasonOption,
    ScopeFilter,
    one_target,
)
from skillfs.cli.helptext import Command, Group
from skillfs.cli.rollout import (
    EnvOption,
    ExcludeOption,
    FractionOption,
    MatchOption,
    UserOption,
    rule_of,
)
from skillfs.governance.drafts import Draft
from skillfs.model import CommitResult, Scope
from skillfs.model.names import draft_entry, is_hidden_dir
from skillfs.model.ops import WriteOptions

#: Another scope of the agent an approved draft goes to (docs/governance.md).
IntoOption = Annotated[
    Scope | None,
    typer.Option(
        "--into",
        parser=parse_scope,
        metavar="SCOPE",
        show_default=False,
        help="Approve into this scope of the same agent, e.g. shared:AGENT for every user.",
    ),
]

app = typer.Typer(
    name="drafts",
    help="Review proposed skills: list, show, approve, reject, split.",
    no_args_is_help=True,
    cls=Group,
)

ExpectedOption = Annotated[
    int | None,
    typer.Option(
        "--expected-version",
        metavar="N",
        show_default=False,
        help="The draft's version you reviewed (refused if it changed since).",
    ),
]


def _done(what: str, scope: Scope, result: CommitResult, as_json: bool) -> None:
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "versions": dict(result.versions),
                "revision": str(result.revision),
                "commit_id": result.commit_id,
            }
        )
        return
    versions = ", ".join(f"{shown(k)} v{v}" for k, v in sorted(result.versions.items()))
    out.print(f"{what} in {scope}: {versions} (revision {result.revision})")


def _row(d: Draft) -> dict[str, object]:
    return {
        **d.model_dump(mode="json"),
        "scope": str(d.scope),
        "committed_at": iso(d.committed_at),
        "stale": d.stale,
    }


@app.command("ls", cls=Command)
@guarded
def ls(
    agent: AgentFilter = None,
    scope: ScopeFilter = None,
    market: MarketFilter = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The drafts awaiting review in an agent's scopes, a scope or a market: version, who
    proposed it, its findings, and whether the live skill moved since (stale: approving it
    is refused)."""
    with opened(store_url, token) as store:
        drafts = store.drafts.list(one_target(agent, scope, market))
    if as_json:
        emit_json([_row(d) for d in drafts])
        return
    if not drafts:
        out.print("no drafts")
        return
    cells = [
        [
            shown(str(d.scope)),
            shown(d.name),
            str(d.version),
            _base(d),
            when(d.committed_at),
            shown(d.actor),
            str(len(d.findings)),
            one_line(d.message),
        ]
        for d in drafts
    ]
    columns = ["scope", "draft", "version", "live", "when", "actor", "findings", "message"]
    print_table(columns, cells, right={"version", "findings"}, flexible="message")


def _base(d: Draft) -> str:
    """The live skill as the draft knows it: the version proposed on, and now if it moved."""
    if d.legacy:
        return "legacy: split first"
    if d.stale:
        now = f"v{d.live_version}" if d.live_version else "none"
        return f"v{d.base_version or 'none'}, now {now} (stale)"
    return f"v{d.live_version}" if d.live_version else "new"


@app.command("show", cls=Command)
@guarded
def show(
    target: SkillArgument,
    scope: ScopeOption,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """One draft: who proposed it and why, its findings, and its files against the live
    skill's (added, changed, removed, same)."""
    name = skill_only(target)
    with opened(store_url, token) as store:
        draft = store.manifest(scope, draft_entry(name))
        live = store.manifests(scope, [name]).get(name)
        held = [d for d in store.drafts.list(scope) if d.name == name and not d.legacy]
    was = {p: (e.sha256, e.mode) for p, e in (live.files if live else {}).items()}
    files = {
        path: "added"
        if path not in was
        else "same"
        if was[path] == (e.sha256, e.mode)
        else "changed"
        for path, e in draft.files.items()
    }
    files.update({path: "removed" for path in was if path not in draft.files})
    if as_json:
        emit_json({**(_row(held[0]) if held else {}), "files": dict(sorted(files.items()))})
        return
    if held:
        out.print(f"draft {shown(name)} in {scope}, version {draft.version}: {_base(held[0])}")
    out.print(f"proposed {when(draft.committed_at)} by {shown(draft.actor)}")
    if draft.message:
        out.print(f"message: {one_line(draft.message)}")
    for f in draft.findings:
        out.print(f"  {f.severity}  {shown(f.message)}")
    print_table(["file", "against live"], [[shown(p), s] for p, s in sorted(files.items())])


@app.command("approve", cls=Command)
@guarded
def approve(
    target: SkillArgument,
    scope: ScopeOption,
    expected_version: ExpectedOption = None,
    message: MessageOption = "",
    force: ForceOption = False,
    env: EnvOption = None,
    user: UserOption = None,
    fraction: FractionOption = None,
    match: MatchOption = None,
    exclude: ExcludeOption = None,
    into: IntoOption = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make the draft the live skill and remove the draft, in one commit. Refused when the
    live skill moved since the draft was proposed, and (unless --force) when the draft
    breaks the Agent Skills spec. With --env, --user or --fraction (and --match, --exclude,
    as `skillfs stage`) the draft becomes the skill's staged candidate for those workers
    instead (a canary; then `skillfs widen`, `promote`); --into puts it in another scope of
    the agent (a user's draft into shared)."""
    name = skill_only(target)
    canary = any(o is not None for o in (env, user, fraction, match, exclude))
    rule = rule_of(env, user, fraction, match, exclude)
    with opened(store_url, token) as store:
        result = store.drafts.approve(
            scope,
            name,
            options=WriteOptions(expected_version=expected_version, message=message),
            strict=not force,
            rollout=rule if canary else None,
            into=into,
        )
    how = f" as a canary for {rule.describe()}" if canary else ""
    _done(f"approved {shown(name)}{how}", into or scope, result, as_json)


@app.command("reject", cls=Command)
@guarded
def reject(
    target: SkillArgument,
    scope: ScopeOption,
    reason: ReasonOption = "",
    expected_version: ExpectedOption = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove the draft; the reason stays in its history and in the audit."""
    name = skill_only(target)
    with opened(store_url, token) as store:
        result = store.drafts.reject(
            scope, name, reason, options=WriteOptions(expected_version=expected_version)
        )
    _done(f"rejected {shown(name)}", scope, result, as_json)


@app.command("split", cls=Command)
@guarded
def split(
    scope: ScopeOption,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Split the single `_drafts` / `.archive` manifest an older skillfs wrote into one entry
    per skill, in one commit."""
    with opened(store_url, token) as store:
        result = store.drafts.split_legacy(scope, options=WriteOptions(message=message))
    if result is None:
        if as_json:
            emit_json(None)
        else:
            out.print(f"nothing to split in {scope}")
        return
    _done("split", scope, result, as_json)


@command("archive", EDIT)
def archive(
    target: SkillArgument,
    scope: ScopeOption,
    reason: ReasonOption = "",
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace an archived skill of that name.")
    ] = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move a live skill to its scope's .archive/ in one commit: no worker sees it, its files
    and history are kept, `restore` brings it back."""
    skill = skill_only(target)
    if is_hidden_dir(skill):  # bad usage, exit 2 (a draft or an archived skill is no skill)
        raise typer.BadParameter(
            f"{skill!r} is not a live skill: a name starting with '_' or '.' holds none"
        )
    with opened(store_url, token) as store:
        result = store.archive.add(scope, skill, reason=reason, replace=replace)
    _done(f"archived {shown(skill)}", scope, result, as_json)


@command("restore", EDIT)
def restore(
    target: SkillArgument,
    scope: ScopeOption,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Bring an archived skill back live in one commit (refused if a live skill has its
    name)."""
    skill = skill_only(target)
    with opened(store_url, token) as store:
        result = store.archive.restore(scope, skill, options=WriteOptions(message=message))
    _done(f"restored {shown(skill)}", scope, result, as_json)
