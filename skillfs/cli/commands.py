"""The store commands of `skillfs` (docs/design.md §6b), one module per group.

`skillfs.cli.app` owns the app; `register` adds these commands to it, grouped in the help by panel.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add every store command to `app`."""
    from skillfs.cli import (  # noqa: F401  (they register)
        browse,
        check,
        check_names,
        curate,
        drafts,
        edit,
        export,
        govern,
        labels,
        mcp,
        ops,
        profiles,
        review,
        rollout,
        transfer,
    )
    from skillfs.cli.common import COMMANDS, EDIT
    from skillfs.cli.helptext import Command

    for name, panel, function in COMMANDS:
        app.command(name, rich_help_panel=panel, cls=Command)(function)
    app.add_typer(drafts.app, rich_help_panel=EDIT)
    app.add_typer(labels.app, rich_help_panel=EDIT)
