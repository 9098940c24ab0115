"""The console's WSGI application: sign-in, CSRF, dispatch, rendering and error pages.

The pages live in `skillfs.console.pages`, found through the table in `skillfs.console.routes`;
this module owns what every request goes through, so no page can forget the session check, the
CSRF check or escaping.
"""

from __future__ import annotations

import hmac
import logging
import mimetypes
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import jinja2

from skillfs.auth import Tokens, tokens_document
from skillfs.console import routes, urls
from skillfs.console.archive import ZipLimits
from skillfs.console.call import FLASH_COOKIE, Call
from skillfs.console.session import COOKIE, LOGIN_COOKIE, SESSION_SECONDS, Sessions
from skillfs.console.web import HTTPError, Request, Response, WSGIEnviron, redirect
from skillfs.errors import InvalidPath, NotFound, SkillfsError, StoreUnavailable
from skillfs.model import Revision
from skillfs.names import check_skill_name
from skillfs.store import Store

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]

SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
]

#: What an operator reads above a store error's message, by the HTTP status its class carries.
_TITLES = {
    400: "Not accepted",
    403: "Not allowed",
    404: "Not found",
    409: "Changed by someone else",
    413: "Too large",
}


class Console:
    """The admin console as a WSGI application (mount it at `/` of an HTTP server)."""

    def __init__(
        self,
        store: Store,
        tokens: Tokens,
        *,
        max_upload: int = 64 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.sessions = Sessions(tokens)
        self.max_upload = max_upload
        self.zip_limits = ZipLimits(max_total_bytes=store.limits.max_skill_size)
        #: Set by `close()`: live-update streams end so a server can shut down.
        self.stopping = threading.Event()
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("skillfs.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(
            urls=urls,
            title="skillfs",
            store_url=store.url,
        )
        self.env.filters.update(
            size=human_size, when=when, ago=ago, mode=file_mode, rev=rev_text, plural=plural
        )

    def close(self) -> None:
        self.stopping.set()

    # ------------------------------------------------------------------ WSGI

    def __call__(self, environ: WSGIEnviron, start_response: StartResponse) -> Iterable[bytes]:
        started = time.monotonic()
        try:
            req = Request(environ, self.max_upload)
            resp = self._dispatch(req)
        except HTTPError as exc:
            resp = self.error_page(exc.status, exc.title, exc.message, exc.hint)
        status = resp.status_line()
        headers = list(resp.headers)
        if not any(k == "Cache-Control" for k, _ in headers):
            headers.append(("Cache-Control", "no-store"))
        start_response(status, headers + SECURITY_HEADERS)
        log.debug(
            "%s %s -> %s in %.1f ms",
            environ.get("REQUEST_METHOD"),
            environ.get("PATH_INFO"),
            status,
            (time.monotonic() - started) * 1000,
        )
        return resp.iterable()

    def _dispatch(self, req: Request) -> Response:
        if req.path == "/favicon.ico":
            return self._static("favicon.svg")
        if req.path.startswith("/static/"):
            return self._static(req.path.removeprefix("/static/"))
        if req.path == "/login":
            return self._login(req)
        session = self.sessions.check(req.cookies.get(COOKIE))
        if session is None:
            if req.method == "GET" and not req.path.startswith(("/api/", "/events")):
                return redirect("/login?next=" + quote(req.path))
            raise HTTPError(401, "Signed out", "your session ended: sign in again")
        if req.method == "POST":
            sent = req.form.get("csrf") or req.header("X-CSRF-Token") or ""
            if not hmac.compare_digest(sent, session.csrf):
                raise HTTPError(
                    403,
                    "Form expired",
                    "this form was not issued by your current session (CSRF check failed)",
                    "Go back, reload the page and submit again.",
                )
        call = Call(
            req,
            session,
            self.store,
            self.render,
            zip_limits=self.zip_limits,
            stopping=self.stopping,
        )
        flash = req.cookies.get(FLASH_COOKIE)
        page = req.method == "GET" and not req.path.startswith(("/api/", "/events"))
        if flash and page:
            call.flash = unquote(flash)[:500]
        try:
            resp = self._route(call)
        except HTTPError as exc:
            resp = self.error_page(exc.status, exc.title, exc.message, exc.hint, call)
        except SkillfsError as exc:
            resp = self.store_error(exc, call)
        except Exception:
            log.exception("console: %s %s failed", req.method, req.path)
            resp = self.error_page(
                500,
                "Something broke",
                "the console hit an unexpected error; it is logged",
                "",
                call=call,
            )
        if call.flash is not None and not any(
            k == "Set-Cookie" and v.startswith(FLASH_COOKIE + "=") for k, v in resp.headers
        ):
            resp.set_cookie(FLASH_COOKIE, "", secure=req.secure, max_age=0)
        return resp

    def _route(self, call: Call) -> Response:
        req = call.req
        if req.path == "/logout":
            if req.method != "POST":
                raise HTTPError(405, "Method not allowed", "sign out with the button")
            resp = redirect("/login")
            resp.set_cookie(COOKIE, "", secure=req.secure, max_age=0)
            return resp
        return routes.route(call)

    # ------------------------------------------------------------------ sign-in

    def _login(self, req: Request) -> Response:
        target = _safe_next(req.query.get("next") or req.form.get("next") or "/")
        if req.method == "POST":
            if not self.sessions.login_nonce_ok(
                req.cookies.get(LOGIN_COOKIE), req.form.get("nonce")
            ):
                return self._login_form(req, target, "The sign-in form expired: try again.", 403)
            cookie = self.sessions.sign_in(req.form.get("token", ""))
            if cookie is None:
                return self._login_form(
                    req,
                    target,
                    "Unknown or revoked token. Ask an operator for an admin token.",
                    401,
                )
            resp = redirect(target)
            resp.set_cookie(COOKIE, cookie, secure=req.secure, max_age=SESSION_SECONDS)
            resp.set_cookie(LOGIN_COOKIE, "", secure=req.secure, max_age=0)
            return resp
        if self.sessions.check(req.cookies.get(COOKIE)) is not None:
            return redirect(target)
        return self._login_form(req, target, None, 200)

    def _login_form(self, req: Request, target: str, error: str | None, status: int) -> Response:
        # Reuse the pending nonce: a second tab (or the favicon request) must not void this form.
        nonce = req.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(16)
        resp = self.render("login.html", status, call=None, nonce=nonce, next=target, error=error)
        resp.set_cookie(LOGIN_COOKIE, nonce, secure=req.secure, max_age=3600)
        return resp

    # ------------------------------------------------------------------ rendering

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("domain", None)
        context.setdefault("revision", None)
        return Response(self.env.get_template(template).render(**context), status=status)

    def error_page(
        self,
        status: int,
        title: str,
        message: str,
        hint: str = "",
        call: Call | None = None,
        links: list[tuple[str, str]] | None = None,
    ) -> Response:
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
        posted = call.req.method == "POST"
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
        title = _TITLES.get(status, "Store error")
        hint = "Nothing was written." if posted and status in (400, 409, 413) else ""
        links = self._history_link(call) if isinstance(exc, NotFound) else []
        return self.error_page(status, title, str(exc), hint, call, links)

    def _history_link(self, call: Call) -> list[tuple[str, str]]:
        """On a skill's page that found nothing (a version no longer kept, a file not in it):
        a link to the skill's history page, which lists the versions there are."""
        parsed = urls.parse_scope(call.req.path.strip("/").split("/"))
        if parsed is None or not parsed[1] or not parsed[1][0]:
            return []
        scope, rest = parsed
        if rest[1:2] == ["history"] or not call.can.read(scope):
            return []
        try:
            skill = check_skill_name(rest[0])
            call.store.history(scope, skill)
        except SkillfsError:  # never existed: the message lists the skills there are
            return []
        return [(f"History of {skill}", urls.skill_url(scope, skill, "history"))]

    def _static(self, name: str) -> Response:
        if "/" in name or name.startswith("."):
            raise HTTPError(404, "Not found", f"no static file {name!r}")
        resource = resources.files("skillfs.console").joinpath("static", name)
        if not resource.is_file():
            raise HTTPError(404, "Not found", f"no static file {name!r}")
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype == "application/javascript":
            ctype += "; charset=utf-8"
        return Response(
            resource.read_bytes(),
            content_type=ctype,
            headers=[("Cache-Control", "public, max-age=300")],
        )


def make_app(
    store: Store,
    tokens: Tokens | None = None,
    *,
    admin_token: str | None = None,
    max_upload: int = 64 * 1024 * 1024,
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
    return Console(store, tokens, max_upload=max_upload)


def _safe_next(target: str) -> str:
    """Only local paths: a sign-in link must not send the operator to another site."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


# ---------------------------------------------------------------------- template filters


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(ts: float) -> str:
    seconds = max(0, int(time.time() - ts))
    for span, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= span:
            return f"{seconds // span} {unit} ago"
    return "just now" if seconds < 10 else f"{seconds} s ago"


def plural(n: int, noun: str) -> str:
    """The count and the noun: 1 file, 2 files, 0 files."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def file_mode(mode: int) -> str:
    return f"{mode & 0o777:o}"


def rev_text(rev: Revision | None) -> str:
    return "—" if rev is None else str(rev.counter)
