"""A skill's kept versions: the list, two of them compared, and rolling back to one."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call, HTTPError
from skillfs.console.diff import diff_manifests
from skillfs.console.pages.rollout import candidate_manifest
from skillfs.console.strict import confirm, forced
from skillfs.errors import Conflict, InvalidSkill
from skillfs.model import CommitResult, Manifest, Scope
from skillfs.model.pins import labels_by_version


def history_page(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.read, scope)
    history = call.store.versions(scope, skill)
    live = history[0] if history and not history[0].deleted else None
    return call.render_scope(
        "history.html",
        scope,
        skill=skill,
        history=history,
        live=live,
        labels=labels_by_version(history),
    )


def label(call: Call, scope: Scope, skill: str) -> Response:
    """Set, move (`version`) or remove (`remove=1`) a label: one commit on the version the
    operator saw (docs/governance.md, "Labels and pins")."""
    call.require(Level.write, scope)
    name = call.field("label").strip()
    options = call.options(call.form_int("expected"))
    if call.field("remove") == "1":
        result = call.store.labels.remove(scope, skill, name, options=options)
        said = f"Removed {name} from {skill}: pinned workers get the head"
    else:
        version = call.form_int("version")
        result = call.store.labels.set(scope, skill, name, version, options=options)
        said = f"{name} now names version {version} of {skill}"
    return call.done(
        urls.skill_url(scope, skill, "history"), f"{said} (now version {result.version})"
    )


def diff_page(call: Call, scope: Scope, skill: str) -> Response:
    """Two versions side by side: of this skill, (with `base=shared`) the shared skill
    against this per-user override, or (with `candidate=1`) the live files against the
    staged candidate."""
    call.require(Level.read, scope)
    versions = [h.version for h in call.store.versions(scope, skill)]
    left_scope = scope
    left: Manifest | None
    if call.query.get("candidate") == "1":  # the staged candidate against the live files
        live = call.store.manifest(scope, skill)
        left, right = live, candidate_manifest(live)
    elif call.query.get("base") == "shared" and scope.kind == "user" and scope.agent_id:
        right = call.store.manifest(scope, skill, version=call.version_arg("b") or versions[0])
        left_scope = Scope.shared(scope.agent_id)
        call.require(Level.read, left_scope)
        left = call.store.manifest(left_scope, skill)
    else:
        b = call.version_arg("b") or versions[0]
        right = call.store.manifest(scope, skill, version=b)
        a = call.version_arg("a")
        if a is None:
            a = next((v for v in versions if v < b), b)
        left = call.store.manifest(scope, skill, version=a)
    diffs = diff_manifests(call.store, left, right)
    return call.render_scope(
        "diff.html",
        scope,
        skill=skill,
        left=left,
        right=right,
        left_scope=left_scope,
        versions=versions,
        diffs=diffs,
    )


def rollback(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.write, scope)
    version = call.form_int("version")
    result = _roll_back(call, scope, skill, version, call.form_int("expected"), "rollback")
    if isinstance(result, Response):
        return result
    return call.done(
        urls.skill_url(scope, skill, "history"),
        f"Rolled {skill} back to the files of version {version}: it is now version "
        f"{result.version}",
    )


def _roll_back(
    call: Call, scope: Scope, skill: str, version: int, expected: int, action: str
) -> CommitResult | Response:
    """A new version with the files of `version` (`store.edits.rollback`), strict unless
    forced: the commit, or the "breaks the spec" page whose **Do it anyway** posts to `action`
    again."""
    try:
        return call.store.edits.rollback(
            scope, skill, version, options=call.options(expected), strict=not forced(call)
        )
    except InvalidSkill as exc:
        return confirm(
            call,
            urls.skill_url(scope, skill, action),
            f"Version {version} of {skill} breaks the spec",
            {skill: exc.findings},
        )


def restore(call: Call, scope: Scope, skill: str) -> Response:
    """A deleted skill back: a new version with the files of the last version that held any
    (strict, as every console write). `deleted` names the tombstone the operator saw: when
    the skill changed since, nothing is written."""
    call.require(Level.write, scope)
    seen = call.form_int("deleted")
    history = call.store.versions(scope, skill)
    if not history or not history[0].deleted or history[0].version != seen:
        now = f"is at version {history[0].version}" if history else "has no history"
        raise HTTPError(
            409,
            "The skill changed",
            f"{skill} {now}, not the deletion (version {seen}) you saw",
            "Nothing was written. Look at its page and history, then decide again.",
        )
    last = next((h for h in history if not h.deleted and h.file_count), None)
    if last is None:
        raise HTTPError(
            404,
            "Nothing to restore",
            f"no kept version of {skill} holds files",
            "Its older versions are no longer kept: create it again.",
        )
    try:
        result = _roll_back(call, scope, skill, last.version, 0, "restore")
    except Conflict:
        raise HTTPError(
            409, "The skill exists again", f"{skill} was re-created meanwhile: nothing restored"
        ) from None
    if isinstance(result, Response):
        return result
    return call.done(
        urls.skill_url(scope, skill),
        f"Restored {skill} from version {last.version}: it is now version {result.version}",
    )
