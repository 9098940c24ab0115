"""`skillfs profiles`: the host profiles a scope accepts (docs/validation.md, "Host
profiles"), shown, named or cleared (`store.host_profiles`)."""

from __future__ import annotations

from typing import Annotated

import typer

from skillfs.cli.common import (
    EDIT,
    JsonOption,
    MessageOption,
    ScopeOption,
    StoreOption,
    TokenOption,
    changed_by,
    command,
    emit_json,
    fail,
    last_change,
    opened,
    out,
)
from skillfs.governance.host_profiles import ProfilesSetting
from skillfs.model.ops import WriteOptions
from skillfs.spec.profiles import PROFILES


@command("profiles", EDIT)
def profiles(
    scope: ScopeOption,
    names: Annotated[
        str | None,
        typer.Option(
            "--set",
            metavar="NAMES",
            show_default=False,
            help=f"Comma-separated profiles the scope accepts ({', '.join(PROFILES)}); spec "
            "is always one.",
        ),
    ] = None,
    clear: Annotated[
        bool,
        typer.Option("--clear", help="The scope names none of its own: the store's apply."),
    ] = False,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show or change the host profiles a scope accepts: a SKILL.md written there is judged
    under them (a host's own fields and names are no errors), by every surface and every
    process, whatever its $SKILLFS_PROFILES. Changing them needs an admin grant on the scope
    (over grpc://) and is a version the audit lists."""
    if names is not None and clear:
        raise fail("give --set NAMES or --clear, not both", code=2)
    with opened(store_url, token) as store:
        options = WriteOptions(message=message)
        if names is not None:
            chosen = [n.strip() for n in names.split(",") if n.strip()]
            store.host_profiles.accept(scope, chosen, options=options)
        elif clear:
            store.host_profiles.clear(scope, options=options)
        setting = store.host_profiles.setting(scope)
    if as_json:
        emit_json(
            {
                "scope": str(scope),
                "profiles": list(setting.profiles.names),
                "own": setting.own,
                **last_change(setting),
            }
        )
    else:
        out.print(said(setting))


def said(setting: ProfilesSetting) -> str:
    """The setting in words, with who changed it last, when and why."""
    accepted = ", ".join(setting.profiles.names)
    whose = "its own setting" if setting.own else "the store's profiles: it names none"
    return changed_by(f"{setting.scope} accepts {accepted} ({whose})", setting, "changed")
