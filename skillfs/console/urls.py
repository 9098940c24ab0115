"""Console URLs mirror the store's logical keys (docs/design.md §1): a scope's page is at its
key prefix, `/agents/support-bot/users/alice/skills/`, and a skill's at `<prefix><skill>/`,
so an operator can go from a key in a log to its page and back."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from skillfs.model import Scope


def _q(segment: str) -> str:
    return quote(segment, safe="")


def agent_url(agent: str) -> str:
    return f"/agents/{_q(agent)}/"


def user_url(agent: str, user: str) -> str:
    """The "what does this user see" page."""
    return f"/agents/{_q(agent)}/users/{_q(user)}/"


def domain_page(domain: str, page: str, **query: str) -> str:
    """A page about a whole agent or market (`agents/A`, `markets/M`): its `activity`, its
    `drafts` (the review queue), its `curation`."""
    kind, name = domain.split("/", 1)
    args = {k: v for k, v in query.items() if v}
    return f"/{kind}/{_q(name)}/{page}" + ("?" + urlencode(args) if args else "")


def activity_url(target: Scope | str, **query: str) -> str:
    """The Activity page of a scope's agent or market (`agents/A`, `markets/M` or a scope),
    filtered by `query` (actor, skill, since, until)."""
    return domain_page(target.domain if isinstance(target, Scope) else target, "activity", **query)


def draft_url(scope: Scope, name: str, action: str = "") -> str:
    """A draft's page (`<scope prefix>_drafts/<name>/`, its logical key) or an action on it."""
    return scope_url(scope) + "_drafts/" + _q(name) + "/" + action


def scope_url(scope: Scope) -> str:
    return "/" + "/".join(_q(p) for p in scope.prefix.rstrip("/").split("/")) + "/"


def skill_url(scope: Scope, skill: str, action: str = "", path: str = "", **query: object) -> str:
    url = scope_url(scope) + _q(skill) + "/"
    if action:
        url += action
    if path:
        url += "/" + "/".join(_q(p) for p in path.split("/"))
    args = {k: v for k, v in query.items() if v is not None and v != ""}
    return url + ("?" + urlencode(args) if args else "")


def archive_url(scope: Scope, name: str, action: str = "") -> str:
    """An archived skill's entry (`<scope prefix>.archive/<name>/`) or an action on it."""
    return scope_url(scope) + ".archive/" + _q(name) + "/" + action


def parse_scope(segments: list[str]) -> tuple[Scope, list[str]] | None:
    """The scope a path starts with, and the segments after its `skills/`."""
    if len(segments) >= 3 and segments[0] == "markets" and segments[2] == "skills":
        return Scope.market(segments[1]), segments[3:]
    if len(segments) >= 4 and segments[0] == "agents" and segments[2:4] == ["shared", "skills"]:
        return Scope.shared(segments[1]), segments[4:]
    if len(segments) >= 5 and segments[0] == "agents" and segments[2:5:2] == ["users", "skills"]:
        return Scope.user(segments[1], segments[3]), segments[5:]
    return None


def scope_label(scope: Scope) -> str:
    """How a person names the scope."""
    if scope.kind == "market":
        return f"market {scope.market_id}"
    if scope.kind == "shared":
        return f"{scope.agent_id} · shared"
    return f"{scope.agent_id} · user {scope.user_id}"
