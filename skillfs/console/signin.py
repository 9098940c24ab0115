"""Signing in and out: the only pages an anonymous visitor reaches (docs/console.md, "Signing
in"). The sign-in page names nothing of the deployment (not the store), and where it sends
the operator afterwards is a path of this site only."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from skillfs.console.call import Render, limit_body, redirect, set_cookie
from skillfs.console.session import COOKIE, LOGIN_COOKIE, SESSION_SECONDS, Sessions

#: The sign-in form has three short fields; its body is read before any session exists.
MAX_LOGIN_BODY = 16 * 1024


def safe_next(target: str) -> str:
    """Only a path of this site: no scheme or host, no `//` or `/\\` (which browsers read as
    another host), no control characters or spaces (which could end the Location header)."""
    parts = urlsplit(target)
    if (
        not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ord(c) < 0x21 or ord(c) == 0x7F for c in target)
        or parts.scheme
        or parts.netloc
    ):
        return "/"
    return target


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


class SignIn:
    """GET and POST /login over the console's sessions and templates."""

    def __init__(self, sessions: Sessions, render: Render) -> None:
        self.sessions = sessions
        self.render = render

    async def login(self, request: Request) -> Response:
        form = FormData()
        if request.method == "POST":
            request = limit_body(request, MAX_LOGIN_BODY)
            form = await request.form(max_files=0, max_fields=8)
        target = safe_next(request.query_params.get("next") or _field(form, "next") or "/")
        secure = request.url.scheme == "https"
        if request.method == "POST":
            if not self.sessions.login_nonce_ok(
                request.cookies.get(LOGIN_COOKIE), _field(form, "nonce")
            ):
                return self._form(request, target, "The sign-in form expired: try again.", 403)
            cookie = self.sessions.sign_in(_field(form, "token"))
            if cookie is None:
                return self._form(
                    request,
                    target,
                    "Unknown or revoked token. Ask an operator for an admin token.",
                    401,
                )
            resp = redirect(target)
            set_cookie(resp, COOKIE, cookie, secure=secure, max_age=SESSION_SECONDS)
            set_cookie(resp, LOGIN_COOKIE, "", secure=secure, max_age=0)
            return resp
        if self.sessions.check(request.cookies.get(COOKIE)) is not None:
            return redirect(target)
        return self._form(request, target, None, 200)

    def _form(self, request: Request, target: str, error: str | None, status: int) -> Response:
        # Reuse the pending nonce: a second tab (or the favicon request) must not void this form.
        nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(16)
        if not nonce.replace("-", "").replace("_", "").isalnum():
            nonce = secrets.token_urlsafe(16)
        resp = self.render("login.html", status, call=None, nonce=nonce, next=target, error=error)
        set_cookie(resp, LOGIN_COOKIE, nonce, secure=request.url.scheme == "https", max_age=3600)
        return resp
