"""The Activity page: who changed what and why, newest first, for an agent or a market
(`Store.audit`, docs/governance.md "The audit"), filtered by actor, skill and time, and paged
like every long list (docs/console.md, "Long lists")."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.responses import Response

from skillfs.console.call import Call, HTTPError
from skillfs.console.paging import paged
from skillfs.model import AuditEntry, Scope
from skillfs.names import check_skill_name

#: The most entries one Activity page reads from the store (a `grpc://` Audit call's cap):
#: the newest ones; narrower filters reach further back.
MAX_ENTRIES = 10_000
#: How the time filters may be written (a `datetime-local` input sends the second form).
TIME_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M")


def agent_activity(call: Call, agent: str) -> Response:
    """An agent's changes: of every scope of it the token may read (a user's token sees its
    own scope's and the shared scope's)."""
    domain = f"agents/{agent}"
    call.require_domain(domain)
    scopes = call.store.scopes(agent)
    readable = [s for s in scopes if call.can.read(s)]
    return _activity(call, domain, agent, readable, every=len(readable) == len(scopes))


def market_activity(call: Call, market: str) -> Response:
    scope = Scope.market(market)
    call.require_domain(scope.domain)
    return _activity(call, scope.domain, market, [scope], every=True)


def _activity(call: Call, domain: str, name: str, scopes: list[Scope], *, every: bool) -> Response:
    """The page of one domain's audit: `every` when the token may read all its scopes, so
    the store answers for the domain at once (one call over `grpc://`)."""
    wanted = _filters(call)
    since, until = _time(wanted["since"], "since", end=False), _time(wanted["until"], "until")
    if since is not None and until is not None and since > until:
        raise HTTPError(400, "Bad filter", f"“since” ({wanted['since']}) is after “until”")
    actor, skill = wanted["actor"] or None, wanted["skill"] or None
    entries: list[AuditEntry] = []
    if every:
        entries = call.store.audit(
            domain, since=since, until=until, actor=actor, skill=skill, limit=MAX_ENTRIES
        )
    elif scopes:
        entries = call.store.audit_scopes(
            scopes, since=since, until=until, actor=actor, skill=skill, limit=MAX_ENTRIES
        )
    page = paged(entries, call.query, _text, keep=wanted)
    return call.render_domain(
        "activity.html",
        domain,
        name,
        entries=page.items,
        page=page,
        wanted=wanted,
        capped=len(entries) >= MAX_ENTRIES,
        partial=not every,
    )


def _filters(call: Call) -> dict[str, str]:
    """The filters as asked (trimmed): the actor and skill exactly, the times as typed."""
    got = {k: call.query.get(k, "").strip() for k in ("actor", "skill", "since", "until")}
    if got["skill"]:
        got["skill"] = check_skill_name(got["skill"])
    if len(got["actor"]) > 256:
        raise HTTPError(400, "Bad filter", "an actor is at most 256 characters")
    return got


def _time(text: str, field: str, *, end: bool = True) -> float | None:
    """A UTC time from the form; a bare date means its whole day (from its start for
    “since”, to its end for “until”)."""
    if not text:
        return None
    for fmt in TIME_FORMATS:
        try:
            at = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        if fmt == "%Y-%m-%d" and end:
            return at.timestamp() + 86400 - 0.001
        if fmt in ("%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M") and end:
            return at.timestamp() + 59.999
        return at.timestamp()
    raise HTTPError(
        400,
        "Bad filter",
        f"“{field}” must be a UTC date or time such as 2026-11-24 or 2026-11-24T09:30, "
        f"not {text!r}",
    )


def _text(e: AuditEntry) -> tuple[str, ...]:
    """What the filter box matches an entry by."""
    return (e.skill, e.actor, e.message, e.action, str(e.scope))
