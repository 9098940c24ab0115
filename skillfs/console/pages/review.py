"""The review queue (docs/governance.md, "Drafts and review"): every draft of an agent's scopes
(or a market's) waiting for review, one draft against the live skill it would replace, and
approve / approve as canary / reject with a reason. Each decision is one commit that also
removes the draft; a draft whose live skill moved since it was proposed is refused by the
store and nothing is written."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call, HTTPError
from skillfs.console.diff import diff_manifests
from skillfs.console.findings import shown, skill_md_text, stored_findings
from skillfs.console.pages.rollout import rollout_of
from skillfs.console.paging import paged
from skillfs.console.strict import confirm, forced
from skillfs.errors import InvalidSkill, NotFound
from skillfs.governance.drafts import Draft, draft_of
from skillfs.model import Manifest, Scope
from skillfs.model.names import draft_entry


def agent_queue(call: Call, agent: str) -> Response:
    """The drafts of every scope of the agent the token may read, newest first."""
    domain = f"agents/{agent}"
    call.require_domain(domain)
    return _queue(call, domain, agent)


def market_queue(call: Call, market: str) -> Response:
    scope = Scope.market(market)
    call.require(Level.read, scope)
    return _queue(call, scope.domain, market)


def _queue(call: Call, domain: str, name: str) -> Response:
    drafts = [d for d in call.store.drafts.list(domain) if call.can.read(d.scope)]
    drafts.sort(key=lambda d: (-d.committed_at, d.name))
    page = paged(drafts, call.query, _text)
    return call.render_domain(
        "review.html",
        domain,
        name,
        drafts=page.items,
        page=page,
    )


def _text(d: Draft) -> tuple[str, ...]:
    """What the queue's filter box matches a draft by."""
    return (d.name, d.actor, d.message, str(d.scope))


def draft_page(call: Call, scope: Scope, skill: str) -> Response:
    """One draft: what it changes against the live skill (and, for a user's draft that may
    go into the shared skills, against the shared one it would replace), its findings, and
    the decisions."""
    call.require(Level.read, scope)
    held = call.store.manifests(scope, [draft_entry(skill), skill])  # one round trip
    m, entry = held.get(draft_entry(skill)), held.get(skill)
    if m is None:
        missing = call.store.missing(scope, draft_entry(skill))
        raise NotFound(f"{missing} (approved or rejected already?)")
    # stale or not is the store's check, against the entry whatever it holds
    draft = draft_of(scope, skill, m, entry.version if entry is not None else 0)
    live = _live(entry)
    into_shared = _may_go_into_shared(call, scope)
    shared = None
    if into_shared is not None:
        shared = _live(call.store.manifests(into_shared, [skill]).get(skill))
    text = skill_md_text(call.store, m)
    return call.render_scope(
        "draft.html",
        scope,
        draft=draft,
        m=m,
        live=live,
        hiding=entry is not None and entry.hides,
        skill=skill,
        findings=shown(stored_findings(call.store, scope, m), text),
        diffs=diff_manifests(call.store, live, m),
        into_shared=into_shared,
        shared=shared,
        shared_diffs=diff_manifests(call.store, shared, m) if into_shared else [],
    )


def _live(m: Manifest | None) -> Manifest | None:
    """`m` when it holds live files to compare a draft with: a tombstone, a user's hiding
    entry or a skill only staged has none, so the draft is a new skill there."""
    return m if m is not None and not m.deleted and m.files else None


def _may_go_into_shared(call: Call, scope: Scope) -> Scope | None:
    """The agent's shared scope, when this draft is in a user's scope and the token may
    approve it into the shared skills."""
    if scope.kind != "user" or scope.agent_id is None:
        return None
    shared = Scope.shared(scope.agent_id)
    return shared if call.can.write(shared) else None


def approve(call: Call, scope: Scope, skill: str) -> Response:
    """The draft goes live, or with a rule (**Approve as canary**) becomes the skill's staged
    candidate for the workers it names, and is removed, in one commit; refused, with nothing
    written, when the draft or its live skill moved since the reviewer looked."""
    call.require(Level.write, scope)
    expected = call.form_int("expected")
    into = _into(call, scope)
    rule = rollout_of(call) if call.field("canary") == "1" else None
    try:
        result = call.store.drafts.approve(
            scope, skill, rollout=rule, into=into, options=call.options(expected),
            strict=not forced(call),
        )  # fmt: skip
    except InvalidSkill as exc:
        action = urls.skill_url(scope, draft_entry(skill), "approve")
        return confirm(call, action, f"The draft of {skill} breaks the spec", {skill: exc.findings})
    version = result.versions.get(skill)
    at = f" as version {version}" if version else ""
    where = f" in {urls.scope_label(into)}" if into is not None else ""
    if rule is not None:
        said = (
            f"Approved the draft of {skill}{where} as a canary for {rule.describe()}{at}; "
            "everyone else keeps the live version"
        )
    else:
        said = f"Approved the draft of {skill}: it is live{where}{at}"
    return call.done(urls.domain_page(scope.domain, "drafts"), said)


def _into(call: Call, scope: Scope) -> Scope | None:
    """Where an approved draft goes: its own scope, or (`into=shared`, for a draft in a
    user's scope, e.g. one an agent proposed for its user) the agent's shared scope."""
    into = call.field("into")
    if not into:
        return None
    if into != "shared" or scope.kind != "user" or scope.agent_id is None:
        raise HTTPError(
            400, "Bad request", "into=shared is for a draft in a user's scope; leave it out"
        )
    target = Scope.shared(scope.agent_id)
    call.require(Level.write, target)
    return target


def reject(call: Call, scope: Scope, skill: str) -> Response:
    """The draft is removed; the reason (the form's message) stays in its history and the
    audit."""
    call.require(Level.write, scope)
    reason = call.message
    call.store.drafts.reject(scope, skill, reason, options=call.options(call.form_int("expected")))
    said = f"Rejected the draft of {skill}" + (f": {reason}" if reason else "")
    return call.done(urls.domain_page(scope.domain, "drafts"), said)
