"""The agents, an agent, and a scope's skills: where an operator starts and browses."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call, redirect
from skillfs.console.pages.files import shown_version
from skillfs.console.paging import paged
from skillfs.errors import NotFound
from skillfs.governance.host_profiles import ProfilesSetting
from skillfs.governance.review import ReviewRule
from skillfs.governance.rollout_rule import has_live
from skillfs.model import Manifest, Scope
from skillfs.model.names import check_id, is_hidden_dir
from skillfs.spec.profiles import PROFILES as PROFILES_KNOWN
from skillfs.spec.template import TEMPLATE_INSTRUCTIONS
from skillfs.store.rules import REVIEW
from skillfs.store.scope_profiles import PROFILES
from skillfs.util.suggest import closest

#: The per-user listings stop here; an agent with more users is browsed by user id.
MAX_USERS_LISTED = 200


def skills_of(entries: dict[str, Manifest]) -> dict[str, Manifest]:
    """A scope's skills without its side entries (`_drafts/<name>`, `.archive/<name>`: the
    review queue and the curation page list those; docs/governance.md)."""
    return {k: m for k, m in entries.items() if not is_hidden_dir(k)}


def own_skills(entries: dict[str, Manifest]) -> dict[str, Manifest]:
    """A scope's own skills: no side entries, and no hiding entries (in a user's scope those
    hide a skill from below: docs/governance.md)."""
    return {k: m for k, m in skills_of(entries).items() if not m.hides}


def as_listed(skills: dict[str, Manifest]) -> tuple[list[Manifest], set[str]]:
    """A scope's skills as their pages show them, by name (a skill only staged, never live,
    as its candidate: its description, files and size), and the names of those."""
    staged = {k for k, m in skills.items() if not has_live(m)}
    return sorted((shown_version(m) for m in skills.values()), key=lambda m: m.skill), staged


def home(call: Call) -> Response:
    """The agents and markets, 100 of each at a time (`?q=` filters both by id)."""
    nav = call.nav()
    agent_page = paged(nav["agents"], call.query, lambda a: (a,))
    market_page = paged(nav["markets"], call.query, lambda m: (m,), param="markets_page")
    domains = [f"agents/{a}" for a in agent_page.items]
    domains += [f"markets/{m}" for m in market_page.items]
    revisions = call.store.domain_revisions(domains) if domains else {}
    agents = []
    for agent in agent_page.items:
        shared = Scope.shared(agent)
        count = len(skills_of(call.store.manifests(shared))) if call.can.read(shared) else None
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
            "skills": len(skills_of(call.store.manifests(Scope.market(market)))),
            "revision": revisions.get(f"markets/{market}"),
        }
        for market in market_page.items
        if call.can.read(Scope.market(market))
    ]
    return call.render(
        "home.html",
        nav=nav,
        agents=agents,
        markets=markets,
        agent_page=agent_page,
        market_page=market_page,
    )


def open_agent(call: Call) -> Response:
    """The "open or start an agent" form: an agent the store holds opens; a new id close to
    one it holds (a typo: `suport-bot`) asks "did you mean support-bot?" first, as the CLI
    does (skillfs.util.suggest); any other starts a new agent at its empty shared scope."""
    agent = call.query.get("agent", "").strip()
    if not agent:
        raise call.no_page()
    agent = check_id("agent", agent)
    nav = call.nav()  # read once: the page's navigation shows the same
    known = nav["agents"]  # the agents this token may see
    near = closest(agent, known) if agent not in known else None
    start = urls.scope_url(Scope.shared(agent))
    if near is None:
        return redirect(start)
    return call.render(
        "did_you_mean.html", nav=nav, what="agent", typed=agent, near=near,
        near_url=urls.agent_url(near),
        typed_url=start, start_label=f"Start agent {agent}",
        start_help="Starting it makes a new agent with no skills.",
    )  # fmt: skip


def open_user(call: Call, agent: str) -> Response:
    """The "what does user … see" form; without a user, the agent's page. A user with no skills
    of their own whose id is close to one with skills asks "did you mean …?" first (any user
    id is a worker's, seeing the agent's shared skills)."""
    user = call.query.get("user", "").strip()
    if not user:
        return redirect(urls.agent_url(agent))
    user = check_id("user", user)
    known = call.can.readable_users(agent, call.store.users(agent))
    near = closest(user, known) if user not in known else None
    view = urls.user_url(agent, user)
    if near is None:
        return redirect(view)
    return call.render(
        "did_you_mean.html", what="user", typed=user, near=near, agent=agent,
        near_url=urls.user_url(agent, near), typed_url=view, start_label=f"What {user} sees",
        start_help=f"A user with none of their own sees the shared skills of {agent}.",
    )  # fmt: skip


def to_agent(call: Call, agent: str) -> Response:
    return redirect(urls.agent_url(agent))


def to_market(call: Call, market: str) -> Response:
    return redirect(urls.scope_url(Scope.market(market)))


def agent_page(call: Call, agent: str) -> Response:
    domain = f"agents/{agent}"
    call.require_domain(domain)
    shared = Scope.shared(agent)
    skills = skills_of(call.store.manifests(shared)) if call.can.read(shared) else None
    readable = call.can.readable_users(agent, call.store.users(agent))
    if skills is None and not readable:
        raise NotFound(f"agent {agent!r} has no skills you may see")
    users = []
    for user in readable[:MAX_USERS_LISTED]:
        scope = Scope.user(agent, user)
        entries = skills_of(call.store.manifests(scope))
        own = own_skills(entries)
        overrides = sorted(s for s in own if skills is not None and s in skills)
        hidden = sorted(k for k, m in entries.items() if m.hides)
        users.append(
            {
                "id": user,
                "scope": scope,
                "skills": len(own),
                "overrides": overrides,
                "hidden": hidden,
            }
        )
    listed, staged = as_listed(skills or {})
    page = paged(listed, call.query, _described)
    return call.render(
        "agent.html",
        agent=agent,
        shared=shared,
        skills=page.items,
        staged=staged,
        page=page,
        can_read_shared=skills is not None,
        users=users,
        more_users=max(0, len(readable) - MAX_USERS_LISTED),
        domain=domain,
        revision=call.store.domain_revisions([domain])[domain],
    )


def _described(m: Manifest) -> tuple[str, object]:
    """What the filter box matches a skill by: its name and description."""
    return m.skill, (m.frontmatter or {}).get("description", "")


def scope_page(call: Call, scope: Scope) -> Response:
    """A scope's skills 100 at a time (`?q=` filters, `?page=` pages), and its deleted ones."""
    call.require(Level.read, scope)
    raw = call.store.entries(scope)  # one read: live entries, tombstones and settings
    every = skills_of(raw)
    entries = {k: m for k, m in every.items() if not m.deleted}
    # a user's hiding entries are not skills of the user's: listed apart (docs/governance.md)
    hiding = sorted((m for m in entries.values() if m.hides), key=lambda m: m.skill)
    listed, staged = as_listed(own_skills(entries))
    page = paged(listed, call.query, _described)
    shared: dict[str, Manifest] = {}
    if scope.kind == "user" and scope.agent_id is not None:
        base = Scope.shared(scope.agent_id)
        if call.can.read(base):
            shared = call.store.manifests(base, [m.skill for m in page.items])
    tombstones = sorted(
        (m for m in every.values() if m.deleted),
        key=lambda m: (-m.committed_at, m.skill),
    )
    deleted = paged(tombstones, call.query, lambda m: (m.skill,), param="deleted_page")
    return call.render_scope(
        "scope.html",
        scope,
        skills=page.items,
        staged=staged,
        page=page,
        shared=shared,
        deleted=deleted,
        hiding=hiding,
        review=ReviewRule.of(scope, raw.get(REVIEW)),
        profiles=ProfilesSetting.of(scope, raw.get(PROFILES), call.store.profiles),
        known_profiles=PROFILES_KNOWN.values(),
        template_instructions=TEMPLATE_INSTRUCTIONS,
    )
