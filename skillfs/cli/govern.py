"""Governed change (docs/governance.md): `audit`, `disable`, `enable`."""

from __future__ import annotations

from typing import Annotated

import typer

from skillfs.cli.common import (
    EDIT,
    OPERATE,
    JsonOption,
    MessageOption,
    ScopeOption,
    SkillArgument,
    StoreOption,
    TokenOption,
    command,
    emit_json,
    iso,
    one_line,
    opened,
    out,
    print_table,
    scope_option,
    shown,
    skill_only,
    when,
)
from skillfs.model import CommitResult, Scope
from skillfs.model.ops import WriteOptions

#: `--message` of the commands whose message is also their reason (`disable`, `drafts
#: reject`, `archive`): `--reason`/`-r`, as they took it first, is the same option.
ReasonOption = Annotated[
    str,
    typer.Option(
        "--message",
        "-m",
        "--reason",
        "-r",
        metavar="TEXT",
        help="Why: kept in the skill's history and the audit (--reason is the same option).",
    ),
]
#: What `audit` and `drafts ls` read: one of an agent's scopes, one scope, or a market.
AgentFilter = Annotated[
    str | None, typer.Option("--agent", "-a", metavar="AGENT", help="An agent's scopes.")
]
ScopeFilter = Annotated[
    Scope | None, scope_option("One scope: shared:AGENT, user:AGENT/USER or market:NAME.")
]
MarketFilter = Annotated[str | None, typer.Option("--market", metavar="NAME", help="A market.")]


def one_target(agent: str | None, scope: Scope | None, market: str | None) -> str | Scope:
    """The one of --agent, --scope, --market given, as `Store.audit` and `Store.drafts`
    take it (an agent id, a scope, `markets/NAME`)."""
    targets = [t for t in (agent, scope, market) if t is not None]
    if len(targets) != 1:  # bad usage, exit 2 (as `watch` without one)
        raise typer.BadParameter("give one of --agent AGENT, --scope SCOPE or --market NAME")
    return f"markets/{market}" if market is not None else targets[0]


def done(what: str, scope: Scope, skill: str, result: CommitResult, as_json: bool) -> None:
    """What a governed commit of one skill made: its new version and revision."""
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "skill": skill,
                "version": result.version,
                "revision": str(result.revision),
                "commit_id": result.commit_id,
            }
        )
    else:
        out.print(
            f"{what} {scope}/{shown(skill)}: now version {result.version} "
            f"(revision {result.revision})"
        )


@command("disable", EDIT)
def disable(
    target: SkillArgument,
    scope: ScopeOption,
    reason: ReasonOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Switch a skill off without deleting it: files and history stay, and no worker sees it
    until `enable`. In a user's scope (user:AGENT/USER) a shared or market skill is hidden
    from that user alone."""
    skill = skill_only(target)
    with opened(store_url, token) as store:
        result = store.governance.disable(scope, skill, reason=reason)
    done("disabled", scope, skill, result, as_json)


@command("enable", EDIT)
def enable(
    target: SkillArgument,
    scope: ScopeOption,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Switch a disabled skill back on (in a user's scope: stop hiding it from that user)."""
    skill = skill_only(target)
    with opened(store_url, token) as store:
        result = store.governance.enable(scope, skill, options=WriteOptions(message=message))
    done("enabled", scope, skill, result, as_json)


def _time(text: str | None, option: str) -> float | None:
    """An ISO 8601 time (a date, or a date and time; UTC unless it says otherwise)."""
    if text is None:
        return None
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO 8601 time, e.g. 2025-01-31 or 2025-01-31T12:00",
            param_hint=option,
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@command("audit", OPERATE)
def audit(
    agent: AgentFilter = None,
    scope: ScopeFilter = None,
    market: MarketFilter = None,
    since: Annotated[
        str | None, typer.Option("--since", metavar="TIME", help="From this ISO 8601 time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", metavar="TIME", help="Up to this ISO 8601 time.")
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", metavar="WHO", help="Only this actor's changes.")
    ] = None,
    skill: Annotated[
        str | None, typer.Option("--skill", metavar="SKILL", help="Only this skill.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Who changed what and why, newest first: every kept version of an agent's, a scope's
    or a market's skills (history keeps them by its retention policy)."""
    target = one_target(agent, scope, market)
    start, end = _time(since, "--since"), _time(until, "--until")
    with opened(store_url, token) as store:
        entries = store.governance.audit(
            target, since=start, until=end, actor=actor, skill=skill, limit=limit
        )
    if as_json:
        emit_json([{**e.model_dump(mode="json"), "scope": str(e.scope),
                    "committed_at": iso(e.committed_at)} for e in entries])  # fmt: skip
        return
    if not entries:
        out.print("no changes")
        return
    cells = [
        [
            when(e.committed_at),
            shown(str(e.scope)),
            shown(e.skill),
            str(e.version),
            e.action,
            shown(e.actor),
            one_line(e.message),
        ]
        for e in entries
    ]
    columns = ["when", "scope", "skill", "version", "action", "actor", "message"]
    print_table(columns, cells, right={"version"}, flexible="message")
