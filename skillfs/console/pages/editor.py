"""The editor: one file of a skill, its findings as you type, and saving it on top of the
version the operator loaded (`store.edits.edit_file` under the editor's conflict policy), with
what changed meanwhile when the store could not write it."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call, HTTPError, redirect
from skillfs.console.diff import FileDiff, as_text, diff_manifests, diff_text
from skillfs.console.findings import (
    ShownFinding,
    findings_of,
    shown,
    skill_md_text,
    stored_findings,
)
from skillfs.console.pages.rollout import (
    RULE_FIELDS,
    candidate_manifest,
    rollout_of,
    rule_fields,
)
from skillfs.console.skill_files import MAX_EDIT_BYTES, file_tree, with_file
from skillfs.console.strict import forced
from skillfs.errors import (
    Conflict,
    EditConflict,
    FailedPrecondition,
    InvalidArgument,
    InvalidSkill,
)
from skillfs.governance.edits import ConflictPolicy
from skillfs.governance.rollout_rule import has_live
from skillfs.model import (
    Candidate,
    CommitResult,
    File,
    FileEntry,
    Finding,
    Manifest,
    Rollout,
    Scope,
    error_findings,
)
from skillfs.model.names import check_skill_name, normalize_path
from skillfs.spec.skill_md import SKILL_MD
from skillfs.util.text_merge import has_markers

#: Files edited as prose, soft-wrapped; any other file keeps its lines as they are (code).
PROSE_SUFFIXES = (".md", ".markdown", ".mdx", ".txt", ".rst")
#: The largest frontmatter the validation API parses: YAML parsing is what costs CPU.
MAX_FRONTMATTER_BYTES = 64 * 1024


def editor_page(call: Call, scope: Scope, skill: str, path: str = "") -> Response:
    call.require(Level.read, scope)
    if not path:
        chosen = call.query.get("path")  # the "new text file" form
        target = normalize_path(chosen) if chosen else SKILL_MD
        return redirect(urls.skill_url(scope, skill, "files", target))
    path = normalize_path(path)
    live = call.store.manifest(scope, skill)
    on_candidate = live.candidate is not None and (
        call.query.get("candidate") == "1" or not has_live(live)
    )
    m = candidate_manifest(live) if on_candidate else live
    entry = m.files.get(path)
    content: str | None = ""
    if entry is not None:
        content = as_text(call.store.read_entry(entry)) if entry.size <= MAX_EDIT_BYTES else None
    text = skill_md_text(call.store, m) if path == SKILL_MD else None
    return render_editor(
        call,
        scope,
        m,
        path,
        content,
        findings=shown(stored_findings(call.store, scope, m), text),
        base=m.version,
        expected=m.version,
        stored=live,
        on_candidate=on_candidate,
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
    markers: bool = False,
    conflict: dict[str, Any] | None = None,
    refusal: str = "",
    stored: Manifest | None = None,
    on_candidate: bool = False,
) -> Response:
    """The editor of `path` in `m` (the candidate's files when `on_candidate`); `stored` is
    the skill's entry as stored now (its staged candidate, whether it was ever live)."""
    staged = stored.candidate if stored is not None else None
    newline = "crlf" if content and "\r\n" in content else "lf"
    return call.render_scope(
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
        markers=markers,
        conflict=conflict,
        canary=_canary_fields(call, staged if on_candidate else None),
        refusal=refusal,
        message=call.field("message") if call.method == "POST" else "",
        staged=staged,
        on_candidate=on_candidate,
        staged_only=stored is not None and not has_live(stored),
        prose=path.lower().endswith(PROSE_SUFFIXES),
        tree=file_tree(sorted(set(m.files) | {path})),
    )


def _canary_fields(call: Call, editing: Candidate | None) -> dict[str, str] | None:
    """The rollout rule the editor's form holds when its save stages a candidate: as posted,
    when a **Save as canary** is shown again (refused, conflicting, a bad rule); the staged
    rule, when the candidate itself is edited (`editing`). None: a plain save."""
    if call.method == "POST" and call.field("canary") == "1":
        return {k: call.field(k) for k in RULE_FIELDS}
    return rule_fields(editing.rollout) if editing is not None else None


def _edit_text(call: Call, field: str) -> str:
    """A posted text with the file's own line endings (browsers send CRLF)."""
    text = call.field(field).replace("\r\n", "\n")
    return text.replace("\n", "\r\n") if call.field("newline") == "crlf" else text


def _policy(call: Call) -> ConflictPolicy:
    """What the save does when someone else committed since the operator loaded the file:
    **Overwrite with my text** (`use=mine`) writes over theirs; else the editor's choice, merge
    (the default) or stop and show what changed (`on_conflict=fail`)."""
    if call.field("use") == "mine":
        return ConflictPolicy.RETRY
    chosen = call.field("on_conflict") or ConflictPolicy.MERGE.value
    if chosen not in (ConflictPolicy.MERGE.value, ConflictPolicy.FAIL.value):
        raise HTTPError(400, "Bad request", f"on_conflict is merge or fail, not {chosen!r}")
    return ConflictPolicy(chosen)


def save(call: Call, scope: Scope, skill: str) -> Response:
    """Save one file of the version the operator loaded (`base`) on top of `expected`, by
    `store.edits.edit_file` under the editor's conflict policy: when someone else committed
    meanwhile, the store merges the edit into theirs (or, asked to, stops), and the editor
    comes back only with what it could not write."""
    call.require(Level.write, scope)
    path = normalize_path(call.field("path"))
    base, expected = call.form_int("base"), call.form_int("expected")
    policy = _policy(call)
    # after a conflict, **Overwrite with my text** saves the operator's edit from before the
    # merge (`mine`), else the editor's text
    mine = call.field("use") == "mine" and bool(call.field("mine"))
    text = _edit_text(call, "mine" if mine else "content")
    data = text.encode("utf-8")
    stored = call.store.manifest(scope, skill, version=base)
    # editing the staged candidate: its files are the base, and the save stages them again
    on_candidate = call.field("candidate") == "1" and stored.candidate is not None
    loaded = candidate_manifest(stored) if on_candidate else stored
    files = with_file(loaded, path, data)

    def again(status: int, **why: Any) -> Response:
        """The editor again with the text kept and its findings (the warnings too)."""
        findings = findings_of(call.store, scope, skill, files)
        return render_editor(
            call,
            scope,
            loaded,
            path,
            text,
            findings=shown(findings, text if path == SKILL_MD else None),
            base=base,
            expected=expected,
            status=status,
            stored=stored,
            on_candidate=on_candidate,
            conflict=_conflict_again(call, scope, skill, loaded, path, text, on_candidate),
            **why,
        )

    def refused(markers: bool) -> Response:
        """With **Save anyway**: the spec refused it, or it still holds conflict markers."""
        return again(422, needs_force=True, markers=markers)

    if has_markers(text) and not forced(call):
        return refused(markers=True)
    canary = call.field("canary") == "1" or on_candidate
    try:
        rule = rollout_of(call) if canary else None
    except InvalidArgument as exc:  # the text stays in the editor, with what to fix in the rule
        return again(400, refusal=str(exc))
    try:
        result = _write(call, scope, loaded, path, data, files, rule, expected, policy)
    except InvalidSkill:
        return refused(markers=False)
    except Conflict as exc:
        findings = findings_of(call.store, scope, skill, files)
        return _conflict(call, scope, loaded, path, text, findings, exc, policy, rule, on_candidate)
    except (InvalidArgument, FailedPrecondition) as exc:  # a message too long, a skill switched
        return again(exc.http_status, refusal=str(exc))  # off below: the text stays
    if rule is not None:
        return call.done(
            urls.skill_url(scope, skill) + "#rollout",
            f"Staged {path} as a canary for {rule.describe()}: {skill} version {result.version}; "
            "everyone else keeps the live files",
        )
    moved = ""
    if expected and result.version > expected + 1:  # written on a version committed since
        kept = (
            f"your text replaced theirs of {path}"
            if policy is ConflictPolicy.RETRY
            else "their changes kept"
        )
        moved = (
            f" on top of version {result.version - 1}, committed since you loaded version "
            f"{expected} ({kept})"
        )
    return call.done(
        urls.skill_url(scope, skill, "files", path),
        f"Saved {path}{moved}: {skill} is now version {result.version} "
        f"(agent revision {result.revision.counter})",
    )


def _write(
    call: Call,
    scope: Scope,
    loaded: Manifest,
    path: str,
    data: bytes,
    files: dict[str, File | FileEntry],
    rule: Rollout | None,
    expected: int,
    policy: ConflictPolicy,
) -> CommitResult:
    """The save's one commit: the loaded files with this one staged as a canary under `rule`;
    a skill deleted meanwhile re-created (`expected` 0) with them; else this file edited
    (`store.edits.edit_file`) from the version loaded on top of `expected`, the other files
    as they are then, under `policy`."""
    strict = not forced(call)
    if rule is not None:
        return call.store.rollouts.stage(
            scope, loaded.skill, files, rule, options=call.options(expected), strict=strict
        )
    if expected == 0:
        return call.store.publish(
            scope, loaded.skill, files, expected_version=0, strict=strict, actor=call.actor,
            message=call.message,
        )  # fmt: skip
    entry = loaded.files.get(path)
    return call.store.edits.edit_file(
        scope,
        loaded.skill,
        path,
        data,
        base=call.store.read_entry(entry) if entry is not None else None,
        on_conflict=policy,
        options=call.options(expected),
        strict=strict,
    )


#: What a conflict page offers, by what the save met (editor.html's conflict panel):
#: `markers`, both changed the same lines (the store's merge, with conflict markers, saved on
#: their version); `stopped`, the operator chose to stop (merge or overwrite now); `unmerged`,
#: their file cannot be merged as text (overwrite it or reload); `canary`, a canary staged on
#: their version as typed; `deleted`, re-create it or leave it deleted.
CONFLICT_KINDS = ("markers", "stopped", "unmerged", "canary", "deleted")


def _conflict(
    call: Call,
    scope: Scope,
    loaded: Manifest,
    path: str,
    text: str,
    findings: list[Finding],
    exc: Conflict,
    policy: ConflictPolicy,
    rule: Rollout | None,
    on_candidate: bool,
) -> Response:
    """The editor again, after someone else committed what the save could not be written on:
    against the version the store met (`exc.current_version`; 0, deleted), holding the store's
    merge with conflict markers (`EditConflict.merged`) when both changed the same lines, else
    the operator's text as it was. A merge is saved on their version; a stopped or unmerged
    edit keeps the version loaded, so **Merge** and **Overwrite** send it again under that
    policy. Editing the candidate, theirs is the candidate staged then (or the live version,
    when none is staged any more)."""
    skill = loaded.skill
    met = exc.current_version
    if met is None:  # the store did not say: the skill as it is now
        now = call.store.manifests(scope, [skill]).get(skill)
    else:  # the version it met; 0: deleted (in a user's scope, the user's own copy)
        now = call.store.manifest(scope, skill, version=met) if met else None
    if now is not None and now.deleted:
        now = None
    on_candidate = on_candidate and now is not None and now.candidate is not None
    current = candidate_manifest(now) if now is not None and on_candidate else now
    if current is None:
        kind = "deleted"
    elif rule is not None:
        kind = "canary"
    elif isinstance(exc, EditConflict):
        kind = "markers"
    else:
        kind = "stopped" if policy is ConflictPolicy.FAIL else "unmerged"
    content = text
    if isinstance(exc, EditConflict) and kind == "markers":
        content = exc.merged.decode("utf-8", errors="surrogateescape")
    conflict = _conflict_view(call, kind, loaded, current, path, text)
    on_theirs = kind in ("markers", "canary")  # else the edit is sent again as it was
    return render_editor(
        call,
        scope,
        current or loaded,
        path,
        content,
        findings=shown(findings, text if path == SKILL_MD else None),
        base=current.version if current is not None and on_theirs else loaded.version,
        expected=(current.version if on_theirs else loaded.version) if current else 0,
        status=409,
        conflict=conflict,
        stored=now,
        on_candidate=on_candidate,
    )


def _conflict_again(
    call: Call,
    scope: Scope,
    skill: str,
    on: Manifest,
    path: str,
    text: str,
    on_candidate: bool,
) -> dict[str, Any] | None:
    """The conflict a save from the conflict page answers (its `loaded`, `theirs` and
    `conflict` fields), for showing that page again when the save is refused: a conflict page
    never offers a plain **Save**. The operator's text stays as they left it."""
    kind = call.field("conflict")
    if not call.field("loaded") or kind not in CONFLICT_KINDS:
        return None
    old = call.store.manifest(scope, skill, version=call.form_int("loaded"))
    loaded = candidate_manifest(old) if on_candidate and old.candidate is not None else old
    theirs = call.form_int("theirs")
    current = None
    if theirs:
        now = on if on.version == theirs else call.store.manifest(scope, skill, version=theirs)
        current = candidate_manifest(now) if on_candidate and now.candidate is not None else now
    mine = _edit_text(call, "mine") if call.field("mine") else text
    return _conflict_view(call, kind, loaded, current, path, mine)


def _conflict_view(
    call: Call, kind: str, loaded: Manifest, current: Manifest | None, path: str, mine: str
) -> dict[str, Any]:
    """The conflict panel of the operator's edit `mine` of `loaded`, now that `current` is
    committed (None: deleted): what changed between them, and their file against `mine`."""
    diffs = diff_manifests(call.store, loaded, current)
    ours = loaded.files.get(path)
    theirs = current.files.get(path) if current else None
    same_file = current is not None and (ours.sha256 if ours else None) != (
        theirs.sha256 if theirs else None
    )
    their_text = _text_of(call, theirs)
    yours = None
    if their_text is not None and theirs is not None:
        yours = FileDiff(path, "modified", theirs, None, lines=diff_text(their_text, mine))
    return {
        "kind": kind,
        "loaded": loaded,
        "current": current,
        "diffs": diffs,
        "yours": yours,
        "same_file": same_file,
        "mine": mine,
    }


def _text_of(call: Call, entry: FileEntry | None) -> str | None:
    """A stored file's text; None when it is missing, binary or too large to edit here."""
    if entry is None or entry.size > MAX_EDIT_BYTES:
        return None
    return as_text(call.store.read_entry(entry))


def _too_large_to_check(content: str, path: str) -> str | None:
    """Why an edit is too large to validate as you type, if it is: any token that may read a
    scope may call the validation API, so its cost is capped (docs/console.md, "Limits")."""
    size = len(content.encode("utf-8"))
    if size > MAX_EDIT_BYTES:
        return f"the text is {size} bytes; files over {MAX_EDIT_BYTES} bytes are not checked here"
    if path == SKILL_MD and content.startswith("---"):
        end = content.find("\n---", 3)
        head = len(content[: end if end >= 0 else len(content)].encode("utf-8"))
        if head > MAX_FRONTMATTER_BYTES:
            return (
                f"the frontmatter is over {MAX_FRONTMATTER_BYTES} bytes, too large to check "
                "as you type; the store checks it when you save"
            )
    return None


def api_validate(call: Call) -> Response:
    """Findings for an edit in progress: the loaded version with one file replaced."""
    body = call.json
    if not isinstance(body, dict):
        raise HTTPError(400, "Bad request", "send a JSON object")
    base = body.get("base", 0)
    if not isinstance(base, int) or isinstance(base, bool) or base < 0:
        return JSONResponse(
            {"error": f"base {base!r}: give the version the edit began from, 0 or more"}, 400
        )
    try:
        scope = Scope.parse(str(body.get("scope", "")))
        skill = check_skill_name(str(body.get("skill", "")))
        path = normalize_path(str(body.get("path", "")))
    except InvalidArgument as exc:
        return JSONResponse({"error": str(exc)}, 400)
    call.require(Level.read, scope)
    content = str(body.get("content", ""))
    too_large = _too_large_to_check(content, path)
    if too_large:
        return JSONResponse({"error": too_large}, 413)
    m = call.store.manifest(scope, skill, version=base)
    findings = findings_of(call.store, scope, skill, with_file(m, path, content.encode("utf-8")))
    errors = len(error_findings(findings))
    return JSONResponse(
        {
            "findings": [
                f.__dict__ for f in shown(findings, content if path == SKILL_MD else None)
            ],
            "errors": errors,
            "warnings": len(findings) - errors,
        }
    )
