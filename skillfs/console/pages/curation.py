"""The curation page (docs/governance.md, "Curation"): an agent's (or a market's) report of
stale skills, skills to archive and near-duplicates (`Store.curate`, each with its reason),
applying it, the archived skills with **Restore**, and archiving one skill from its page.
Archiving moves a live skill to `.archive/<name>` in one commit, restoring moves it back; a
restore onto a skill that is live again is refused with nothing written."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call
from skillfs.console.filters import plural
from skillfs.errors import PermissionDenied
from skillfs.governance.curation_report import ARCHIVE_AFTER, STALE_AFTER
from skillfs.model import Manifest, Scope
from skillfs.model.names import ARCHIVE, side_entry
from skillfs.model.ops import WriteOptions


@dataclass(frozen=True)
class Archived:
    """One archived skill as the page lists it."""

    scope: Scope
    name: str
    m: Manifest  # the archive entry's manifest: who archived it, when, why


def agent_curation(call: Call, agent: str) -> Response:
    domain = f"agents/{agent}"
    call.require_domain(domain)
    scopes = [s for s in call.store.scopes(agent) if call.can.read(s)]
    return _page(call, domain, agent, scopes)


def market_curation(call: Call, market: str) -> Response:
    scope = Scope.market(market)
    call.require(Level.read, scope)
    return _page(call, scope.domain, market, [scope])


def _page(call: Call, domain: str, name: str, scopes: list[Scope]) -> Response:
    """The report (for a token that administers the domain: curation reads usage), and the
    archived skills of the scopes the token may read."""
    windows = _windows(call)
    admin = call.can.admin(domain)
    report = (
        call.store.curation.run(domain, *windows, options=WriteOptions(actor=call.actor))
        if admin
        else None
    )
    agent = domain.startswith("agents/")
    drops = call.store.usage.drops(name) if admin and agent else []
    return call.render_domain(
        "curation.html",
        domain,
        name,
        archived=archived_in(call, scopes),
        report=report,
        admin=admin,
        windows=windows,
        drops=drops,
    )


def drop_usage(call: Call, agent: str) -> Response:
    """Forget usage counters of the agent (the form's user and skill, each optional: every
    one), recorded with the signed-in token and the form's reason."""
    domain = f"agents/{agent}"
    if not call.can.admin(domain):
        raise PermissionDenied(
            f"token {call.actor!r} may not drop the usage of {agent}: this needs an admin "
            "grant on the agent"
        )
    user, skill = call.field("user").strip(), call.field("skill").strip()
    drop = call.store.usage.drop(
        agent,
        users=[user] if user else None,
        skills=[skill] if skill else None,
        reason=call.message,
        actor=call.actor,
    )
    return call.done(
        urls.domain_page(domain, "curation") + "#usage-drops",
        f"Dropped {plural(drop.dropped, 'usage counter')} of {agent}: {drop.reason}",
    )


def _windows(call: Call) -> tuple[str, str]:
    """The report's stale_after and archive_after as asked (`30d`, `12h`, seconds), or the
    store's defaults; the store says what is wrong with a bad one."""
    source = call.form if call.method == "POST" else call.query
    values = [source.get(k, "") for k in ("stale_after", "archive_after")]
    stale, archive = (v.strip() if isinstance(v, str) else "" for v in values)
    return stale or STALE_AFTER, archive or ARCHIVE_AFTER


def apply_agent(call: Call, agent: str) -> Response:
    return _apply(call, f"agents/{agent}")


def apply_market(call: Call, market: str) -> Response:
    return _apply(call, Scope.market(market).domain)


def _apply(call: Call, domain: str) -> Response:
    """Archive every skill the report lists to archive, each in its own commit, after its
    last use is read again (one used or changed meanwhile is left in place and said so)."""
    if not call.can.admin(domain):
        raise PermissionDenied(
            f"token {call.actor!r} may not curate {domain}: this needs an admin grant "
            "on it (curation reads usage and archives across its scopes)"
        )
    stale, archive = _windows(call)
    report = call.store.curation.run(
        domain,
        stale,
        archive,
        dry_run=False,
        options=call.options(),
    )
    done = ", ".join(c.skill for c in report.archived) or "none"
    said = f"Archived {plural(len(report.archived), 'idle skill')}: {done}"
    if report.skipped:
        said += "; left in place: " + "; ".join(f"{c.skill} ({c.reason})" for c in report.skipped)
    return call.done(
        urls.domain_page(domain, "curation", stale_after=stale, archive_after=archive), said
    )


def archived_in(call: Call, scopes: list[Scope]) -> list[Archived]:
    """The archived skills of these scopes (one read of each), most recently archived first."""
    found = []
    for scope in scopes:
        for key, m in call.store.manifests(scope).items():
            side = side_entry(key)
            if side is not None and side[0] == ARCHIVE:
                found.append(Archived(scope, side[1], m))
    return sorted(found, key=lambda a: (-a.m.committed_at, a.name))


def archive(call: Call, scope: Scope, skill: str) -> Response:
    """Move one live skill to the archive (its page's **Archive**): it leaves every view at
    the next step; **Restore** on the curation page brings it back. The reason is the form's
    message."""
    call.require(Level.write, scope)
    reason = call.message
    call.store.archive.add(
        scope,
        skill,
        reason=call.message,
        options=call.options(call.form_int("expected")),
    )
    return call.done(
        urls.domain_page(scope.domain, "curation"),
        f"Archived {skill}" + (f": {reason}" if reason else "") + ". Restore it here.",
    )


def restore(call: Call, scope: Scope, skill: str) -> Response:
    """Bring an archived skill back live, in one commit."""
    call.require(Level.write, scope)
    result = call.store.archive.restore(
        scope,
        skill,
        options=call.options(call.form_int("expected")),
    )
    version = result.versions.get(skill)
    return call.done(
        urls.skill_url(scope, skill),
        f"Restored {skill} from the archive"
        + (f": it is live as version {version}" if version else ""),
    )
