"""The Activity page: who changed what and why, newest first, for an agent or a market
(`Store.audit`, docs/governance.md "The audit"), filtered by actor, skill and time, and paged
like every long list (docs/console.md, "Long lists")."""

from __future__ import annotations

import re
from datetime import datetime

from starlette.responses import Response

from skillfs.console.call import Call, HTTPError
from skillfs.console.paging import paged
from skillfs.model import AuditEntry, Scope
from skillfs.model.names import check_skill_name

#: The most entries one Activity page reads from the store (a `grpc://` Audit call's cap):
#: the newest ones; narrower filters reach further back.
MAX_ENTRIES = 10_000
#: How the time filters may be written: as the page shows a time (`2026-11-24 09:30:20 UTC`,
#: copied from a row), or ISO 8601 to the day, minute or second with `T` or a space (as a
#: `datetime-local` input sends it); UTC unless it says `Z`, `+00:00` or another offset,
#: which is converted to UTC (as `skillfs audit --since` does).
TIME = re.compile(
    r"(?P<day>\d{4}-\d{2}-\d{2})"
    r"(?:[T ](?P<minute>\d{2}:\d{2})(?P<second>:\d{2}(?P<fraction>\.\d{1,6})?)?)?"
    r"(?P<zone>Z| ?UTC|[+-]\d{2}:?\d{2})?",
    re.IGNORECASE,
)


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
        entries = call.store.governance.audit(
            domain, since=since, until=until, actor=actor, skill=skill, limit=MAX_ENTRIES
        )
    elif scopes:
        entries = call.store.governance.audit_scopes(
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
    """A time from the form (`TIME`). As "until" it means the end of what it names: a bare
    date its whole day, a minute or a second all of it (so a row's own time keeps the row)."""
    if not text:
        return None
    got = TIME.fullmatch(text)
    try:
        if got is None:
            raise ValueError(text)
        zone = got["zone"] or "Z"
        offset = "+00:00" if zone.strip().upper() in ("Z", "UTC") else zone
        at = datetime.fromisoformat(
            f"{got['day']}T{got['minute'] or '00:00'}{got['second'] or ''}{offset}"
        ).timestamp()
    except ValueError:
        raise HTTPError(
            400,
            "Bad filter",
            f"“{field}” must be a date or time such as 2026-11-24, 2026-11-24 09:30:20 UTC "
            f"or 2026-11-24T09:30Z (UTC unless it gives an offset, such as +02:00, which is "
            f"converted to UTC), not {text!r}",
        ) from None
    if not end or got["fraction"]:
        return at
    if not got["minute"]:
        return at + 86400 - 0.001
    return at + (0.999 if got["second"] else 59.999)


def _text(e: AuditEntry) -> tuple[str, ...]:
    """What the filter box matches an entry by."""
    return (e.skill, e.actor, e.message, e.action, str(e.scope))
