"""`skillfs curate` (docs/governance.md, "Curation"): stale skills, skills to archive and
near-duplicate pairs of an agent or a market, with the reason of each; `--apply` archives.
`skillfs drop-usage`: an operator forgets usage counters, recorded ("Dropping usage")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from skillfs.cli.common import (
    OPERATE,
    AgentOption,
    JsonOption,
    MessageOption,
    StoreOption,
    TokenOption,
    YesOption,
    command,
    confirmed,
    emit_json,
    iso,
    opened,
    out,
    plural,
    shown,
)
from skillfs.errors import InvalidArgument
from skillfs.governance.curation_report import (
    ARCHIVE_AFTER,
    STALE_AFTER,
    CuratedSkill,
    CurationReport,
    DuplicatePair,
    SkillRef,
    windows,
)
from skillfs.model.names import check_id
from skillfs.model.ops import WriteOptions


def parse_curated(text: str) -> str:
    """An agent id or `markets/NAME`, checked before anything is opened (bad usage: exit 2)."""
    kind, slash, ident = text.partition("/")
    try:
        if slash and kind == "markets":
            return f"markets/{check_id('market', ident)}"
        return check_id("agent", text)
    except InvalidArgument as exc:
        raise typer.BadParameter(
            f"{exc}; curate takes an agent id (support-bot) or markets/NAME, not a scope"
        ) from None


@command("curate", OPERATE)
def curate(
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="[AGENT]",
            parser=parse_curated,
            show_default=False,
            help="An agent id, or markets/NAME for a market (default: every agent).",
        ),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option("--apply", help="Archive the skills to archive (default: report only)."),
    ] = False,
    stale_after: Annotated[
        str, typer.Option("--stale-after", metavar="DURATION", help="Stale when idle this long.")
    ] = STALE_AFTER,
    archive_after: Annotated[
        str,
        typer.Option("--archive-after", metavar="DURATION", help="Archive when idle this long."),
    ] = ARCHIVE_AFTER,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Report skills idle for --stale-after (stale) or --archive-after (to archive) and pairs
    of near-duplicate skills, each with why. Idle: neither used nor changed. With --apply the
    skills to archive move to .archive/ (restorable), each re-checked just before, with
    --message and why as its reason."""
    try:  # bad usage: said with the options as given, before the store is opened
        stale, cutoff = windows(stale_after, archive_after, ("--stale-after", "--archive-after"))
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc)) from None
    with opened(store_url, token) as store:
        targets = [target] if target is not None else store.agents()
        reports = [
            store.curation.run(
                t, stale, cutoff, dry_run=not apply, options=WriteOptions(message=message)
            )
            for t in targets
        ]
    if as_json:
        emit_json([_plain(r) for r in reports])
        return
    if not reports:
        out.print("no agents to curate")
    for report in reports:
        _print(report)


def _plain(report: CurationReport) -> dict[str, Any]:
    """The report as JSON, scopes as the CLI writes them (shared:AGENT, ...), times in ISO."""

    def skill(item: CuratedSkill) -> dict[str, Any]:
        data = item.model_dump(mode="json")
        data["scope"] = str(item.scope)
        data["idle_since"] = iso(item.idle_since)
        data["last_used"] = None if item.last_used is None else iso(item.last_used)
        return data

    def pair(p: DuplicatePair) -> dict[str, Any]:
        data = p.model_dump(mode="json")
        data["a"] = {"scope": str(p.a.scope), "skill": p.a.skill}
        data["b"] = {"scope": str(p.b.scope), "skill": p.b.skill}
        return data

    data = report.model_dump(mode="json")
    data["now"] = iso(report.now)
    for key in ("stale", "to_archive", "archived", "skipped"):
        data[key] = [skill(i) for i in getattr(report, key)]
    data["duplicates"] = [pair(p) for p in report.duplicates]
    return data


def _print(report: CurationReport) -> None:
    counts = [
        plural(len(report.stale), "stale skill"),
        f"{len(report.to_archive)} to archive",
        plural(report.duplicates_total, "near-duplicate pair"),
    ]
    if report.duplicates_total > len(report.duplicates):
        counts[-1] += f" (the {len(report.duplicates)} most alike listed)"
    if report.dry_run:
        tail = f", {len(report.skipped)} kept" if report.skipped else ""
        tail += " (a report: --apply archives)" if report.to_archive else ""
    else:
        tail = f"; archived {len(report.archived)}, skipped {len(report.skipped)}"
    out.print(
        f"[bold]{shown(report.domain)}[/bold]: {plural(report.skills, 'skill')}, "
        + ", ".join(counts) + tail
    )  # fmt: skip
    shown_archive = report.to_archive if report.dry_run else []
    rows = [
        *(["stale", _name(i), shown(i.reason)] for i in report.stale),
        *(["archive", _name(i), shown(i.reason)] for i in shown_archive),
        *(["archived", _name(i), shown(i.reason)] for i in report.archived),
        *(["skipped", _name(i), shown(i.reason)] for i in report.skipped),
        *(
            ["duplicate", f"{_name(p.a)} ~ {_name(p.b)}", shown(p.reason)]
            for p in report.duplicates
        ),
    ]
    for what, name, why in rows:  # whole reasons: a cut one would say nothing
        out.print(f"  {what:<9}  {name}: {why}")


def _name(item: CuratedSkill | SkillRef) -> str:
    return shown(f"{item.scope}/{item.skill}")


@command("drop-usage", OPERATE)
def drop_usage(
    agent: AgentOption,
    users: Annotated[
        list[str] | None,
        typer.Option("--user", metavar="USER", help="Only this user's counters (repeatable)."),
    ] = None,
    skills: Annotated[
        list[str] | None,
        typer.Option("--skill", metavar="SKILL", help="Only this skill's counters (repeatable)."),
    ] = None,
    message: MessageOption = "",
    yes: YesOption = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Forget an agent's usage counters (every one, or --user's and --skill's), recording who,
    when and why (--message, required; `skillfs usage --drops` lists drops); curation then
    calls no skill idle for longer than since the drop."""
    which = " of ".join(
        part
        for part in (
            f"skills {', '.join(skills)}" if skills else "",
            f"users {', '.join(users)}" if users else "",
        )
        if part
    )
    confirmed(
        f"Drop the usage of agent {agent}{' (' + which + ')' if which else ''}?",
        "not dropped",
        yes,
    )
    with opened(store_url, token) as store:
        drop = store.usage.drop(agent, users=users, skills=skills, reason=message)
    if as_json:
        emit_json(drop.model_dump(mode="json"))
        return
    out.print(
        f"dropped {plural(drop.dropped, 'usage counter')} of agent {shown(agent)} "
        f"by {shown(drop.actor)} at {iso(drop.at)}: {shown(drop.reason)}"
    )
