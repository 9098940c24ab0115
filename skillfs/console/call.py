"""One signed-in request as the pages see it: what they read, check and render with.

It holds what pages need and nothing of the application, so the pages never import
`skillfs.console.app` (which imports them through the route table).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol
from urllib.parse import quote

from skillfs.auth import Level
from skillfs.console.archive import ZipLimits
from skillfs.console.permissions import Permissions
from skillfs.console.session import Session
from skillfs.console.web import HTTPError, Request, Response, redirect
from skillfs.errors import SkillfsError
from skillfs.model import Scope
from skillfs.store import Store

FLASH_COOKIE = "skillfs_flash"


class Render(Protocol):
    """A template rendered to a response (the application's Jinja environment)."""

    def __call__(self, template: str, status: int = 200, **context: Any) -> Response: ...


class Call:
    """One signed-in request: what every page handler gets."""

    def __init__(
        self,
        req: Request,
        session: Session,
        store: Store,
        render: Render,
        *,
        zip_limits: ZipLimits,
        stopping: threading.Event,
    ) -> None:
        self.req = req
        self.session = session
        self.store = store
        self._render = render
        #: How large an imported zip may be.
        self.zip_limits = zip_limits
        #: Set when the console closes: live-update streams end.
        self.stopping = stopping
        self.flash: str | None = None
        #: What this token may do: pages and templates ask it before offering an action.
        self.can = Permissions(session.principal)

    @property
    def principal_name(self) -> str:
        return self.session.principal.name

    def require(self, level: Level, scope: Scope) -> None:
        self.session.principal.require(level, scope)

    def require_domain(self, domain: str) -> None:
        self.session.principal.require_domain(domain)

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        if "nav" not in context:
            try:
                context["nav"] = self.nav()
            except SkillfsError:  # an error page for a store that is down still renders
                context["nav"] = {"agents": [], "markets": []}
        return self._render(template, status, call=self, **context)

    def render_scope(
        self, template: str, scope: Scope, status: int = 200, **context: Any
    ) -> Response:
        """A page about one scope, with the revision of its domain (shown in the header, and
        followed by the page's live updates)."""
        return self.render(
            template,
            status,
            scope=scope,
            domain=scope.domain,
            revision=self.store.revision(scope),
            **context,
        )

    def done(self, location: str, message: str) -> Response:
        """Redirect after a successful POST, with a message for the next page."""
        resp = redirect(location)
        resp.set_cookie(FLASH_COOKIE, quote(message), secure=self.req.secure, max_age=60)
        return resp

    def form_int(self, name: str) -> int:
        try:
            return int(self.req.form.get(name, ""))
        except ValueError:
            raise HTTPError(
                400, "Bad request", f"the form field {name!r} must be a number"
            ) from None

    def version_arg(self, name: str) -> int | None:
        """A version number from the query string; None when it is not given."""
        value = self.req.query.get(name, "")
        if not value:
            return None
        try:
            return int(value)
        except ValueError:
            raise HTTPError(400, "Bad request", f"{name} must be a version number") from None

    def no_page(self) -> HTTPError:
        """The 404 for a URL that names no page."""
        return HTTPError(
            404, "Not found", f"there is no page at {self.req.path}", "Start again from the agents."
        )

    def nav(self) -> dict[str, list[str]]:
        """The sidebar: the agents and markets this token may see."""
        return {
            "agents": [a for a in self.store.agents() if self.can.see(f"agents/{a}")],
            "markets": [m for m in self.store.markets() if self.can.read(Scope.market(m))],
        }
