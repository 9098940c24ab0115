"""`skillfs check-names`: the skill names stored before the look-alike rule that it would
refuse now (docs/security.md, "Look-alike names"). Read-only: names are never rewritten; an
operator renames or deletes what it lists (`skillfs mv`, `skillfs rm`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated

from skillfs.api import Store
from skillfs.cli.common import (
    BROWSE,
    JsonOption,
    StoreOption,
    TokenOption,
    command,
    emit_json,
    every_scope,
    opened,
    out,
    plural,
    scope_option,
    shown,
)
from skillfs.model import Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.names import look_alikes, name_problem


@dataclass(frozen=True)
class NameFinding:
    scope: str
    name: str
    #: `look-alike`, `hidden-characters`, `spaces` or `not-nfkc`
    problem: str
    message: str
    twins: list[str] = field(default_factory=list)


def check_scope(store: Store, scope: Scope) -> list[NameFinding]:
    """The names of a scope's live entries (skills, drafts, archived skills) that the rule
    would refuse as new: look-alikes of each other, or a name that shows like another."""
    names = sorted(
        {
            ref.name
            for ref in (EntryRef.parse(k) for k, m in store.entries(scope).items() if not m.deleted)
            if ref.kind is not EntryKind.LEGACY
        }
    )
    found = [
        NameFinding(
            str(scope), name, "look-alike",
            f"looks like {', '.join(repr(t) for t in twins)} in the same scope: readers cannot "
            "tell them apart; rename or delete all but one",
            twins,
        )
        for name, twins in look_alikes(names).items()
    ]  # fmt: skip
    for name in names:
        problem = name_problem(name)
        if problem is not None:
            found.append(NameFinding(str(scope), name, problem[0], problem[1]))
    return sorted(found, key=lambda f: (f.name, f.problem))


@command("check-names", BROWSE)
def check_names(
    scope: Annotated[
        Scope | None,
        scope_option("Check this scope only (default: every scope of the store)."),
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List skill names that look like another of their scope, or hold invisible characters,
    surrounding spaces or a non-NFKC form: stored before skillfs refused them. Exit 1 when
    any is found."""
    import typer

    with opened(store_url, token) as store:
        scopes = [scope] if scope is not None else every_scope(store)
        found = [f for s in scopes for f in check_scope(store, s)]
    if as_json:
        emit_json([asdict(f) for f in found])
    elif not found:
        out.print(f"no look-alike or hidden-character names in {plural(len(scopes), 'scope')}")
    else:
        for f in found:
            out.print(
                f"[bold]{shown(f.scope)}[/bold]  {shown(repr(f.name))}  "
                f"[yellow]{f.problem}[/yellow]  {shown(f.message)}"
            )
        out.print(f"{plural(len(found), 'name')} to look at in {plural(len(scopes), 'scope')}")
    if found:
        raise typer.Exit(1)
