"""The console's ASGI application: sign-in, CSRF, dispatch, rendering and error pages.

Built on Starlette (docs/console.md, "The HTTP stack"): its router holds the table of
`skillfs.console.routes`, its request parses forms and uploads, and every route has a body
limit. This module owns what every request goes through, so no page can forget the session
check (made before any body is read), the CSRF check or escaping. Pages are synchronous and
call the store, so they run in the console's bounded thread pool, never on the event loop.
"""

from __future__ import annotations

import hmac
import json
import logging
import mimetypes
import secrets
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from skillfs.api import Store
from skillfs.auth import Tokens, tokens_document
from skillfs.console import filters, urls
from skillfs.console.archive import ZipLimits
from skillfs.console.call import (
    FLASH_COOKIE,
    Call,
    HTTPError,
    limit_body,
    redirect,
    set_cookie,
)
from skillfs.console.routes import PAGES, Body, Page, args_of
from skillfs.console.session import COOKIE, Session, Sessions
from skillfs.console.signin import SignIn
from skillfs.console.skill_files import MAX_EDIT_BYTES
from skillfs.console.streams import LiveStreams, Pool
from skillfs.errors import InvalidPath, NotFound, SkillfsError, StoreUnavailable
from skillfs.model import Rollout
from skillfs.model.names import check_skill_name
from skillfs.store.quotas import acting_as
from skillfs.util.deadline import SERVER_READS, budget

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}

#: What an operator reads above a store error's message, by the HTTP status its class carries.
_TITLES: dict[int | str, str] = {
    "FailedPrecondition": "Not possible now",
    "ReviewRequired": "Review required",
    400: "Not accepted",
    403: "Not allowed",
    404: "Not found",
    409: "Changed by someone else",
    413: "Too large",
}

#: Threads for pages: keep it below the store's connection pool (a Redis pool's
#: max_connections), so a burst waits for a thread rather than for a connection.
DEFAULT_THREADS = 16
#: Live-update streams open at once (one per open console page). A stream holds no thread and
#: no store connection while it waits (one follower feeds them all), only a socket and a queue.
DEFAULT_STREAMS = 1_000
#: Body limits by route kind (docs/console.md, "Limits"). A form may carry the editor's text
#: (up to MAX_EDIT_BYTES, URL-encoded); routes that read no body accept next to none.
SMALL_BODY = 16 * 1024
FORM_BODY = 4 * MAX_EDIT_BYTES
#: Fields and files of one form, and the size of one text field of a multipart form.
MAX_FIELDS, MAX_FILES, MAX_PART = 64, 4, 1024 * 1024


class SecurityHeaders:
    """The console's headers on every response: a strict CSP, nosniff, no framing and, unless
    a response says otherwise, no-store."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if "cache-control" not in headers:
                    headers["Cache-Control"] = "no-store"
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Console:
    """The admin console as an ASGI application (mount it at `/` of an HTTP server)."""

    def __init__(
        self,
        store: Store,
        tokens: Tokens,
        *,
        max_upload: int = 64 * 1024 * 1024,
        threads: int = DEFAULT_THREADS,
        max_streams: int = DEFAULT_STREAMS,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.sessions = Sessions(tokens)
        self.max_upload = max_upload
        self.zip_limits = ZipLimits(max_total_bytes=store.limits.max_skill_size)
        #: Where pages run (they call the store, which blocks).
        self.pool = Pool(threads, "skillfs-console")
        #: Live-update streams: their own pool and cap; `close()` ends them.
        self.live = LiveStreams(store, max_streams)
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("skillfs.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(urls=urls, title="skillfs")
        self.env.filters.update(
            size=filters.human_size,
            when=filters.when,
            ago=filters.ago,
            mode=filters.file_mode,
            rev=filters.rev_text,
            plural=filters.plural,
            rule=Rollout.describe,
        )
        #: Request-body limits by route kind (docs/console.md, "Limits").
        self.body_limits: dict[Body, int] = {
            "none": SMALL_BODY,
            "form": FORM_BODY,
            "json": FORM_BODY,
            "upload": max_upload,
        }
        self.signin = SignIn(self.sessions, self.render)
        self.app = Starlette(
            routes=self._routes(),
            middleware=[Middleware(SecurityHeaders)],
            exception_handlers={
                HTTPException: self._http_exception,
                HTTPError: self._http_error,
            },
        )

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        """Routes see the path without its trailing slash (the console's links carry one),
        pages the path as asked."""
        if scope["type"] == "http":
            path = scope["path"]
            scope = {**scope, "skillfs.path": path}
            if len(path) > 1 and path.endswith("/"):
                scope["path"] = path.rstrip("/") or "/"
        await self.app(scope, receive, send)

    def close(self) -> None:
        """End the live-update streams and stop taking work, so a server can shut down."""
        self.live.close()
        self.pool.close()

    async def ready(self, timeout: float = 1.0) -> bool:
        """Whether a page would get a thread within `timeout` seconds (for /readyz)."""
        return await self.pool.probe(timeout)

    # ------------------------------------------------------------------ routing

    def _routes(self) -> list[Route]:
        routes = [
            Route("/favicon.ico", self._favicon),
            Route("/static/{name}", self._static),
            Route("/login", self.signin.login, methods=["GET", "POST"]),
            Route("/logout", self._logout, methods=["POST"]),
        ]
        for page in PAGES:
            for path, make in page.paths():
                routes.append(Route(path, self._endpoint(page, make), methods=[page.method]))
        return routes

    def _endpoint(self, page: Page, make: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            cookie = request.cookies.get(COOKIE)
            session = self.sessions.check(cookie)  # before any byte of the body is read
            if session is None:
                return self._signed_out(request)
            form, body = FormData(), None
            try:
                if request.method == "POST":
                    request = limit_body(request, self.body_limits[page.body])
                    form, body = await self._read_body(request, page.body)
                    if not self._csrf_ok(request, form, session):
                        return self._csrf_failed()
                call = self._call(request, session, cookie, form, body)
                return await self.pool.run(self._dispatch, call, page, make)
            except HTTPError as exc:  # a body over its limit or that does not parse
                return await self._http_error(request, exc)
            finally:
                await form.close()

        return endpoint

    def _call(
        self,
        request: Request,
        session: Session,
        cookie: str | None,
        form: FormData | None = None,
        body: Any = None,
    ) -> Call:
        call = Call(
            request,
            session,
            self.store,
            self.render,
            form=form or FormData(),
            json=body,
            zip_limits=self.zip_limits,
            live=self.live,
            recheck=lambda: self.sessions.check(cookie),
        )
        flash = request.cookies.get(FLASH_COOKIE)
        path = call.path
        if flash and request.method == "GET" and not path.startswith(("/api/", "/events")):
            call.flash = unquote(flash)[:500]
        return call

    async def _read_body(self, request: Request, kind: Body) -> tuple[FormData, Any]:
        ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype == "application/json":
            raw = await request.body()
            try:
                return FormData(), json.loads(raw or b"null")
            except ValueError as exc:
                raise HTTPError(
                    400, "Bad request", f"the JSON body does not parse: {exc}"
                ) from None
        if ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            files = MAX_FILES if kind == "upload" else 0
            # a URL-encoded field may be the editor's whole text; the body's limit bounds it
            part = MAX_PART if ctype == "multipart/form-data" else self.body_limits[kind]
            form = request.form(max_files=files, max_fields=MAX_FIELDS, max_part_size=part)
            return await form, None
        return FormData(), None

    @staticmethod
    def _csrf_ok(request: Request, form: FormData, session: Session) -> bool:
        sent = form.get("csrf") or request.headers.get("x-csrf-token") or ""
        return isinstance(sent, str) and hmac.compare_digest(sent.encode(), session.csrf.encode())

    def _csrf_failed(self) -> Response:
        return self.error_page(
            403,
            "Form expired",
            "this form was not issued by your current session (CSRF check failed)",
            "Go back, reload the page and submit again.",
        )

    def _signed_out(self, request: Request) -> Response:
        path = str(request.scope.get("skillfs.path", request.url.path))
        if request.method in ("GET", "HEAD") and not path.startswith(("/api/", "/events")):
            return redirect("/login?next=" + quote(path))
        return self.error_page(401, "Signed out", "your session ended: sign in again")

    def _dispatch(self, call: Call, page: Page, make: Any) -> Response:
        """A page's response, or the error page of what it raised (runs in the pool). A page
        that only reads, its error page included, runs under the server's short budget
        (`SERVER_READS`): with the store down it says so within seconds, not after the
        store's `retry_for`. A form's write keeps the store's own."""
        if call.method not in ("GET", "HEAD"):
            return self._respond(call, page, make)
        with budget(SERVER_READS):
            return self._respond(call, page, make)

    def _respond(self, call: Call, page: Page, make: Any) -> Response:
        try:
            with acting_as(call.session.principal.credential()):  # its commits' token
                resp = page.handler(call, **args_of(dict(call.request.path_params), make))
        except HTTPError as exc:
            resp = self.error_page(exc.status, exc.title, exc.message, exc.hint, call)
        except SkillfsError as exc:
            resp = self.store_error(exc, call)
        except Exception:
            log.exception("console: %s %s failed", call.method, call.path)
            resp = self.error_page(
                500,
                "Something broke",
                "the console hit an unexpected error; it is logged",
                "",
                call,
            )
        flash_set = any(
            k == b"set-cookie" and v.startswith(FLASH_COOKIE.encode() + b"=")
            for k, v in resp.raw_headers
        )
        if call.flash is not None and not flash_set:
            set_cookie(resp, FLASH_COOKIE, "", secure=call.secure, max_age=0)
        return resp

    async def _logout(self, request: Request) -> Response:
        cookie = request.cookies.get(COOKIE)
        session = self.sessions.check(cookie)
        if session is None:
            return self._signed_out(request)
        request = limit_body(request, SMALL_BODY)
        form = await request.form(max_files=0, max_fields=MAX_FIELDS)
        if not self._csrf_ok(request, form, session):
            return self._csrf_failed()
        self.sessions.sign_out(cookie)  # this cookie is void here, wherever copies of it are
        resp = redirect("/login")
        set_cookie(resp, COOKIE, "", secure=request.url.scheme == "https", max_age=0)
        return resp

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        """An error page raised outside a page (a body over its limit at sign-in, say)."""
        assert isinstance(exc, HTTPError)
        if _path(request).startswith("/api/"):  # a script reads it (a body that does not parse)
            return JSONResponse({"error": exc.message, "hint": exc.hint}, exc.status)
        return self.error_page(exc.status, exc.title, exc.message, exc.hint)

    async def _http_exception(self, request: Request, exc: Exception) -> Response:
        """Starlette's own refusals (no such page, wrong method, body over its limit, a form
        that does not parse) as the console's error pages."""
        assert isinstance(exc, HTTPException)
        status, path = exc.status_code, _path(request)
        title, message, hint = HTTPStatus(status).phrase, str(exc.detail), ""
        cookie = request.cookies.get(COOKIE)
        session = self.sessions.check(cookie)
        if status == 404:
            if session is None:
                return self._signed_out(request)
            title, message, hint = "Not found", f"there is no page at {path}", ""
            hint = "Start again from the agents."
        elif status == 405:
            title = "Method not allowed"
            only_read = "GET" in (exc.headers or {}).get("Allow", "")
            message = (
                "this page is only read" if only_read else "this action needs a form submission"
            )
        if session is None:
            page = self.error_page(status, title, message, hint)
        else:
            call = self._call(request, session, cookie)
            page = await self.pool.run(self.error_page, status, title, message, hint, call)
        if exc.headers and "Allow" in exc.headers:  # a 405 says which methods the page takes
            page.headers["Allow"] = exc.headers["Allow"]
        return page

    # ------------------------------------------------------------------ static files

    async def _favicon(self, request: Request) -> Response:
        return self._static_file("favicon.svg")

    async def _static(self, request: Request) -> Response:
        return self._static_file(str(request.path_params["name"]))

    def _static_file(self, name: str) -> Response:
        resource = resources.files("skillfs.console").joinpath("static", name)
        if name.startswith(".") or not resource.is_file():
            return self.error_page(404, "Not found", f"no static file {name!r}")
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype == "application/javascript":
            ctype += "; charset=utf-8"
        return Response(
            resource.read_bytes(),
            media_type=ctype,
            headers={"Cache-Control": "public, max-age=300"},
        )

    # ------------------------------------------------------------------ rendering

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("domain", None)
        context.setdefault("revision", None)
        return HTMLResponse(self.env.get_template(template).render(**context), status_code=status)

    def error_page(
        self,
        status: int,
        title: str,
        message: str,
        hint: str = "",
        call: Call | None = None,
        links: list[tuple[str, str]] | None = None,
        code: str = "",
    ) -> Response:
        """The error page; for a script (`/api/`), JSON whose `code` names the error class (a
        409 of a wrong state, FailedPrecondition, from one of a conflict, Conflict)."""
        if call is not None and call.path.startswith("/api/"):  # a script reads it, not a person
            return JSONResponse({"error": message, "hint": hint, "code": code}, status)
        context = {
            "code": status,
            "heading": title,
            "message": message,
            "hint": hint,
            "links": links or [],
        }
        if call is not None:
            return call.render("error.html", status, **context)
        return self.render("error.html", status, call=None, **context)

    def store_error(self, exc: SkillfsError, call: Call) -> Response:
        """A store error as the page an operator can act on. Only a refused form (a POST)
        says that nothing was written: a page that was only read wrote nothing anyway."""
        posted = call.method == "POST"
        if isinstance(exc, StoreUnavailable):
            return self.error_page(
                503,
                "The store is not answering",
                str(exc),
                ("Nothing was written. " if posted else "")
                + f"The console keeps using {self.store.url}; "
                + ("submit again" if posted else "reload this page")
                + " when the store is back.",
                call,
            )
        status = exc.http_status
        title = _TITLES.get(exc.code) or _TITLES.get(status, "Store error")
        hint = "Nothing was written." if posted and status in (400, 409, 413) else ""
        links = self._history_link(call) if isinstance(exc, NotFound) else []
        return self.error_page(status, title, str(exc), hint, call, links, exc.code)

    def _history_link(self, call: Call) -> list[tuple[str, str]]:
        """On a skill's page that found nothing (a version no longer kept, a file not in it):
        a link to the skill's history page, which lists the versions there are."""
        parsed = urls.parse_scope(call.path.strip("/").split("/"))
        if parsed is None or not parsed[1] or not parsed[1][0]:
            return []
        scope, rest = parsed
        if rest[1:2] == ["history"] or not call.can.read(scope):
            return []
        try:
            skill = check_skill_name(rest[0])
            call.store.versions(scope, skill)
        except SkillfsError:  # never existed: the message lists the skills there are
            return []
        return [(f"History of {skill}", urls.skill_url(scope, skill, "history"))]


def make_app(
    store: Store,
    tokens: Tokens | None = None,
    *,
    admin_token: str | None = None,
    max_upload: int = 64 * 1024 * 1024,
    threads: int = DEFAULT_THREADS,
    max_streams: int = DEFAULT_STREAMS,
) -> Console:
    """The console over `store`, signing in with the server's tokens (their grants decide what
    each operator may read and write); or, without a tokens config, one `admin_token` that may
    do everything (for `make run` and tests)."""
    if tokens is None:
        if not admin_token:
            raise InvalidPath("the console needs the server's tokens or an admin_token")
        tokens = Tokens(
            text=tokens_document([("admin", admin_token, ["*:admin"])], secrets.token_hex(16))
        )
    return Console(store, tokens, max_upload=max_upload, threads=threads, max_streams=max_streams)


def _path(request: Request) -> str:
    """The console path of a request (without the prefix it is mounted at)."""
    return str(request.scope.get("skillfs.path", request.url.path))
