"""Commands for running a deployment: prompt, watch, gc."""

from __future__ import annotations

import itertools
import json
import shlex
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn

from skillfs.api import Store
from skillfs.cli.common import (
    OPERATE,
    AgentOption,
    EnvironmentOption,
    JsonOption,
    MarketsOption,
    PinsOption,
    StoreOption,
    TokenOption,
    agent_option,
    command,
    connect,
    emit_json,
    err,
    opened,
    out,
    parse_revision,
    pins_of,
    plain,
    print_findings,
    print_table,
    shown,
)
from skillfs.model import Change, Revision, Scope
from skillfs.model.names import check_id
from skillfs.runtime import LocalDir, Market, Skills


def _ids(kind: str, values: list[str] | None) -> list[str]:
    """User and market ids checked before anything is opened: a bad one is a usage error."""
    try:
        return [check_id(kind, v) for v in values or []]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=f"--{kind}") from None


@command("prompt", OPERATE)
def prompt(
    agent: AgentOption,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            "-u",
            metavar="USER",
            show_default=False,
            help="User id (default: none, the view of a user without skills of their own).",
        ),
    ] = None,
    markets: MarketsOption = None,
    environment: EnvironmentOption = None,
    pins: PinsOption = None,
    local: Annotated[
        list[Path] | None,
        typer.Option(
            "--local",
            file_okay=False,
            metavar="DIR",
            show_default=False,
            help="A local skills directory layer, below the markets (repeatable).",
        ),
    ] = None,
    invoke: Annotated[
        str | None,
        typer.Option(
            "--invoke",
            metavar="SKILL",
            show_default=False,
            help="Print what a user's /SKILL ARGS gives the model instead: the skill's "
            "instructions with $ARGUMENTS substituted.",
        ),
    ] = None,
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ARGS]...",
            show_default=False,
            help="With --invoke: the arguments. One is the line as typed (quote it: "
            "'\"my widget\" React'); several are one argument each.",
        ),
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The <available_skills> block a worker for (agent, user) would put in its prompt now.

    Without --user, the shared view: the layers and the agent-shared scope, as a user with
    no skills of their own sees them. Skills left out of the view (no usable SKILL.md) are
    listed on stderr. With --invoke SKILL [ARGS]..., what a user's invocation of the skill
    gives the model (docs/runtime.md, "Invoking a skill")."""
    if args and invoke is None:
        raise typer.BadParameter("ARGS go with --invoke SKILL", param_hint="ARGS")
    users = _ids("user", [user] if user is not None else [])
    pinned = pins_of(pins)
    layers: list[LocalDir | Market] = [
        *(LocalDir(p) for p in local or []),
        *(Market(m) for m in _ids("market", markets)),
    ]
    # The store is left open: the runtime's watch threads may still be inside a store call
    # when Skills closes, and closing a SQLite store under them crashes the process.
    store = connect(store_url, token)
    who = users[0] if users else _nobody(store, agent)
    line = args[0] if args and len(args) == 1 else shlex.join(args or [])
    with Skills(store, agent, who, layers, environment=environment, pins=pinned) as skills:
        snap = skills.snapshot()
        text = snap.invoke(invoke, line) if invoke is not None else ""
    _warn_unknown(store, snap.revisions)
    if invoke is not None:
        if as_json:
            emit_json({"skill": invoke, "arguments": line, "text": text})
        else:
            typer.echo(plain(text, multiline=True), nl=False)
        return
    if as_json:
        emit_json(
            {
                "prompt": snap.prompt(),
                "revisions": {d: str(r) if r else None for d, r in snap.revisions.items()},
                "skills": [
                    {
                        "id": s.id,
                        "name": s.name,
                        "description": s.description,
                        "source": s.source,
                        "version": s.version,
                        "candidate": s.candidate,
                        "pinned": s.pinned,
                        "shadows": list(s.shadows),
                    }
                    for s in snap.skills
                ],
                "left_out": [
                    {
                        "skill": p.skill,
                        "source": p.source,
                        "errors": [f.message for f in p.errors],
                        "disabled": p.disabled is not None,
                        "disabled_reason": p.disabled or None,
                    }
                    for p in snap.problems
                ],
            }
        )
        return
    typer.echo(plain(snap.prompt(), multiline=True))
    for s in snap.skills:
        if s.candidate:
            err.print(f"[cyan]candidate[/cyan] {shown(s.id)} ({shown(s.source)} v{s.version})")
        if s.pinned:
            err.print(
                f"[cyan]pinned[/cyan] {shown(s.id)} at {shown(s.pinned)} "
                f"({shown(s.source)} v{s.version})"
            )
    for p in snap.problems:
        if p.disabled is not None:
            why = f": {shown(p.disabled)}" if p.disabled else ""
            err.print(f"[yellow]disabled[/yellow] {shown(p.skill)} ({shown(p.source)}){why}")
            continue
        err.print(f"[yellow]left out[/yellow] {shown(p.skill)} ({shown(p.source)}):")
        print_findings(p.errors, console=err)


def _nobody(store: Store, agent: str) -> str:
    """A user id with no scope under `agent`: the runtime always puts a user's scope on top,
    and an empty one adds nothing, which leaves the shared view."""
    users = set(store.users(agent))
    return next(u for u in (f"nobody{i or ''}" for i in itertools.count()) if u not in users)


def _warn_unknown(store: Store, revisions: Mapping[str, Revision | None]) -> None:
    """A warning on stderr for each agent or market of the view that was never written: most
    likely a typo. An empty view is legitimate, so the exit code stays 0."""
    for domain, revision in revisions.items():
        if revision is not None:
            continue
        kind, _, ident = domain.partition("/")
        if kind == "agents":
            known = ", ".join(store.agents()) or "none"
            what = f"agent {ident!r}"
        else:
            known = ", ".join(store.markets()) or "none"
            what = f"market {ident!r}"
        err.print(
            f"[yellow]warning:[/yellow] {shown(what)} has nothing in {shown(store.url)}: "
            f"check the id ({kind} there: {shown(known)})"
        )


def _change_json(c: Change) -> dict[str, Any]:
    return {
        "revision": str(c.revision),
        "op": c.op,
        "scope": str(c.scope) if c.scope else None,
        "skill": c.skill,
        "version": c.version,
    }


def _follow(
    store: Store, target: str | Scope, since: Revision | None, timeout: float | None
) -> Iterator[Change]:
    """`store.follow`, except that an agent or market first written after the watch began is
    followed from its first change, not announced as a reset."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if end is None else max(0.0, end - time.monotonic())
        for change in store.changes.follow(target, since, timeout=left):
            if change.op == "reset" and since is None:
                since = Revision(epoch=change.revision.epoch, counter=0)
                break
            yield change
        else:
            return


@command("watch", OPERATE)
def watch(
    agent: Annotated[str | None, agent_option("Follow this agent's scopes.")] = None,
    market: Annotated[
        str | None,
        typer.Option(metavar="NAME", show_default=False, help="Follow this market instead."),
    ] = None,
    since: Annotated[
        Revision | None,
        typer.Option(
            parser=parse_revision,
            metavar="REV",
            show_default=False,
            help="Start after this revision (default: now).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0, metavar="SECONDS", show_default=False, help="Stop after this many seconds."
        ),
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print changes as they commit, one line each (JSON lines with --json), until Ctrl-C."""
    if (agent is None) == (market is None):
        raise typer.BadParameter("give --agent A or --market M", param_hint="--agent")
    target: str | Scope = agent if agent else Scope.market(_ids("market", [market or ""])[0])
    with opened(store_url, token) as store:
        current = store.revision(target)
        if current is None:
            domain = target.domain if isinstance(target, Scope) else f"agents/{target}"
            _warn_unknown(store, {domain: None})
        start = since or current
        err.print(
            f"watching {'agent ' + agent if agent else 'market ' + str(market)} from revision "
            f"{start or 'none (nothing written yet)'}; Ctrl-C to stop"
        )
        try:
            for change in _follow(store, target, start, timeout):
                if as_json:
                    typer.echo(json.dumps(_change_json(change)))
                elif change.op == "reset":
                    out.print(
                        f"{change.revision}  [yellow]reset[/yellow]  the change log no longer "
                        "reaches back: reload"
                    )
                else:
                    colour = "green" if change.op == "put" else "red"
                    out.print(
                        f"{change.revision}  [{colour}]{change.op:<6}[/{colour}] "
                        f"{change.scope}/{shown(change.skill or '')}  version {change.version}"
                    )
        except KeyboardInterrupt:
            err.print("stopped")


@command("gc", OPERATE)
def gc(
    grace: Annotated[
        float | None,
        typer.Option(
            min=0,
            metavar="SECONDS",
            show_default=False,
            help="Keep unreferenced blobs used within this many seconds (default: the store's, "
            "1 hour); longer than any reasoning step.",
        ),
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete blobs no live or kept version references, and history past its retention."""
    with (
        opened(store_url, token, create=True) as store,
        Progress(
            SpinnerColumn(),
            TextColumn("{task.description}: {task.completed}"),
            console=err,
            transient=True,
        ) as progress,
    ):
        tasks = {
            "mark": progress.add_task("marking (skills)", total=None),
            "sweep": progress.add_task("sweeping (blobs)", total=None),
        }
        report = store.gc(grace, progress=lambda phase, n: progress.advance(tasks[phase], n))
    data = report.model_dump()
    if as_json:
        emit_json(data)
        return
    cells = [[key.replace("_", " "), str(value)] for key, value in data.items()]
    print_table(["", "count"], cells, right={"count"})
