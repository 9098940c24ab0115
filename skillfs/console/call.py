"""One signed-in request as the pages see it: what they read, check and render with.

It holds what pages need and nothing of the application, so the pages never import
`skillfs.console.app` (which imports them through the route table). Pages run in the
console's thread pool (docs/console.md, "The HTTP stack"), so the request's body is already
read and parsed when a `Call` is made: a page never waits on the network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, cast
from urllib.parse import quote

from starlette.datastructures import FormData, QueryParams, UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Message

from skillfs.api import Store
from skillfs.auth import Level
from skillfs.console.archive import ZipLimits
from skillfs.console.permissions import Permissions
from skillfs.console.session import Session
from skillfs.console.streams import LiveStreams
from skillfs.errors import SkillfsError
from skillfs.model import Scope
from skillfs.model.ops import WriteOptions

FLASH_COOKIE = "skillfs_flash"


class HTTPError(Exception):
    """An error page: status, a short title and a message that says what to do."""

    def __init__(self, status: int, title: str, message: str = "", hint: str = "") -> None:
        super().__init__(message or title)
        self.status = status
        self.title = title
        self.message = message
        self.hint = hint


def too_large(limit: int, size: str = "") -> HTTPError:
    said = f"{size} bytes" if size else "larger"
    return HTTPError(
        413,
        "Upload too large",
        f"the request is {said}; this console accepts at most {limit} bytes here",
        "Nothing was written. Split the upload, or raise the console's max_upload setting.",
    )


def limit_body(request: Request, limit: int) -> Request:
    """The request with its body capped at `limit` bytes: refused at once when its
    Content-Length says more, else as soon as more arrives (docs/console.md, "Limits")."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise too_large(limit, declared if declared.isdigit() else "")
    receive, seen = request.receive, 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise too_large(limit)
        return message

    return Request(request.scope, counted)


class Render(Protocol):
    """A template rendered to a response (the application's Jinja environment)."""

    def __call__(self, template: str, status: int = 200, **context: Any) -> Response: ...


def redirect(location: str) -> Response:
    """After a form or to the canonical URL of a page: 303, so the browser follows with GET."""
    return RedirectResponse(location, status_code=303)


def set_cookie(
    resp: Response, name: str, value: str, *, secure: bool, max_age: int | None = None
) -> None:
    """Every console cookie: HttpOnly, SameSite=Lax, whole site; Secure over HTTPS."""
    # "Lax" as browsers and the cookie RFC spell it; Starlette's hint lists it in lower case
    lax = cast(Literal["lax"], "Lax")
    resp.set_cookie(
        name, value, max_age=max_age, path="/", secure=secure, httponly=True, samesite=lax
    )


class Call:
    """One signed-in request: what every page handler gets."""

    def __init__(
        self,
        request: Request,
        session: Session,
        store: Store,
        render: Render,
        *,
        form: FormData,
        json: Any,
        zip_limits: ZipLimits,
        live: LiveStreams,
        recheck: Callable[[], Session | None],
    ) -> None:
        self.request = request
        self.session = session
        self.store = store
        self._render = render
        self.form = form
        #: The parsed body of a JSON POST (the validation API), else None.
        self.json = json
        #: How large an imported zip may be.
        self.zip_limits = zip_limits
        #: The pool and limits of live-update streams (pages/live.py).
        self.live = live
        #: The session of this request's cookie as of now (None once it ended): long
        #: streams ask again before each event.
        self.recheck = recheck
        self.flash: str | None = None
        #: What this token may do: pages and templates ask it before offering an action.
        self.can = Permissions(session.principal)

    # ------------------------------------------------------------------ the request

    @property
    def path(self) -> str:
        """The path as asked (routing saw it without its trailing slash)."""
        scope = self.request.scope
        return str(scope.get("skillfs.path", scope["path"]))

    @property
    def method(self) -> str:
        return self.request.method

    @property
    def secure(self) -> bool:
        return self.request.url.scheme == "https"

    @property
    def query(self) -> QueryParams:
        return self.request.query_params

    def field(self, name: str, default: str = "") -> str:
        """A text field of the posted form (a file field reads as empty)."""
        value = self.form.get(name)
        return value if isinstance(value, str) else default

    def fields(self) -> dict[str, str]:
        """The posted text fields, last value of each."""
        return {k: v for k, v in self.form.items() if isinstance(v, str)}

    def file(self, name: str) -> UploadFile | None:
        """A posted file; None when the form sent none (a file input left empty)."""
        value = self.form.get(name)
        return value if isinstance(value, UploadFile) and value.filename else None

    # ------------------------------------------------------------------ grants

    @property
    def actor(self) -> str:
        """The signed-in token's name: who the console's writes are by, passed as `actor=` on
        every write (docs/governance.md, "Who and why"), never the server's own user@host."""
        return self.session.principal.name

    @property
    def message(self) -> str:
        """Why, as typed in the form's message field ("Why?"): the commit's message, kept in
        history and the audit beside the actor (docs/console.md, "Governed change"). The
        store refuses one that is too long, before anything is written."""
        return self.field("message").strip()

    def options(self, expected: int | None = None) -> WriteOptions:
        """What a write through `store.edits` says of itself: by the signed-in token, with
        the form's message, on the version the operator loaded (`expected`)."""
        return WriteOptions(actor=self.actor, message=self.message, expected_version=expected)

    def require(self, level: Level, scope: Scope) -> None:
        self.session.principal.require(level, scope)

    def require_domain(self, domain: str) -> None:
        self.session.principal.require_domain(domain)

    # ------------------------------------------------------------------ answers

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

    def render_domain(
        self, template: str, domain: str, name: str, status: int = 200, **context: Any
    ) -> Response:
        """A page about one agent or market (`domain`, named `name`), with its kind and
        revision (shown in the header, and followed by the page's live updates)."""
        return self.render(
            template,
            status,
            domain=domain,
            name=name,
            kind=domain.split("/")[0],
            revision=self.store.domain_revisions([domain])[domain],
            **context,
        )

    def done(self, location: str, message: str) -> Response:
        """Redirect after a successful POST, with a message for the next page."""
        resp = redirect(location)
        set_cookie(resp, FLASH_COOKIE, quote(message, safe=""), secure=self.secure, max_age=60)
        return resp

    def form_int(self, name: str) -> int:
        try:
            return int(self.field(name))
        except ValueError:
            raise HTTPError(
                400, "Bad request", f"the form field {name!r} must be a number"
            ) from None

    def version_arg(self, name: str) -> int | None:
        """A version number from the query string; None when it is not given."""
        value = self.query.get(name, "")
        if not value:
            return None
        try:
            return int(value)
        except ValueError:
            raise HTTPError(400, "Bad request", f"{name} must be a version number") from None

    def no_page(self) -> HTTPError:
        """The 404 for a URL that names no page."""
        return HTTPError(
            404, "Not found", f"there is no page at {self.path}", "Start again from the agents."
        )

    def nav(self) -> dict[str, list[str]]:
        """The sidebar: the agents and markets this token may see."""
        return {
            "agents": [a for a in self.store.agents() if self.can.see(f"agents/{a}")],
            "markets": [m for m in self.store.markets() if self.can.read(Scope.market(m))],
        }
