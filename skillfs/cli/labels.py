"""Labels (docs/governance.md, "Labels and pins"): `skillfs label set|rm|ls`. Setting, moving
or removing a label is one audited commit; workers pinned to it follow at their next step."""

from __future__ import annotations

from typing import Annotated

import typer

from skillfs.cli.common import (
    JsonOption,
    MessageOption,
    ScopeOption,
    SkillArgument,
    StoreOption,
    TokenOption,
    emit_json,
    guarded,
    iso,
    opened,
    out,
    print_table,
    shown,
    skill_only,
    when,
)
from skillfs.cli.govern import done
from skillfs.cli.helptext import Command, Group
from skillfs.model.ops import WriteOptions

app = typer.Typer(
    name="label",
    help="Name kept versions of a skill (stable, …) that workers pin to: set, rm, ls.",
    no_args_is_help=True,
    cls=Group,
)

LabelArgument = Annotated[
    str, typer.Argument(metavar="LABEL", show_default=False, help="A label, e.g. stable.")
]


@app.command("set", cls=Command)
@guarded
def set_label(
    target: SkillArgument,
    label: LabelArgument,
    scope: ScopeOption,
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            metavar="N",
            show_default=False,
            help="The kept version to label (default: the live one); `skillfs history` lists them.",
        ),
    ] = None,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set LABEL on a version of SKILL, or move it there: one commit, in the audit; workers
    pinned to LABEL are served that version from their next step."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        result = store.labels.set(
            scope, skill, label, version, options=WriteOptions(message=message)
        )
        named = store.manifest(scope, skill).labels[label].version
    done(f"{label} now names version {named} of", scope, skill, result, as_json)


@app.command("rm", cls=Command)
@guarded
def remove_label(
    target: SkillArgument,
    label: LabelArgument,
    scope: ScopeOption,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove LABEL from SKILL: workers pinned to it are served the head from their next step."""
    skill = skill_only(target)
    with opened(store_url, token, create=True) as store:
        result = store.labels.remove(scope, skill, label, options=WriteOptions(message=message))
    done(f"removed {label} from", scope, skill, result, as_json)


@app.command("ls", cls=Command)
@guarded
def list_labels(
    target: SkillArgument,
    scope: ScopeOption,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The labels of SKILL: the version each names, who set it and when (`latest` is always
    the live version)."""
    skill = skill_only(target)
    with opened(store_url, token) as store:
        m = store.manifest(scope, skill)
    held = sorted(m.labels.items())
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "skill": skill,
                "latest": m.version,
                "labels": [
                    {"label": name, "version": h.version, "actor": h.actor,
                     "labelled_at": iso(h.labelled_at)}
                    for name, h in held
                ],
            }
        )  # fmt: skip
        return
    rows = [["latest", str(m.version), "", "the live version"]]
    rows += [[shown(n), str(h.version), shown(h.actor), when(h.labelled_at)] for n, h in held]
    print_table(["LABEL", "VERSION", "SET BY", "WHEN"], rows, right={"VERSION"})
    if not held:
        out.print(f"no labels on {scope}/{shown(skill)}: `skillfs label set {skill} stable`")
