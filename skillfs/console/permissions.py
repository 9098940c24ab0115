"""What the signed-in token may do, from its grants (`skillfs.auth`).

The one place pages and templates ask (`call.can`), so a page never offers an action the token
cannot take, nor counts or names things the token may not read: a count of users whose scopes
a token cannot read tells it how many users there are.
"""

from __future__ import annotations

from collections.abc import Iterable

from skillfs.auth import Grant, Level, Principal, write_level
from skillfs.model import Scope
from skillfs.store.rules import REVIEW

#: Stands for "some user" when asking whether a grant covers any user scope of an agent.
_SOMEONE = "someone"


class Permissions:
    """The console's questions about one signed-in token, answered from its grants."""

    def __init__(self, principal: Principal) -> None:
        self.principal = principal

    def read(self, scope: Scope) -> bool:
        return self.principal.may(Level.read, scope)

    def write(self, scope: Scope) -> bool:
        return self.principal.may(Level.write, scope)

    def configure(self, scope: Scope) -> bool:
        """Whether the token may change the scope's settings (the two-person rule): an
        admin grant on the scope (docs/security.md)."""
        return self.principal.may(write_level(REVIEW), scope)

    def admin(self, domain: str) -> bool:
        """Whether the token administers an agent or a market (`agents/A`, `markets/M`):
        what curation needs, since it reads usage and archives across scopes. A market's
        skills are used by every agent, so curating one reads every agent's usage: only a
        global admin's (`*:admin`), as the `Usage` call asks over gRPC."""
        kind, name = domain.split("/", 1)
        if kind == "markets":
            return self.principal.is_global_admin
        return self.principal.administers_agent(name)

    def see(self, domain: str) -> bool:
        """Whether the token may read anything in `agents/A` or `markets/M`."""
        return self.principal.may_see_domain(domain)

    @property
    def reads_everything(self) -> bool:
        """A `*:read` (or stronger) token: for it "none" means none at all."""
        return self.principal.reads_everything

    def _user_grants(self, agent: str, level: Level) -> Iterable[Grant]:
        """The grants of at least `level` that cover some user scope of the agent."""
        return (
            g
            for g in self.principal.grants
            if g.level >= level and g.covers(Scope.user(agent, g.user or _SOMEONE))
        )

    def read_a_user(self, agent: str) -> bool:
        """Whether the token may read some user scope of the agent."""
        return any(self._user_grants(agent, Level.read))

    def read_every_user(self, agent: str) -> bool:
        """Whether the token may read every user scope of the agent: for it "no user" means
        no user at all."""
        return any(
            g.kind == "all"
            or (
                g.kind == "agent"
                and g.ident in (None, agent)
                and (g.part is None or (g.part == "user" and g.user is None))
            )
            for g in self.principal.grants
        )

    def write_a_user(self, agent: str) -> bool:
        """Whether the token may write some user scope of the agent (make an override)."""
        return any(self._user_grants(agent, Level.write))

    def readable_users(self, agent: str, users: Iterable[str]) -> list[str]:
        return [u for u in users if self.read(Scope.user(agent, u))]

    def writable_users(self, agent: str, users: Iterable[str]) -> list[str]:
        return [u for u in users if self.write(Scope.user(agent, u))]
