"""A skill's page: its findings and files, the users overriding it, or its tombstone."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console.call import Call
from skillfs.console.findings import shown, skill_md_text, stored_findings
from skillfs.console.pages.agents import MAX_USERS_LISTED
from skillfs.console.pages.rollout import candidate_manifest, reach
from skillfs.console.skill_files import file_tree
from skillfs.errors import NotFound
from skillfs.governance.rollout_rule import has_live
from skillfs.model import Manifest, Scope
from skillfs.spec.skill_md import parse_skill_md


def skill_page(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.read, scope)
    try:
        m = call.store.manifest(scope, skill)
    except NotFound:
        history = call.store.versions(scope, skill)  # NotFound again: never existed
        if not history or not history[0].deleted:
            raise
        return call.render_scope(
            "deleted.html",
            scope,
            skill=skill,
            tombstone=history[0],
            restore=next((h for h in history if not h.deleted), None),
        )
    if m.hides:
        return _hidden_page(call, scope, m)
    staged_only = m.candidate is not None and not has_live(m)
    panel = reach(call, scope, m)
    if staged_only:  # nothing live: the page shows what the rule's workers get
        m = candidate_manifest(m)
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
    if scope.kind == "user" and shared_scope is not None and call.can.read(shared_scope):
        base = call.store.manifests(shared_scope, [skill]).get(skill)
    text = skill_md_text(call.store, m)
    typed = m.typed  # a manifest stored before the typed reading: read it from SKILL.md
    if typed is None and text is not None:
        typed = parse_skill_md(text.encode()).typed
    return call.render_scope(
        "skill.html",
        scope,
        m=m,
        typed=typed,
        findings=shown(stored_findings(call.store, scope, m), text),
        tree=file_tree(list(m.files)),
        overrides=overrides,
        users=users,
        base=base,
        shared_scope=shared_scope,
        reach=panel,
        staged_only=staged_only,
    )


def _hidden_page(call: Call, scope: Scope, m: Manifest) -> Response:
    """A user's hiding entry: not a skill of the user's but the shared or market skill it
    hides from that user (docs/governance.md, "Disable and enable"), with **Unhide**."""
    below: list[tuple[Scope, Manifest]] = []
    candidates = [Scope.shared(scope.agent_id)] if scope.agent_id else []
    candidates += [Scope.market(mk) for mk in call.store.markets()]
    for where in candidates:
        if call.can.read(where):
            found = call.store.manifests(where, [m.skill]).get(m.skill)
            if found is not None:
                below.append((where, found))
    return call.render_scope("hidden.html", scope, m=m, below=below)
