"""What a worker for (agent, user) sees now: the page docs/console.md calls "What U sees"."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console.call import Call
from skillfs.console.pages.agents import own_skills
from skillfs.model import Candidate, Manifest, Scope
from skillfs.model.names import check_id
from skillfs.runtime import Market, Skills


def worker_page(call: Call, agent: str, user: str) -> Response:
    """The merged skills of `Skills(store, agent, user, environment=...)` and the exact prompt
    block, with the markets the operator ticks as extra layers; for each skill, the version
    the user gets (the live one, or a staged candidate its rollout rule gives them)."""
    own = Scope.user(agent, user)
    shared = Scope.shared(agent)
    call.require(Level.read, own)
    call.require(Level.read, shared)
    all_markets = [m for m in call.store.markets() if call.can.read(Scope.market(m))]
    chosen = [m for m in call.query.getlist("market") if m in all_markets]
    typed = call.query.get("environment", "").strip()
    environment = check_id("environment", typed) if typed else None
    layers = [Market(m) for m in chosen]
    with Skills(call.store, agent, user, layers=layers, environment=environment) as skills:
        snap = skills.snapshot()
    entries = call.store.manifests(own)
    scopes = [own, shared, *(Scope.market(m) for m in chosen)]
    return call.render(
        "worker.html",
        agent=agent,
        user=user,
        scope=own,
        snap=snap,
        prompt=snap.prompt(),
        markets=all_markets,
        chosen=chosen,
        environment=environment or "",
        own=sorted(own_skills(entries)),
        entries=entries,
        layer_scopes={str(s): s for s in scopes},
        staged=_staged(call, scopes, own, entries),
        can_write=call.can.write(own),
        domain=f"agents/{agent}",
        revision=snap.revisions.get(f"agents/{agent}"),
    )


def _staged(
    call: Call, scopes: list[Scope], own: Scope, entries: dict[str, Manifest]
) -> dict[tuple[str, str], Candidate]:
    """The candidates staged in the view's scopes, by (scope, skill): the page says which
    the user gets and which they do not."""
    out: dict[tuple[str, str], Candidate] = {}
    for scope in scopes:
        manifests = entries if scope == own else call.store.manifests(scope)
        out.update(
            {(str(scope), n): m.candidate for n, m in manifests.items() if m.candidate is not None}
        )
    return out
