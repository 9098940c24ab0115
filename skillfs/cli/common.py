"""What every store command shares: options, opening the store, errors as one red line, output.

Commands register here with `@command(name, panel)`; `skillfs.cli.register` adds them to
the `skillfs` app. Usage errors (bad option values) exit 2 through click; a `SkillfsError` or a
local file error exits 1 with one line on stderr, never a traceback.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple, ParamSpec, Protocol, TypeVar
from urllib.parse import urlsplit

import typer
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from skillfs.api import Store, open_store
from skillfs.errors import InvalidArgument, SkillfsError
from skillfs.model import (
    CandidateSummary,
    FileEntry,
    Finding,
    Manifest,
    Revision,
    Scope,
    VersionSummary,
    error_findings,
)
from skillfs.model.names import SIDE_DIRS, check_entry, check_id, normalize_path
from skillfs.model.pins import Pins
from skillfs.store.opening import default_url, file_to_create
from skillfs.util.durations import parse_duration
from skillfs.util.suggest import closest

P = ParamSpec("P")
R = TypeVar("R")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

#: How long a command waits for a store that does not answer before saying so: an operator at
#: a terminal wants the outage reported quickly, not after the library's 10 s default.
RETRY_FOR = 3.0

BROWSE, EDIT, TRANSFER, OPERATE = "Browse", "Edit", "Import and export", "Operate"


class Registered(NamedTuple):
    name: str
    panel: str
    function: Callable[..., Any]


COMMANDS: list[Registered] = []


def guarded(function: Callable[P, R]) -> Callable[P, R]:
    """The command, with the errors an operator can act on turned into one red line."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except SkillfsError as exc:
            raise fail(str(exc)) from None
        except OSError as exc:  # local files: import/export directories, the editor
            where = f": {exc.filename}" if exc.filename else ""
            raise fail(f"{exc.strerror or exc}{where}") from None

    return run


def command(name: str, panel: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register a store command (`guarded`)."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        run = guarded(function)
        COMMANDS.append(Registered(name, panel, run))
        return run

    return decorate


#: What a terminal acts on instead of showing: C0 and C1 control characters (ESC starts the
#: escape sequences that recolour, move the cursor or retitle the window), DEL, and the
#: bidirectional overrides that reorder what a reader sees. Newline and tab are handled apart.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(text: str, *, multiline: bool = False) -> str:
    """`text` safe to print: skill names, descriptions and paths come from whoever wrote the
    skill, so their control characters are dropped (docs/cli.md, "What the CLI prints").
    Newlines and tabs become spaces unless `multiline`."""
    if not multiline:
        text = text.replace("\n", " ").replace("\t", " ")
    return _CONTROL.sub("", text)


def shown(text: str) -> str:
    """`plain(text)` as literal rich markup: what every printer puts around stored text."""
    return escape(plain(text))


def one_line(text: str) -> str:
    """A description for a table cell: `shown`, with runs of whitespace (newlines of a block
    scalar included) collapsed to one space, so a row stays one line."""
    return escape(" ".join(plain(text).split()))


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `message` as one red line on stderr; raise the returned Exit."""
    err.print(f"[red]error:[/red] {shown(message)}")
    return typer.Exit(code=code)


def interactive() -> bool:
    """Whether a person can answer questions (tests patch this to drive the prompts)."""
    return sys.stdin.isatty()


def confirmed(question: str, refused: str, yes: bool, unattended: str | None = None) -> None:
    """Go on when `--yes` was given or a person answers yes; else fail with `refused`. Nobody
    at a terminal is a no: a script must say --yes, as `unattended` (one sentence, when the
    default would not read as one) tells it."""
    if yes:
        return
    if not interactive():
        raise fail(
            unattended or f"{refused}: no terminal to ask; pass --yes to go ahead without asking"
        )
    if not typer.confirm(question):
        raise fail(refused)


#: What json.dumps(ensure_ascii=False) leaves raw that a terminal still acts on (CSI is \x9b).
_C1 = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def emit_json(data: Any) -> None:
    """JSON on stdout, untouched by rich (no wrapping, no colour), for scripts. The data is
    exact; the characters a terminal would act on are written as \\u escapes."""
    text = json.dumps(data, indent=2, ensure_ascii=False)  # escapes C0 controls as \\u00XX
    typer.echo(_C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


# ------------------------------------------------------------------------- argument types


class Target(NamedTuple):
    """`SKILL` or `SKILL/PATH` as the commands take them."""

    skill: str
    path: str | None

    def __str__(self) -> str:
        return self.skill if self.path is None else f"{self.skill}/{self.path}"


def parse_target(text: str) -> Target:
    """`SKILL[/PATH]`; a draft or archived skill is `_drafts/NAME[/PATH]` (one entry)."""
    skill, _, path = text.partition("/")
    if skill in SIDE_DIRS and path:
        name, _, path = path.partition("/")
        skill = f"{skill}/{name}"
    try:
        return Target(check_entry(skill), normalize_path(path) if path else None)
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_scope(text: str) -> Scope:
    try:
        return Scope.parse(text)
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_agent(text: str) -> str:
    try:
        return check_id("agent", text)
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_revision(text: str) -> Revision:
    try:
        return Revision.parse(text)
    except ValueError:
        raise typer.BadParameter(
            f"invalid revision {text!r}: give one as skillfs printed it (EPOCH:COUNTER)"
        ) from None


def duration(text: str, option: str, *, zero: bool = False) -> float:
    """Seconds of a duration option (30d, 2h, …); a bad one exits 2 naming the option."""
    try:
        return parse_duration(text, option, zero=zero)
    except InvalidArgument as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def target_argument(metavar: str, help: str) -> Any:
    """A skill argument (`SKILL`, `SKILL/PATH` or `SKILL[/PATH]`, as `metavar` says)."""
    return typer.Argument(parser=parse_target, metavar=metavar, show_default=False, help=help)


def scope_option(help: str) -> Any:
    return typer.Option(
        "--scope", "-s", parser=parse_scope, metavar="SCOPE", show_default=False, help=help
    )


def agent_option(help: str) -> Any:
    return typer.Option(
        "--agent", "-a", parser=parse_agent, metavar="AGENT", show_default=False, help=help
    )


def version_option(help: str) -> Any:
    """`--version N`, without a short flag: `-v` reads as "verbose" (docs/cli.md)."""
    return typer.Option("--version", min=1, metavar="N", show_default=False, help=help)


def plural(n: int, noun: str) -> str:
    """`1 error`, `2 errors`, `0 warnings`."""
    return f"{n} {noun}{'s' * (n != 1)}"


StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="SKILLFS_STORE",
        metavar="URL",
        show_default=False,
        help="Store URL (sqlite:///…, redis://…, etcd://…, postgresql://…, grpc://…); "
        "default $SKILLFS_STORE, else the embedded SQLite file.",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="SKILLFS_TOKEN",
        metavar="TOKEN",
        show_default=False,
        help="Bearer token for a grpc:// store.",
    ),
]
ScopeOption = Annotated[Scope, scope_option("shared:AGENT, user:AGENT/USER or market:NAME.")]
AgentOption = Annotated[str, agent_option("Agent id.")]
#: The environment a worker's view declares (prompt, mcp; docs/governance.md).
EnvironmentOption = Annotated[
    str | None,
    typer.Option(
        "--environment",
        metavar="ENV",
        show_default=False,
        help="The environment the worker declares to staged rollouts (e.g. prod).",
    ),
]
#: The labels a worker's view is pinned to (prompt, mcp; docs/governance.md, "Labels and pins").
PinsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--pin",
        metavar="[TARGET=]LABEL",
        show_default=False,
        help="Hold the view on labelled versions (repeatable): LABEL for every store layer, "
        "market:NAME=LABEL for a layer, SKILL=LABEL for one skill.",
    ),
]


def pins_of(values: list[str] | None) -> Pins:
    """`--pin` values as Pins, a bad one a usage error (before anything is opened)."""
    try:
        return Pins.parse(values or [])
    except SkillfsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--pin") from None


#: The market layers of a worker's view, for the commands that show one (prompt, mcp).
MarketsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--market",
        metavar="NAME",
        show_default=False,
        help="A market layer, lowest first (repeatable).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
#: `--force` means one thing in every command: allow a result that breaks the Agent Skills spec.
ForceOption = Annotated[
    bool,
    typer.Option("--force", "-f", help="Allow a result that breaks the Agent Skills spec."),
]
#: `--message` means one thing in every command that writes: why, kept with the version it
#: writes (`history`, `audit`). Every such command takes it (tests/test_cli_messages.py).
MessageOption = Annotated[
    str,
    typer.Option(
        "--message", "-m", metavar="TEXT", help="Why: kept in the skill's history and the audit."
    ),
]
#: `--yes` means one thing in every command: do not ask, go ahead. Without it a command that
#: would ask refuses when nobody is at a terminal to answer.
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask: go ahead.")]
SkillArgument = Annotated[Target, target_argument("SKILL", "A skill.")]
FileArgument = Annotated[
    Target, target_argument("SKILL/PATH", "A file of a skill, e.g. my-skill/SKILL.md.")
]


def connect(url: str | None, token: str | None, *, create: bool = False) -> Store:
    """The store the options name; the token goes only to engines that take one (grpc).

    A SQLite file that does not exist is created only when `create` (the commands that write);
    a command that only reads refuses it, since a mistyped path (`sqlite:///tmp/x.db` is
    relative to the working directory) would otherwise show an empty new store."""
    url = url or default_url()
    path = None if create else file_to_create(url)
    if path is not None:
        raise fail(
            f"no store at {path}: check the URL (sqlite:///relative, sqlite:////absolute) "
            "or import skills first"
        )
    scheme = urlsplit(url).scheme
    options: dict[str, Any] = {"retry_for": RETRY_FOR}
    if token and scheme in ("grpc", "grpcs"):
        options["token"] = token
    return open_store(url, **options)


@contextmanager
def opened(url: str | None, token: str | None, *, create: bool = False) -> Iterator[Store]:
    """`connect`, closed at the end."""
    store = connect(url, token, create=create)
    try:
        yield store
    finally:
        store.close()


def check_write(store: Store, scope: Scope) -> None:
    """Raise PermissionDenied now if the store will refuse writes in `scope`, so an
    operator learns it before typing an edit, with the grant to ask for. A skillfs server
    (grpc://) answers from the token's grants and writes nothing; other stores let every
    caller write."""
    store.access(scope).require("write")


def skill_only(target: Target) -> str:
    """The skill of a target that must not name a file."""
    if target.path is not None:
        raise typer.BadParameter(
            f"give a skill, not a file: {target.skill}/{target.path} names a file of {target.skill}"
        )
    return target.skill


def file_only(target: Target) -> str:
    """The path of a target that must name a file."""
    if target.path is None:
        raise typer.BadParameter("name a file: SKILL/PATH, e.g. my-skill/SKILL.md")
    return target.path


# ------------------------------------------------------------------------- formatting


def when(timestamp: float) -> str:
    """Local time to the second with its zone, for people (`2026-11-22 00:29:05 CET`)."""
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def iso(timestamp: float) -> str:
    """UTC ISO 8601, for scripts."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


class Changed(Protocol):
    """A scope setting as last changed (ReviewRule, ProfilesSetting; version 0: never)."""

    @property
    def version(self) -> int: ...
    @property
    def actor(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def changed_at(self) -> float: ...


def last_change(setting: Changed) -> dict[str, Any]:
    """The `--json` fields of a setting's last change."""
    return {
        "version": setting.version,
        "actor": setting.actor,
        "message": setting.message,
        "changed_at": iso(setting.changed_at) if setting.version else None,
    }


def changed_by(head: str, setting: Changed, verb: str) -> str:
    """`head`, then who changed the setting last, when and why (nothing when never set)."""
    if not setting.version:
        return head
    why = f": {shown(setting.message)}" if setting.message else ""
    return f"{head}; {verb} by {shown(setting.actor)} at {when(setting.changed_at)}{why}"


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def mode(entry: FileEntry) -> str:
    return f"{entry.mode:04o}"


def status(m: Manifest | VersionSummary) -> str:
    """Validity at a glance: usable or not, how many findings, and a staged candidate."""
    v = m.summary() if isinstance(m, Manifest) else m
    if v.candidate is None:
        return _live_status(v)
    rule = v.candidate.rollout.describe()
    if not v.file_count and not v.disabled:
        return f"[cyan]⇡ staged only, for {rule}[/cyan]"
    return f"{_live_status(v)} [cyan]⇡ candidate for {rule}[/cyan]"


def _live_status(v: VersionSummary) -> str:
    errors = len(v.errors)
    warnings = len(v.findings) - errors
    if v.disabled:
        why = f": {one_line(v.disabled_reason)}" if v.disabled_reason else ""
        return f"[yellow]⏻ disabled{why}[/yellow]"
    if not v.usable:
        return f"[red]✗ unusable ({errors} error{'s' * (errors != 1)})[/red]"
    if errors:
        return f"[red]✗ {errors} error{'s' * (errors != 1)}[/red]"
    if warnings:
        return f"[yellow]! {warnings} warning{'s' * (warnings != 1)}[/yellow]"
    return "[green]✓[/green]"


def candidate_row(c: CandidateSummary) -> dict[str, Any]:
    """A staged candidate as `--json` prints it (docs/governance.md, "Staged rollout")."""
    return {
        **c.rollout.model_dump(mode="json"),
        "match": c.rollout.match,
        "excluded_users": list(c.rollout.excluded_users),
        "rule": c.rollout.describe(),
        "files": c.file_count,
        "errors": [f.message for f in error_findings(c.findings)],
        "staged_by": c.actor or None,
        "staged_at": iso(c.staged_at),
        "commit_id": c.commit_id,
    }


def manifest_row(m: Manifest) -> dict[str, Any]:
    """One skill as `ls --json` prints it: `version_row` with the whole description."""
    description = (m.frontmatter or {}).get("description")
    return {
        **version_row(m.summary()),
        "description": description if isinstance(description, str) else None,
    }


def version_row(v: VersionSummary) -> dict[str, Any]:
    """One version as `history --json` prints it."""
    return {
        "skill": v.skill,
        "version": v.version,
        "commit_id": v.commit_id,
        "committed_at": iso(v.committed_at),
        "deleted": v.deleted,
        "disabled": v.disabled,
        "disabled_reason": v.disabled_reason or None,
        "candidate": None if v.candidate is None else candidate_row(v.candidate),
        "labels": dict(v.labels),
        "actor": v.actor or None,
        "message": v.message or None,
        "files": v.file_count,
        "size": v.size,
        "usable": v.usable,
        "valid": not v.errors,
        "description": v.description,
        "errors": [f.message for f in v.errors],
        "warnings": [f.message for f in v.findings if f.severity == "warning"],
    }


def print_findings(findings: Sequence[Finding], console: Console = out) -> None:
    """One line each, errors first."""
    for f in sorted(findings, key=lambda f: f.severity != "error"):
        colour = "red" if f.severity == "error" else "yellow"
        console.print(f"    [{colour}]{f.severity:<8}[/{colour}] {shown(f.message)}")


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[str] = (),
    flexible: str | None = None,
) -> None:
    """A borderless table of rich-markup cells on stdout. Names and numbers are never cut (a
    cut name cannot be typed back, docs/cli.md): every column keeps its full width, and only
    `flexible` (a description) is cut with … to the room the terminal leaves, at least its
    header and 10 cells. When even that does not fit, the line is longer than the terminal:
    rich would otherwise shrink every column."""
    widths = [
        max([len(name), *(Text.from_markup(row[i]).cell_len for row in rows)])
        for i, name in enumerate(columns)
    ]
    padding = 2 * len(columns)  # each column is padded by one cell on both sides
    t = Table(box=None)
    for i, (name, width) in enumerate(zip(columns, widths, strict=True)):
        if name == flexible:
            room = out.width - (sum(widths) - width) - padding
            widths[i] = width = min(width, max(room, len(name), 10))
        justify: JustifyMethod = "right" if name in right else "left"
        t.add_column(name, no_wrap=True, overflow="ellipsis", width=width, justify=justify)
    for row in rows:
        t.add_row(*row)
    # rich caps a table at the terminal's width; render it at its own width instead
    lines = out.render_lines(t, out.options.update_width(max(out.width, sum(widths) + padding)))
    segments = [s for line in lines for s in (*_rstrip(line), Segment.line())]
    out.print(Segments(segments), end="", crop=False)


def _rstrip(line: list[Segment]) -> list[Segment]:
    """A rendered row without the blanks rich pads it with to the table's width (a copied or
    diffed row ended in runs of spaces)."""
    line = list(line)
    while line and not line[-1].text.rstrip():
        line.pop()
    if line:
        last = line[-1]
        line[-1] = Segment(last.text.rstrip(), last.style, last.control)
    return line


def print_patch(patch: str) -> None:
    """A unified diff in colour for people (added green, removed red, hunk headers cyan)."""
    for line in patch.splitlines():
        if line.startswith(("---", "+++")):
            style = "bold"
        elif line.startswith(("+", "-", "@@")):
            style = {"+": "green", "-": "red", "@": "cyan"}[line[0]]
        else:
            style = ""
        out.print(Text(plain(line, multiline=True), style=style))


def nothing_in(store: Store, scope: Scope) -> str:
    """Why a scope whose agent or market was never written is empty (most likely a typo), and
    the ids there are, as `ls --agent` says it."""
    kind, name, known = (
        ("market", scope.market_id, store.markets())
        if scope.kind == "market"
        else ("agent", scope.agent_id, store.agents())
    )
    near = closest(name or "", known)
    mean = f" (did you mean {near}?)" if near else ""
    return f"{kind} {name!r} has no skills in {store.url}{mean}; {kind}s: " + (
        ", ".join(known) or "none"
    )


def every_scope(store: Store) -> list[Scope]:
    """Every scope of every agent and market the store holds (the read-only checks)."""
    scopes = [s for agent in store.agents() for s in store.scopes(agent)]
    return list(dict.fromkeys([*scopes, *(Scope.market(m) for m in store.markets())]))
