"""What a worker for (agent, user) sees now: the page docs/console.md calls "What U sees"."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console.call import Call
from skillfs.console.pages.switch import hides
from skillfs.model import Scope
from skillfs.runtime import Market, Skills


def worker_page(call: Call, agent: str, user: str) -> Response:
    """The merged skills of `Skills(store, agent, user)` and the exact prompt block, with the
    markets the operator ticks as extra layers."""
    own = Scope.user(agent, user)
    shared = Scope.shared(agent)
    call.require(Level.read, own)
    call.require(Level.read, shared)
    all_markets = [m for m in call.store.markets() if call.can.read(Scope.market(m))]
    chosen = [m for m in call.query.getlist("market") if m in all_markets]
    with Skills(call.store, agent, user, layers=[Market(m) for m in chosen]) as skills:
        snap = skills.snapshot()
    entries = call.store.manifests(own)
    layers = [own, shared, *(Scope.market(m) for m in chosen)]
    return call.render(
        "worker.html",
        agent=agent,
        user=user,
        scope=own,
        snap=snap,
        prompt=snap.prompt(),
        markets=all_markets,
        chosen=chosen,
        own=sorted(k for k, m in entries.items() if not hides(m)),
        entries=entries,
        layer_scopes={str(s): s for s in layers},
        can_write=call.can.write(own),
        domain=f"agents/{agent}",
        revision=snap.revisions.get(f"agents/{agent}"),
    )
