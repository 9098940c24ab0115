"""Read-only commands: ls, cat, history, diff, usage."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from skillfs.api import Store
from skillfs.cli.common import (
    BROWSE,
    AgentOption,
    FileArgument,
    JsonOption,
    ScopeOption,
    SkillArgument,
    StoreOption,
    Target,
    TokenOption,
    agent_option,
    command,
    emit_json,
    file_only,
    iso,
    manifest_row,
    mode,
    nothing_in,
    one_line,
    opened,
    out,
    plain,
    print_patch,
    print_table,
    scope_option,
    shown,
    size,
    skill_only,
    status,
    target_argument,
    version_option,
    version_row,
    when,
)
from skillfs.cli.profiles import said as said_profiles
from skillfs.cli.review import said
from skillfs.cli.text import unified
from skillfs.errors import NotFound
from skillfs.governance.host_profiles import ProfilesSetting
from skillfs.governance.review import ReviewRule
from skillfs.model import FileEntry, Manifest, Scope, UsageDrop, UsageStat, usage_by_skill
from skillfs.model.names import ARCHIVE, DRAFTS, is_hidden_dir, side_entry
from skillfs.model.pins import labels_by_version
from skillfs.store.core import file_of
from skillfs.store.rules import REVIEW
from skillfs.store.scope_profiles import PROFILES
from skillfs.util.suggest import closest

VersionOption = Annotated[int | None, version_option("A kept version (default: latest).")]


@command("ls", BROWSE)
def ls(
    target: Annotated[
        Target | None,
        target_argument("SKILL[/PATH]", "A skill of --scope, or a file or directory of it."),
    ] = None,
    scope: Annotated[
        Scope | None,
        scope_option("shared:AGENT, user:AGENT/USER or market:NAME: list its skills."),
    ] = None,
    agent: Annotated[str | None, agent_option("List its scopes.")] = None,
    version: VersionOption = None,
    deleted: Annotated[
        bool,
        typer.Option(
            "--deleted", help="With --scope: the deleted skills, to bring back with rollback."
        ),
    ] = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List agents and markets, an agent's scopes, a scope's skills, or a skill's files.

    No option: agents and markets. --agent A: its scopes. --scope S: its skills with version,
    files, size and validity; with --deleted, its deleted skills and the version to roll back
    to. --scope S SKILL (or SKILL/DIR, SKILL/FILE): files with size, mode and SHA-256."""
    if target is not None and scope is None:
        raise typer.BadParameter("listing a skill needs --scope", param_hint="SKILL")
    if deleted and (scope is None or target is not None):
        raise typer.BadParameter("--deleted lists a scope's skills: give --scope S and no SKILL")
    with opened(store_url, token) as store:
        if scope is not None and deleted:
            _ls_deleted(store, scope, as_json)
        elif scope is not None and target is not None:
            _ls_files(store, scope, target, version, as_json)
        elif scope is not None:
            _ls_skills(store, scope, as_json)
        elif agent is not None:
            _ls_scopes(store, agent, as_json)
        else:
            _ls_domains(store, as_json)


def _ls_domains(store: Store, as_json: bool) -> None:
    domains = [("agent", a) for a in store.agents()] + [("market", m) for m in store.markets()]
    revisions = store.domain_revisions([f"{kind}s/{name}" for kind, name in domains])
    rows = [
        {"kind": kind, "id": name, "revision": str(revisions[f"{kind}s/{name}"])}
        for kind, name in domains
    ]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        out.print(f"store {shown(store.url)} holds no skills yet: try `skillfs import DIR`")
        return
    cells = [[row["kind"], shown(row["id"]), row["revision"]] for row in rows]
    print_table(["kind", "id", "revision"], cells)


def _ls_scopes(store: Store, agent: str, as_json: bool) -> None:
    scopes = store.scopes(agent)
    if not scopes:
        raise NotFound(nothing_in(store, Scope.shared(agent)))
    if as_json:
        emit_json([{"scope": str(s), "kind": s.kind, "user": s.user_id} for s in scopes])
        return
    out.print(f"agent {shown(agent)} at revision {store.revision(agent)}")
    cells = [[shown(str(s)), s.kind, shown(s.user_id or "")] for s in scopes]
    print_table(["scope", "kind", "user"], cells)


def _ls_skills(store: Store, scope: Scope, as_json: bool) -> None:
    """A scope's skills; its drafts and archived skills are named after them, not listed as
    skills (docs/governance.md)."""
    manifests = store.manifests(scope)
    if not manifests and store.revision(scope) is None:
        raise NotFound(nothing_in(store, scope))
    side = {name for name in manifests if side_entry(name) is not None}
    rows = [manifest_row(manifests[name]) for name in sorted(manifests) if name not in side]
    if as_json:
        emit_json(rows)
        return
    _ls_table(store, scope, manifests, rows)
    if REVIEW in manifests:  # live: the scope's two-person rule holds
        out.print(said(ReviewRule.of(scope, manifests[REVIEW])))
    if PROFILES in manifests:  # live: the scope names its host profiles
        out.print(said_profiles(ProfilesSetting.of(scope, manifests[PROFILES], store.profiles)))
    for where, hint in ((DRAFTS, "skillfs drafts ls"), (ARCHIVE, "skillfs restore NAME")):
        names = sorted(n.split("/", 1)[1] for n in side if n.startswith(where + "/"))
        if names:
            out.print(f"{where}: {shown(', '.join(names))} ({hint} -s {scope})")


def _ls_table(
    store: Store, scope: Scope, manifests: dict[str, Manifest], rows: list[dict[str, Any]]
) -> None:
    if not rows:
        users = store.users(scope.agent_id) if scope.kind == "user" and scope.agent_id else []
        near = closest(scope.user_id or "", users)
        mean = f" (did you mean {near}?)" if near else ""
        others = (
            f"{mean}; users of {scope.agent_id} with skills: {', '.join(users)}" if users else ""
        )
        out.print(f"{scope} holds no skills{shown(others)}")
        return
    cells = [
        [
            shown(row["skill"]),
            str(row["version"]),
            str(row["files"]),
            size(row["size"]),
            status(manifests[row["skill"]]),
            one_line(row["description"] or ""),
        ]
        for row in rows
    ]
    columns = ["skill", "version", "files", "size", "status", "description"]
    print_table(columns, cells, right={"version", "files", "size"}, flexible="description")


def _ls_deleted(store: Store, scope: Scope, as_json: bool) -> None:
    """The scope's deleted skills, each with the last version that held files: what
    `rollback --to` brings back, or, for an archived one, `restore` (docs/cli.md). Drafts
    and archive entries are no skills, deleted or not."""
    tombstones = store.manifests(scope, deleted=True)
    if not tombstones and store.revision(scope) is None:
        raise NotFound(nothing_in(store, scope))
    rows: list[dict[str, Any]] = []
    for name in sorted(n for n in tombstones if not is_hidden_dir(n)):
        tomb = tombstones[name]
        last = next((v for v in store.versions(scope, name) if v.file_count), None)
        rows.append(
            {
                "skill": name,
                "version": tomb.version,
                "commit_id": tomb.commit_id,
                "deleted_at": iso(tomb.committed_at),
                "archived": tomb.operation == "archive",
                "last_version": last.version if last else None,
                "files": last.file_count if last else 0,
                "size": last.size if last else 0,
                "description": last.description if last else None,
            }
        )
    if as_json:
        emit_json(rows)
        return
    if not rows:
        out.print(f"{scope} has no deleted skills")
        return
    cells = [
        [
            shown(row["skill"]),
            when(tombstones[row["skill"]].committed_at),
            str(row["version"]),
            "archived" if row["archived"] else str(row["last_version"] or "none kept"),
            str(row["files"]),
            size(row["size"]),
            one_line(row["description"] or ""),
        ]
        for row in rows
    ]
    columns = ["skill", "deleted", "version", "restore", "files", "size", "description"]
    print_table(
        columns, cells, right={"version", "restore", "files", "size"}, flexible="description"
    )
    out.print(
        f"bring one back with: skillfs rollback SKILL --scope {scope} --to RESTORE", style="dim"
    )
    if any(row["archived"] for row in rows):
        out.print(f"an archived one with: skillfs restore SKILL --scope {scope}", style="dim")


def _ls_files(
    store: Store, scope: Scope, target: Target, version: int | None, as_json: bool
) -> None:
    m = store.manifest(scope, target.skill, version)
    entries = _select(m, scope, target.path)
    rows = [
        {"path": p, "size": e.size, "mode": mode(e), "sha256": e.sha256, "mtime": iso(e.mtime)}
        for p, e in entries.items()
    ]
    if as_json:
        emit_json(rows)
        return
    out.print(f"{scope}/{shown(m.skill)} version {m.version}  {status(m)}")
    cells = [[shown(p), size(e.size), mode(e), e.sha256[:12]] for p, e in entries.items()]
    print_table(["path", "size", "mode", "sha256"], cells, right={"size"})


def _select(m: Manifest, scope: Scope, path: str | None) -> dict[str, FileEntry]:
    """The file `path`, or the files below the directory `path`, or all files."""
    if path is None:
        return dict(sorted(m.files.items()))
    if path in m.files:
        return {path: m.files[path]}
    below = {p: e for p, e in sorted(m.files.items()) if p.startswith(path + "/")}
    if not below:
        file_of(m, scope, path)  # raises NotFound listing the files there are
    return below


@command("cat", BROWSE)
def cat(
    target: FileArgument,
    scope: ScopeOption,
    version: VersionOption = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
) -> None:
    """Write a file's bytes to stdout, untouched."""
    path = file_only(target)
    with opened(store_url, token) as store:
        data = store.read(scope, target.skill, path, version)
    typer.echo(data, nl=False)


@command("history", BROWSE)
def history(
    target: SkillArgument,
    scope: ScopeOption,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every kept version of a skill, newest first (a deletion is a version too), with the
    labels that name it now (docs/governance.md, "Labels and pins")."""
    skill = skill_only(target)
    with opened(store_url, token) as store:
        versions = store.versions(scope, skill)
    named = labels_by_version(versions)
    if as_json:
        emit_json([{**version_row(m), "labelled": named.get(m.version, [])} for m in versions])
        return
    cells = [
        [
            str(m.version),
            ", ".join(shown(n) for n in named.get(m.version, [])),
            when(m.committed_at),
            m.commit_id[:12],
            str(m.file_count),
            size(m.size),
            "[dim]deleted[/dim]" if m.deleted else status(m),
            shown(m.actor),
            one_line(m.message),
        ]
        for m in versions
    ]
    columns = ["version", "labels", "when", "commit", "files", "size", "status", "actor", "message"]
    print_table(columns, cells, right={"version", "files", "size"}, flexible="message")


@command("diff", BROWSE)
def diff(
    target: Annotated[
        Target, target_argument("SKILL[/PATH]", "A skill, or one file or directory of it.")
    ],
    scope: ScopeOption,
    old: Annotated[
        int | None,
        typer.Argument(metavar="V1", show_default=False, help="Default: the version before V2."),
    ] = None,
    new: Annotated[
        int | None, typer.Argument(metavar="V2", show_default=False, help="Default: the latest.")
    ] = None,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """What changed between two versions of a skill (default: the latest and the one before).

    A unified diff of every changed text file; binary files by hash; mode changes. Version 0
    is the empty skill, so `diff SKILL 0` shows all of it."""
    with opened(store_url, token) as store:
        kept = {m.version: m for m in store.history(scope, target.skill)}
        new_m = _version(kept, new if new is not None else max(kept), scope, target.skill)
        new_v = new_m.version if new_m else 0
        if old is None:
            old = max((v for v in kept if v < new_v), default=0)
        old_m = _version(kept, old, scope, target.skill)
        old_files = _under(old_m, target.path)
        new_files = _under(new_m, target.path)
        changed = sorted(
            p
            for p in old_files.keys() | new_files.keys()
            if (a := old_files.get(p)) is None
            or (b := new_files.get(p)) is None
            or (a.sha256, a.mode) != (b.sha256, b.mode)
        )
        data = store.read_entries(
            e for p in changed for e in (old_files.get(p), new_files.get(p)) if e is not None
        )
    entries = [_file_diff(p, old, new_v, old_files.get(p), new_files.get(p), data) for p in changed]
    if as_json:
        emit_json(entries)
        return
    if not entries:
        out.print(f"no differences between version {old} and version {new_v}")
    for entry in entries:
        _print_file_diff(entry)


def _version(kept: dict[int, Manifest], version: int, scope: Scope, skill: str) -> Manifest | None:
    """The kept manifest of `version` (None for version 0, the empty skill)."""
    if version == 0:
        return None
    if version not in kept:
        raise NotFound(
            f"version {version} of {scope}/{skill} is not kept; kept versions: "
            + ", ".join(map(str, sorted(kept, reverse=True)))
        )
    return kept[version]


def _under(m: Manifest | None, path: str | None) -> dict[str, FileEntry]:
    if m is None:
        return {}
    if path is None:
        return dict(m.files)
    return {p: e for p, e in m.files.items() if p == path or p.startswith(path + "/")}


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _file_diff(
    path: str,
    v1: int,
    v2: int,
    a: FileEntry | None,
    b: FileEntry | None,
    data: dict[str, bytes],
) -> dict[str, Any]:
    """One changed file as `diff --json` prints it; `diff` is None for binary files."""
    before = _text(data[a.sha256]) if a else ""
    after = _text(data[b.sha256]) if b else ""
    patch = None
    if (
        before is not None
        and after is not None
        and (a is None or b is None or a.sha256 != b.sha256)
    ):
        patch = unified(
            before, after, f"a/{path}" if a else "/dev/null", f"b/{path}" if b else "/dev/null"
        )
    return {
        "path": path,
        "status": "added" if a is None else "removed" if b is None else "modified",
        "from_version": v1,
        "to_version": v2,
        "old": _entry_json(a),
        "new": _entry_json(b),
        "binary": before is None or after is None,
        "diff": patch,
    }


def _entry_json(e: FileEntry | None) -> dict[str, Any] | None:
    return None if e is None else {"sha256": e.sha256, "size": e.size, "mode": mode(e)}


def _print_file_diff(entry: dict[str, Any]) -> None:
    a, b = entry["old"], entry["new"]
    out.print(
        Text(
            plain(
                f"{entry['status']} {entry['path']} (version {entry['from_version']} → "
                f"{entry['to_version']})"
            ),
            style="bold",
        )
    )
    if a and b and a["mode"] != b["mode"]:
        out.print(f"mode {a['mode']} → {b['mode']}")
    if entry["binary"]:
        old = f"{a['sha256'][:12]} ({a['size']} bytes)" if a else "nothing"
        new = f"{b['sha256'][:12]} ({b['size']} bytes)" if b else "nothing"
        out.print(f"binary file: {old} → {new}")
        return
    print_patch(entry["diff"] or "")


@command("usage", BROWSE)
def usage(
    agent: AgentOption,
    by_skill: Annotated[
        bool,
        typer.Option("--by-skill", help="One row per skill: loads summed over its users."),
    ] = False,
    drops: Annotated[
        bool,
        typer.Option("--drops", help="The drops of the usage instead (skillfs drop-usage)."),
    ] = False,
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """How often workers loaded each skill and when last, per user (--by-skill: per skill),
    most used first; --drops: who dropped which usage, when and why, newest first."""
    with opened(store_url, token) as store:
        detail, dropped = store.usage.with_drops(agent)
    if drops:
        _print_drops(agent, dropped, as_json)
        return
    stats: dict[tuple[str, str], UsageStat] = (
        {("", name): st for name, st in usage_by_skill(detail).items()} if by_skill else detail
    )
    ranked = sorted(stats.items(), key=lambda kv: (-kv[1].count, kv[0]))
    rows: list[dict[str, Any]] = [
        ({} if by_skill else {"user": user})
        | {"skill": skill, "count": st.count}
        | {"last_used": iso(st.last_used) if st.last_used else None}
        for (user, skill), st in ranked
    ]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        out.print(f"no usage recorded for agent {shown(agent)} yet")
        return
    cells = [
        ([] if by_skill else [shown(user)])
        + [shown(skill), str(st.count), when(st.last_used) if st.last_used else "unknown"]
        for (user, skill), st in ranked
    ]
    header = ([] if by_skill else ["user"]) + ["skill", "loads", "last used"]
    print_table(header, cells, right={"loads"})


def _print_drops(agent: str, drops: list[UsageDrop], as_json: bool) -> None:
    if as_json:
        emit_json([d.model_dump(mode="json") for d in drops])
        return
    if not drops:
        out.print(f"no usage of agent {shown(agent)} was ever dropped")
        return
    cells = [
        [
            when(d.at),
            shown(d.actor),
            ", ".join(map(shown, d.users)) if d.users is not None else "every",
            ", ".join(map(shown, d.skills)) if d.skills is not None else "every",
            str(d.dropped),
            one_line(d.reason),
        ]
        for d in drops
    ]
    print_table(["when", "by", "users", "skills", "counters", "why"], cells, right={"counters"})
