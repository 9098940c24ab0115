"""`skillfs check`: what a store holds that the identity rules now refuse (docs/security.md).

Read-only. Today it lists file paths stored before the path caps, longer or deeper than a
new path may be (`skillfs.model.names.path_over_caps`): they stay readable, but what writes
skills to disk (`materialize()`, `skillfs export`, fsspec `get`) skips their skill.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from skillfs.api import Store
from skillfs.cli.common import (
    OPERATE,
    JsonOption,
    StoreOption,
    TokenOption,
    command,
    emit_json,
    every_scope,
    opened,
    out,
    parse_scope,
    plural,
    shown,
)
from skillfs.model import Scope
from skillfs.model.names import MAX_PATH_BYTES, MAX_PATH_DEPTH, path_over_caps, shown_path


def over_caps(store: Store, scope: Scope) -> list[dict[str, Any]]:
    """The stored paths of `scope` (live files and staged candidates of every entry, drafts
    and archived skills included) over the path caps, each with why."""
    rows = []
    for entry, m in sorted(store.entries(scope).items()):
        if m.deleted:
            continue
        tables = [("live", m.files)]
        if m.candidate is not None:
            tables.append(("candidate", m.candidate.files))
        for where, files in tables:
            for path in sorted(files):
                over = path_over_caps(path)
                if over is not None:
                    rows.append(
                        {"scope": str(scope), "skill": entry, "version": m.version,
                         "where": where, "path": path, "bytes": len(path.encode()),
                         "depth": path.count("/") + 1, "problem": over}
                    )  # fmt: skip
    return rows


@command("check", OPERATE)
def check(
    scopes: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            "-s",
            metavar="SCOPE",
            show_default=False,
            help="Check this scope (shared:AGENT, user:AGENT/USER or market:NAME); "
            "repeatable. Default: every scope of the store.",
        ),
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List what the store holds that a write would now refuse: file paths over
    1,024 UTF-8 bytes or 32 segments, stored before those caps. Read-only; exit 1 when
    something is listed."""
    wanted = [parse_scope(s) for s in scopes or []]
    with opened(store_url, token) as store:
        checked = wanted or every_scope(store)
        rows = [row for scope in checked for row in over_caps(store, scope)]
    if as_json:
        emit_json({"scopes": [str(s) for s in checked], "paths_over_caps": rows,
                   "caps": {"bytes": MAX_PATH_BYTES, "depth": MAX_PATH_DEPTH}})  # fmt: skip
    else:
        for row in rows:
            out.print(
                f"{shown(row['scope'])} {shown(row['skill'])} v{row['version']}"
                f"{' (candidate)' if row['where'] == 'candidate' else ''}: "
                f"{shown(shown_path(row['path']))}: {row['problem']}"
            )
        out.print(
            f"{plural(len(checked), 'scope')} checked: {plural(len(rows), 'path')} over the "
            f"caps ({MAX_PATH_BYTES:,} bytes, {MAX_PATH_DEPTH} segments)"
            + ("; rename them (they are read, but not written to disk)" if rows else "")
        )
    if rows:
        raise typer.Exit(1)
