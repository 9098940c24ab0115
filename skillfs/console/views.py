"""The console's pages and actions. Each handler checks the token's grant for the scope it
touches, reads through the store API, and writes with the version the operator loaded (C6)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.archive import read_zip, write_zip
from skillfs.console.diff import FileDiff, as_text, diff_manifests, diff_text
from skillfs.console.web import HTTPError, Response, json_response, redirect
from skillfs.errors import Conflict, InvalidPath, NotFound, SkillfsError
from skillfs.model import File, FileEntry, Finding, Manifest, Put, Remove, Revision, Scope
from skillfs.names import check_domain, check_id, check_skill_name, normalize_path
from skillfs.runtime import Market, Skills
from skillfs.skill_md import SKILL_MD, inspect_skill, skill_template

if TYPE_CHECKING:
    from skillfs.console.app import Call

#: Text files up to this size open in the editor; larger ones are downloaded and uploaded.
MAX_EDIT_BYTES = 2 * 1024 * 1024
#: The per-user listings stop here; an agent with more users is browsed by user id.
MAX_USERS_LISTED = 200
#: How often a live-update stream sends a comment, so proxies and the browser keep it open.
KEEPALIVE_SECONDS = 10.0


def route(call: Call) -> Response:
    """Dispatch on the path, which mirrors the store's logical keys (see `urls`)."""
    path = call.req.path
    parts = path.strip("/").split("/") if path.strip("/") else []
    method = call.req.method
    if not parts:
        return _get(method, lambda: home(call))
    if parts == ["events"]:
        return _get(method, lambda: events(call))
    if parts == ["api", "validate"]:
        return _post(method, lambda: api_validate(call))
    parsed = urls.parse_scope(parts)
    if parsed is not None:
        return scope_routes(call, *parsed)
    if parts == ["agents"] and call.req.query.get("agent"):
        return redirect(urls.scope_url(Scope.shared(call.req.query["agent"].strip())))
    if (
        parts[0] == "agents"
        and len(parts) == 3
        and parts[2] == "users"
        and call.req.query.get("user")
    ):
        return redirect(
            urls.user_url(
                check_id("agent", parts[1]), check_id("user", call.req.query["user"].strip())
            )
        )
    if parts[0] == "agents" and len(parts) == 2:
        return _get(method, lambda: agent_page(call, check_id("agent", parts[1])))
    if parts[0] == "agents" and len(parts) == 3 and parts[2] in ("users", "shared"):
        return redirect(urls.agent_url(parts[1]))
    if parts[0] == "agents" and len(parts) == 4 and parts[2] == "users":
        return _get(method, lambda: user_view(call, parts[1], parts[3]))
    if parts[0] == "markets" and len(parts) == 2:
        return redirect(urls.scope_url(Scope.market(parts[1])))
    raise HTTPError(404, "Not found", f"there is no page at {path}", "Start again from the agents.")


def _get(method: str, page: Any) -> Response:
    if method != "GET":
        raise HTTPError(405, "Method not allowed", "this page is only read")
    result: Response = page()
    return result


def _post(method: str, action: Any) -> Response:
    if method != "POST":
        raise HTTPError(405, "Method not allowed", "this action needs a form submission")
    result: Response = action()
    return result


def scope_routes(call: Call, scope: Scope, rest: list[str]) -> Response:
    method = call.req.method
    if not rest or rest == [""]:
        return scope_page(call, scope) if method == "GET" else scope_post(call, scope)
    skill = check_skill_name(rest[0])
    action = rest[1] if len(rest) > 1 else ""
    tail = "/".join(rest[2:])
    if action == "" and len(rest) <= 2:
        return _get(method, lambda: skill_page(call, scope, skill))
    if action == "files" and not tail and call.req.query.get("path"):
        return redirect(
            urls.skill_url(scope, skill, "files", normalize_path(call.req.query["path"]))
        )
    pages = {
        "files": lambda: editor_page(call, scope, skill, tail),
        "raw": lambda: download(call, scope, skill, tail),
        "zip": lambda: download_zip(call, scope, skill),
        "history": lambda: history_page(call, scope, skill),
        "diff": lambda: diff_page(call, scope, skill),
    }
    actions = {
        "save": lambda: save(call, scope, skill),
        "upload": lambda: upload(call, scope, skill),
        "rmfile": lambda: remove_file(call, scope, skill),
        "delete": lambda: delete(call, scope, skill),
        "rename": lambda: rename(call, scope, skill),
        "override": lambda: override(call, scope, skill),
        "rollback": lambda: rollback(call, scope, skill),
    }
    if action in pages:
        return _get(method, pages[action])
    if action in actions and not tail:
        return _post(method, actions[action])
    raise HTTPError(404, "Not found", f"a skill has no page {action!r}")


# ---------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class ShownFinding:
    """A finding as the editor shows it: with the SKILL.md line it is about, when known."""

    severity: str
    rule: str
    message: str
    line: int | None


def shown(findings: list[Finding], text: str | None) -> list[ShownFinding]:
    return [
        ShownFinding(f.severity, f.rule, f.message, finding_line(f, text) if text else None)
        for f in findings
    ]


_LINE = re.compile(r"\bline (\d+)")


def finding_line(f: Finding, text: str) -> int | None:
    """The SKILL.md line a finding points at: named in its message, or its field's line."""
    m = _LINE.search(f.message)
    if m:
        return int(m.group(1))
    if f.rule in ("frontmatter-missing", "frontmatter-unclosed", "empty", "bom"):
        return 1
    if f.field:
        lines = text.split("\n")
        for i, line in enumerate(lines[1:], start=2):
            if line.strip() == "---":
                break
            if re.match(rf"{re.escape(f.field)}\s*:", line):
                return i
        return 1
    return None


def check(call: Call, skill: str, files: Mapping[str, File | FileEntry]) -> list[Finding]:
    """The spec findings the skill would have if published with `files` now: new files, or
    stored ones kept by reference. Only SKILL.md is read."""
    md = files.get(SKILL_MD)
    texts = dict.fromkeys(files, b"")
    if md is not None:
        texts[SKILL_MD] = md.data if isinstance(md, File) else call.store.read_entry(md)
    return inspect_skill(skill, texts)[1]


def errors_of(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def stored_findings(call: Call, m: Manifest) -> list[Finding]:
    """A version's findings as the current rules see them."""
    return check(call, m.skill, m.files)


def skill_md_text(call: Call, m: Manifest) -> str | None:
    md = m.files.get(SKILL_MD)
    return as_text(call.store.read_entry(md)) if md else None


def confirm(call: Call, action: str, title: str, problems: dict[str, list[Finding]]) -> Response:
    """The "this breaks the spec" page: the findings and a button that repeats the request
    with `force` set, so only an explicit second click stores an off-spec skill
    (docs/design.md §7)."""
    fields = {k: v for k, v in call.req.form.items() if k not in ("csrf", "force")}
    return call.render(
        "confirm.html", 422, action=action, heading=title, problems=problems, fields=fields
    )


def forced(call: Call) -> bool:
    return call.req.form.get("force") == "1"


def file_tree(paths: list[str]) -> list[tuple[str, int, str]]:
    """Rows (kind, depth, path or directory name) for a skill's file list: SKILL.md first,
    then each directory's files under a heading."""
    rows: list[tuple[str, int, str]] = []
    seen: set[str] = set()
    for path in sorted(paths, key=lambda p: (p != SKILL_MD, p.split("/"))):
        parts = path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            if folder not in seen:
                seen.add(folder)
                rows.append(("dir", depth, parts[depth]))
        rows.append(("file", len(parts) - 1, path))
    return rows


def render_scope(
    call: Call, template: str, scope: Scope, status: int = 200, **context: Any
) -> Response:
    """A page about one scope, with the revision of its domain (shown in the header, and
    followed by the page's live updates)."""
    return call.render(
        template,
        status,
        scope=scope,
        domain=scope.domain,
        revision=call.store.revision(scope),
        **context,
    )


def with_file(m: Manifest, path: str, data: bytes) -> dict[str, File | FileEntry]:
    """A version's files (kept by reference) with `path` set to `data`, in the mode that file
    had (a new file's mode comes from its content)."""
    files: dict[str, File | FileEntry] = dict(m.files)
    old = m.files.get(path)
    files[path] = File(data, mode=old.mode if old else None)
    return files


# ---------------------------------------------------------------------- browsing


def home(call: Call) -> Response:
    nav = call.nav()
    domains = [f"agents/{a}" for a in nav["agents"]] + [f"markets/{m}" for m in nav["markets"]]
    revisions = call.store.domain_revisions(domains) if domains else {}
    agents = []
    for agent in nav["agents"]:
        shared = Scope.shared(agent)
        count = len(call.store.manifests(shared)) if call.can.read(shared) else None
        # only the users whose skills this token may read: a count of the others is a leak
        users = (
            len(call.can.readable_users(agent, call.store.users(agent)))
            if call.can.read_a_user(agent)
            else None
        )
        agents.append(
            {
                "id": agent,
                "skills": count,
                "users": users,
                "revision": revisions.get(f"agents/{agent}"),
            }
        )
    markets = [
        {
            "id": market,
            "skills": len(call.store.manifests(Scope.market(market))),
            "revision": revisions.get(f"markets/{market}"),
        }
        for market in nav["markets"]
        if call.can.read(Scope.market(market))
    ]
    return call.render("home.html", nav=nav, agents=agents, markets=markets)


def agent_page(call: Call, agent: str) -> Response:
    domain = f"agents/{agent}"
    call.require_domain(domain)
    shared = Scope.shared(agent)
    skills = call.store.manifests(shared) if call.can.read(shared) else None
    readable = call.can.readable_users(agent, call.store.users(agent))
    if skills is None and not readable:
        raise NotFound(f"agent {agent!r} has no skills you may see")
    users = []
    for user in readable[:MAX_USERS_LISTED]:
        scope = Scope.user(agent, user)
        own = call.store.manifests(scope)
        overrides = sorted(s for s in own if skills is not None and s in skills)
        users.append({"id": user, "scope": scope, "skills": len(own), "overrides": overrides})
    return call.render(
        "agent.html",
        agent=agent,
        shared=shared,
        skills=sorted((skills or {}).values(), key=lambda m: m.skill),
        can_read_shared=skills is not None,
        users=users,
        more_users=max(0, len(readable) - MAX_USERS_LISTED),
        domain=domain,
        revision=call.store.domain_revisions([domain])[domain],
    )


def scope_page(call: Call, scope: Scope) -> Response:
    call.require(Level.read, scope)
    manifests = call.store.manifests(scope)
    shared: dict[str, Manifest] = {}
    if scope.kind == "user" and scope.agent_id is not None:
        base = Scope.shared(scope.agent_id)
        if call.can.read(base):
            shared = call.store.manifests(base, sorted(manifests))
    return render_scope(
        call,
        "scope.html",
        scope,
        skills=sorted(manifests.values(), key=lambda m: m.skill),
        shared=shared,
    )


def skill_page(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.read, scope)
    try:
        m = call.store.manifest(scope, skill)
    except NotFound:
        history = call.store.history(scope, skill)  # NotFound again: never existed
        if not history or not history[0].deleted:
            raise
        return render_scope(
            call,
            "deleted.html",
            scope,
            skill=skill,
            tombstone=history[0],
            restore=next((h for h in history if not h.deleted), None),
        )
    overrides: list[tuple[str, Scope, Manifest]] = []
    users: list[str] = []
    base: Manifest | None = None
    shared_scope = Scope.shared(scope.agent_id) if scope.agent_id else None
    if scope.kind == "shared" and scope.agent_id is not None:
        known = call.store.users(scope.agent_id)
        for user in call.can.readable_users(scope.agent_id, known)[:MAX_USERS_LISTED]:
            target = Scope.user(scope.agent_id, user)
            found = call.store.manifests(target, [skill]).get(skill)
            if found is not None:
                overrides.append((user, target, found))
        # offered for the override form: only users this token may make one for
        users = call.can.writable_users(scope.agent_id, known)[:MAX_USERS_LISTED]
    if scope.kind == "user" and scope.agent_id is not None:
        shared = Scope.shared(scope.agent_id)
        if call.can.read(shared):
            base = call.store.manifests(shared, [skill]).get(skill)
    text = skill_md_text(call, m)
    return render_scope(
        call,
        "skill.html",
        scope,
        m=m,
        findings=shown(stored_findings(call, m), text),
        tree=file_tree(list(m.files)),
        overrides=overrides,
        users=users,
        base=base,
        shared_scope=shared_scope,
    )


def history_page(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.read, scope)
    history = call.store.history(scope, skill)
    live = history[0] if history and not history[0].deleted else None
    return render_scope(
        call,
        "history.html",
        scope,
        skill=skill,
        history=history,
        live=live,
    )


def _version_arg(call: Call, name: str) -> int | None:
    value = call.req.query.get(name, "")
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise HTTPError(400, "Bad request", f"{name} must be a version number") from None


def diff_page(call: Call, scope: Scope, skill: str) -> Response:
    """Two versions side by side: of this skill, or (with `base=shared`) the shared skill
    against this per-user override."""
    call.require(Level.read, scope)
    history = call.store.history(scope, skill)
    versions = [h.version for h in history]
    b = _version_arg(call, "b") or versions[0]
    right = call.store.manifest(scope, skill, version=b)
    left_scope = scope
    if call.req.query.get("base") == "shared" and scope.kind == "user" and scope.agent_id:
        left_scope = Scope.shared(scope.agent_id)
        call.require(Level.read, left_scope)
        left: Manifest | None = call.store.manifest(left_scope, skill)
    else:
        a = _version_arg(call, "a")
        if a is None:
            a = next((v for v in versions if v < b), b)
        left = call.store.manifest(scope, skill, version=a)
    diffs = diff_manifests(call.store, left, right)
    return render_scope(
        call,
        "diff.html",
        scope,
        skill=skill,
        left=left,
        right=right,
        left_scope=left_scope,
        versions=versions,
        diffs=diffs,
    )


def user_view(call: Call, agent: str, user: str) -> Response:
    """What a worker for (agent, user) sees now: the merged skills and the exact prompt block."""
    own = Scope.user(agent, user)
    shared = Scope.shared(agent)
    call.require(Level.read, own)
    call.require(Level.read, shared)
    all_markets = [m for m in call.store.markets() if call.can.read(Scope.market(m))]
    chosen = [m for m in call.req.query_lists.get("market", []) if m in all_markets]
    with Skills(call.store, agent, user, layers=[Market(m) for m in chosen]) as skills:
        snap = skills.snapshot()
    return call.render(
        "user.html",
        agent=agent,
        user=user,
        scope=own,
        snap=snap,
        prompt=snap.prompt(),
        markets=all_markets,
        chosen=chosen,
        own=sorted(call.store.manifests(own)),
        domain=f"agents/{agent}",
        revision=snap.revisions.get(f"agents/{agent}"),
    )


# ---------------------------------------------------------------------- files


def editor_page(call: Call, scope: Scope, skill: str, path: str) -> Response:
    call.require(Level.read, scope)
    if not path:
        return redirect(urls.skill_url(scope, skill, "files", SKILL_MD))
    path = normalize_path(path)
    m = call.store.manifest(scope, skill)
    entry = m.files.get(path)
    content: str | None = ""
    if entry is not None:
        content = as_text(call.store.read_entry(entry)) if entry.size <= MAX_EDIT_BYTES else None
    text = skill_md_text(call, m) if path == SKILL_MD else None
    return render_editor(
        call,
        scope,
        m,
        path,
        content,
        findings=shown(stored_findings(call, m), text),
        base=m.version,
        expected=m.version,
    )


def render_editor(
    call: Call,
    scope: Scope,
    m: Manifest,
    path: str,
    content: str | None,
    *,
    findings: list[ShownFinding],
    base: int,
    expected: int,
    status: int = 200,
    needs_force: bool = False,
    conflict: dict[str, Any] | None = None,
) -> Response:
    newline = "crlf" if content and "\r\n" in content else "lf"
    return render_scope(
        call,
        "editor.html",
        scope,
        status,
        m=m,
        path=path,
        entry=m.files.get(path),
        content=content,
        newline=newline,
        findings=findings,
        base=base,
        expected=expected,
        needs_force=needs_force,
        conflict=conflict,
        tree=file_tree(sorted(set(m.files) | {path})),
    )


def _edit_text(call: Call) -> bytes:
    """The textarea's text with the file's own line endings (browsers send CRLF)."""
    text = call.req.form.get("content", "").replace("\r\n", "\n")
    if call.req.form.get("newline") == "crlf":
        text = text.replace("\n", "\r\n")
    return text.encode("utf-8")


def save(call: Call, scope: Scope, skill: str) -> Response:
    """Save one file on top of the version the operator loaded; a conflict shows what changed."""
    call.require(Level.write, scope)
    path = normalize_path(call.req.form.get("path", ""))
    base, expected = call.form_int("base"), call.form_int("expected")
    data = _edit_text(call)
    loaded = call.store.manifest(scope, skill, version=base)
    files = with_file(loaded, path, data)
    findings = check(call, skill, files)
    text = data.decode("utf-8")
    if errors_of(findings) and not forced(call):
        return render_editor(
            call,
            scope,
            loaded,
            path,
            text,
            findings=shown(findings, text if path == SKILL_MD else None),
            base=base,
            expected=expected,
            status=422,
            needs_force=True,
        )
    try:
        result = call.store.publish(scope, skill, files, expected_version=expected)
    except Conflict:
        current = call.store.manifests(scope, [skill]).get(skill)
        diffs = diff_manifests(call.store, loaded, current)
        mine = loaded.files.get(path)
        theirs = current.files.get(path) if current else None
        yours = None
        if theirs is not None and theirs.size <= MAX_EDIT_BYTES:
            their_text = as_text(call.store.read_entry(theirs))
            if their_text is not None:
                yours = FileDiff(path, "modified", theirs, None, lines=diff_text(their_text, text))
        conflict = {
            "loaded": loaded,
            "current": current,
            "diffs": diffs,
            "yours": yours,
            "same_file": (mine.sha256 if mine else None) != (theirs.sha256 if theirs else None),
        }
        return render_editor(
            call,
            scope,
            current or loaded,
            path,
            text,
            findings=shown(findings, text if path == SKILL_MD else None),
            base=current.version if current else base,
            expected=current.version if current else 0,
            status=409,
            conflict=conflict,
        )
    return call.done(
        urls.skill_url(scope, skill, "files", path),
        f"Saved {path}: {skill} is now version {result.version} "
        f"(agent revision {result.revision.counter})",
    )


def upload(call: Call, scope: Scope, skill: str) -> Response:
    """Add or replace a file (binary or text) from the browser."""
    call.require(Level.write, scope)
    got = call.req.files.get("file")
    if got is None:
        raise HTTPError(400, "No file", "choose a file to upload")
    target = call.req.form.get("path", "").strip() or (
        call.req.form.get("dir", "").strip().strip("/") + "/" + got.filename.rsplit("/", 1)[-1]
    ).lstrip("/")
    path = normalize_path(target)
    expected = call.form_int("expected")
    m = call.store.manifest(scope, skill, version=expected)
    files = with_file(m, path, got.data)
    errors = errors_of(check(call, skill, files))
    if errors and not forced(call):
        return render_scope(
            call,
            "upload_rejected.html",
            scope,
            422,
            skill=skill,
            path=path,
            errors=errors,
            expected=expected,
        )
    result = call.store.publish(scope, skill, files, expected_version=expected)
    return call.done(
        urls.skill_url(scope, skill),
        f"Uploaded {path} ({len(got.data)} bytes): {skill} is now version {result.version}",
    )


def remove_file(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.write, scope)
    path = normalize_path(call.req.form.get("path", ""))
    expected = call.form_int("expected")
    m = call.store.manifest(scope, skill, version=expected)
    files: dict[str, File | FileEntry] = dict(m.files)  # kept by reference
    if path not in files:
        raise NotFound(f"{skill} version {expected} has no file {path!r}")
    del files[path]
    if not files:
        raise InvalidPath(f"{path} is the last file of {skill}: delete the skill instead")
    errors = errors_of(check(call, skill, files))
    if errors and not forced(call):
        return confirm(
            call,
            urls.skill_url(scope, skill, "rmfile"),
            f"Removing {path} leaves {skill} off-spec",
            {skill: errors},
        )
    result = call.store.publish(scope, skill, files, expected_version=expected)
    return call.done(
        urls.skill_url(scope, skill), f"Removed {path}: {skill} is now version {result.version}"
    )


def download(call: Call, scope: Scope, skill: str, path: str) -> Response:
    """A file's bytes, always as an attachment: skill content must never run in the console."""
    call.require(Level.read, scope)
    data = call.store.read(scope, skill, path, version=_version_arg(call, "version"))
    name = path.rsplit("/", 1)[-1]
    return _attachment(data, name)


def download_zip(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.read, scope)
    m = call.store.manifest(scope, skill, version=_version_arg(call, "version"))
    return _attachment(write_zip(call.store, m), f"{skill}-v{m.version}.zip")


def _attachment(data: bytes, filename: str) -> Response:
    ascii_name = re.sub(r"[^A-Za-z0-9._-]", "_", filename) or "file"
    return Response(
        data,
        content_type="application/octet-stream",
        headers=[
            (
                "Content-Disposition",
                f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}",
            ),
            ("Content-Length", str(len(data))),
        ],
    )


# ---------------------------------------------------------------------- skills


def scope_post(call: Call, scope: Scope) -> Response:
    op = call.req.form.get("op")
    if op == "new":
        return create(call, scope)
    if op == "import":
        return import_zip(call, scope)
    raise HTTPError(400, "Bad request", f"unknown action {op!r}")


def create(call: Call, scope: Scope) -> Response:
    call.require(Level.write, scope)
    name = check_skill_name(call.req.form.get("name", "").strip())
    description = call.req.form.get("description", "").strip()
    files = {SKILL_MD: File(skill_template(name, description))}
    errors = errors_of(check(call, name, files))
    if errors and not forced(call):
        return confirm(call, urls.scope_url(scope), f"{name} would break the spec", {name: errors})
    try:
        result = call.store.publish(scope, name, files, expected_version=0)
    except Conflict:
        raise HTTPError(
            409,
            "That skill exists",
            f"{scope} already has a skill {name!r}: pick another name, or edit that one",
        ) from None
    return call.done(
        urls.skill_url(scope, name, "files", SKILL_MD),
        f"Created {name} (version {result.version}): now write its instructions",
    )


def import_zip(call: Call, scope: Scope) -> Response:
    call.require(Level.write, scope)
    got = call.req.files.get("archive")
    if got is None:
        raise HTTPError(400, "No file", "choose a .zip file holding a skill directory")
    skills = read_zip(got.data, call.console.zip_limits, call.req.form.get("name", "").strip())
    problems = {
        name: errs
        for name, files in skills.items()
        if (errs := errors_of(check(call, name, files)))
    }
    if problems and not forced(call):
        return render_scope(
            call,
            "import_rejected.html",
            scope,
            422,
            problems=problems,
            replace=call.req.form.get("replace") == "1",
        )
    expected = None if call.req.form.get("replace") == "1" else 0
    try:
        result = call.store.commit(
            [Put(scope, name, dict(files), expected) for name, files in skills.items()]
        )
    except Conflict as exc:
        raise HTTPError(
            409,
            "A skill of that name exists",
            f"{exc}",
            "Tick “replace skills that exist” to overwrite them (their old versions stay "
            "in history).",
        ) from None
    names = sorted(result.versions)
    target = urls.skill_url(scope, names[0]) if len(names) == 1 else urls.scope_url(scope)
    return call.done(target, f"Imported {', '.join(names)} from {got.filename}")


def delete(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.write, scope)
    call.store.delete(scope, skill, expected_version=call.form_int("expected"))
    return call.done(
        urls.scope_url(scope), f"Deleted {skill}. It stays in history: restore it from there."
    )


_NAME_LINE = re.compile(r"^name[ \t]*:[ \t]*(['\"]?)(?P<name>[^'\"\n]*)\1[ \t]*$", re.MULTILINE)


def renamed_skill_md(data: bytes, old: str, new: str) -> bytes:
    """SKILL.md with its frontmatter `name` changed from `old` to `new` (the spec wants the name
    to equal the directory); anything else is left as it was."""
    text = as_text(data)
    if text is None or not text.startswith("---"):
        return data
    end = text.find("\n---", 3)
    if end < 0:
        return data
    head = text[:end]
    match = next((m for m in _NAME_LINE.finditer(head) if m.group("name").strip() == old), None)
    if match is None:
        return data
    head = head[: match.start()] + f"name: {new}" + head[match.end() :]
    return (head + text[end:]).encode()


def rename(call: Call, scope: Scope, skill: str) -> Response:
    """New name and removal of the old one in one commit, so no worker sees both or neither."""
    call.require(Level.write, scope)
    new = check_skill_name(call.req.form.get("new_name", "").strip())
    expected = call.form_int("expected")
    if new == skill:
        return redirect(urls.skill_url(scope, skill))
    m = call.store.manifest(scope, skill, version=expected)
    files: dict[str, File | FileEntry] = dict(m.files)  # the others kept by reference
    md = m.files.get(SKILL_MD)
    if md is not None:
        files[SKILL_MD] = File(
            renamed_skill_md(call.store.read_entry(md), skill, new), mode=md.mode
        )
    errors = errors_of(check(call, new, files))
    if errors and not forced(call):
        return confirm(
            call,
            urls.skill_url(scope, skill, "rename"),
            f"{new} would break the spec",
            {new: errors},
        )
    try:
        call.store.commit([Put(scope, new, dict(files), 0), Remove(scope, skill, expected)])
    except Conflict as exc:
        if exc.skill == new:
            raise HTTPError(
                409, "That name is taken", f"{scope} already has a skill {new!r}"
            ) from None
        raise
    return call.done(urls.skill_url(scope, new), f"Renamed {skill} to {new} in one commit")


def override(call: Call, scope: Scope, skill: str) -> Response:
    """Copy a shared skill into a user's scope, where it shadows the shared one for that user."""
    if scope.kind != "shared" or scope.agent_id is None:
        raise HTTPError(400, "Bad request", "overrides are made from an agent's shared skills")
    call.require(Level.read, scope)
    user = check_id("user", call.req.form.get("user", "").strip())
    target = Scope.user(scope.agent_id, user)
    call.require(Level.write, target)
    m = call.store.manifest(scope, skill, version=call.form_int("expected"))
    errors = errors_of(stored_findings(call, m))
    if errors and not forced(call):
        return confirm(
            call,
            urls.skill_url(scope, skill, "override"),
            f"The shared {skill} breaks the spec; the copy would too",
            {skill: errors},
        )
    try:
        result = call.store.publish(target, skill, m.files, expected_version=0)  # by reference
    except Conflict:
        raise HTTPError(
            409,
            "Override exists",
            f"user {user!r} already overrides {skill}: edit it at {urls.skill_url(target, skill)}",
        ) from None
    return call.done(
        urls.skill_url(target, skill, "files", SKILL_MD),
        f"Created {user}'s override of {skill} from shared version {m.version} "
        f"(user version {result.version}); only {user} sees the edits you make here",
    )


def rollback(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.write, scope)
    version = call.form_int("version")
    expected = call.form_int("expected")
    old = call.store.manifest(scope, skill, version=version)
    errors = errors_of(stored_findings(call, old))
    if errors and not forced(call):
        return confirm(
            call,
            urls.skill_url(scope, skill, "rollback"),
            f"Version {version} of {skill} breaks the spec",
            {skill: errors},
        )
    result = call.store.rollback(scope, skill, version, expected_version=expected)
    return call.done(
        urls.skill_url(scope, skill, "history"),
        f"Rolled {skill} back to the files of version {version}: it is now version "
        f"{result.version}",
    )


# ---------------------------------------------------------------------- live updates and API


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _rev(rev: Revision | None) -> dict[str, Any] | None:
    return None if rev is None else {"epoch": rev.epoch, "counter": rev.counter}


def events(call: Call) -> Response:
    """Server-Sent Events of one agent's (or market's) revision, fed by `store.follow`."""
    domain = call.req.query.get("domain", "")
    check_domain(domain)
    call.require_domain(domain)
    store, stop = call.store, call.console.stopping

    def stream() -> Iterator[bytes]:
        yield b"retry: 3000\n\n"
        rev: Revision | None = None
        while not stop.is_set():
            try:
                rev = store.domain_revisions([domain])[domain]
                yield _sse("revision", {"revision": _rev(rev)})
                for change in store.follow_domain(
                    domain, rev, timeout=KEEPALIVE_SECONDS, stop=stop
                ):
                    if change.op == "reset":
                        break  # the log cannot say what changed: read the revision again
                    rev = change.revision
                    yield _sse(
                        "change",
                        {
                            "revision": _rev(rev),
                            "op": change.op,
                            "scope": str(change.scope) if change.scope else None,
                            "skill": change.skill,
                            "version": change.version,
                        },
                    )
                yield b": keep-alive\n\n"
            except SkillfsError as exc:
                yield _sse("trouble", {"message": str(exc)})
                stop.wait(2.0)

    return Response(
        stream(),
        content_type="text/event-stream",
        headers=[("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
    )


def api_validate(call: Call) -> Response:
    """Findings for an edit in progress: the loaded version with one file replaced."""
    body = call.req.json
    if not isinstance(body, dict):
        raise HTTPError(400, "Bad request", "send a JSON object")
    try:
        scope = Scope.parse(str(body.get("scope", "")))
        skill = check_skill_name(str(body.get("skill", "")))
        path = normalize_path(str(body.get("path", "")))
        base = int(body.get("base", 0))
    except (InvalidPath, ValueError, TypeError) as exc:
        return json_response({"error": str(exc)}, 400)
    call.require(Level.read, scope)
    content = str(body.get("content", ""))
    m = call.store.manifest(scope, skill, version=base)
    files = {p: b"" for p in m.files}
    if path == SKILL_MD:
        files[SKILL_MD] = content.encode("utf-8")
        text: str | None = content
    else:
        files[path] = b""
        if SKILL_MD in m.files:
            files[SKILL_MD] = call.store.read_entry(m.files[SKILL_MD])
        text = None
    findings = shown(inspect_skill(skill, files)[1], text)
    return json_response(
        {
            "findings": [f.__dict__ for f in findings],
            "errors": sum(f.severity == "error" for f in findings),
            "warnings": sum(f.severity == "warning" for f in findings),
        }
    )
