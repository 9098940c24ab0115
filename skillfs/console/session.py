"""Signed-cookie sessions and CSRF tokens.

The session cookie names the token by its SHA-256 and is signed with a key derived from the
tokens config, so every console of one deployment (sharing the tokens file) accepts it and
nothing is kept in server memory but the sessions signed out here; the principal is looked up
again on every request, so a token removed from the config ends its sessions within seconds.

Signing out ends the session on the server that received it: the cookie's nonce is remembered
until the cookie would have expired anyway (docs/console.md, "Signing in").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from skillfs.auth import Principal, Tokens, hash_token

COOKIE = "skillfs_session"
LOGIN_COOKIE = "skillfs_login"
SESSION_SECONDS = 12 * 3600
#: Signed-out sessions remembered at most (each until it would have expired); a sign-out
#: needs a live session and its CSRF token, so only token holders add to it.
MAX_SIGNED_OUT = 100_000


@dataclass(frozen=True)
class Session:
    principal: Principal
    issued: int
    csrf: str  # derived from the cookie's nonce; every POST must carry it


class Sessions:
    """Issues and checks session cookies against the current tokens config."""

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens
        self._signed_out: dict[str, int] = {}  # nonce -> when its cookie expires
        self._lock = threading.Lock()

    def _key(self) -> bytes:
        """From the tokens config's receipt key, so every server of one config honours the
        cookie, and a new key signs everyone out."""
        return hmac.new(
            self.tokens.config.receipt_key, b"skillfs console sessions v1", hashlib.sha256
        ).digest()

    def _sign(self, text: str) -> str:
        mac = hmac.new(self._key(), text.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def sign_in(self, token: str) -> str | None:
        """The cookie value for a valid token, None for an unknown or revoked one."""
        digest = hash_token(token.strip())
        if digest not in self.tokens.config.principals:
            return None
        body = f"{digest}.{int(time.time())}.{secrets.token_urlsafe(12)}"
        return f"{body}.{self._sign(body)}"

    def check(self, cookie: str | None) -> Session | None:
        """The session of a cookie that is signed, unexpired and whose token is still valid."""
        if not cookie or cookie.count(".") != 3:
            return None
        body, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac, self._sign(body)):
            return None
        digest, issued_text, nonce = body.split(".")
        try:
            issued = int(issued_text)
        except ValueError:
            return None
        if time.time() - issued > SESSION_SECONDS or nonce in self._signed_out:
            return None
        principal = self.tokens.config.principals.get(digest)
        if principal is None:
            return None
        return Session(principal, issued, self._sign("csrf." + nonce))

    def sign_out(self, cookie: str | None) -> None:
        """End the session of `cookie` here, whatever copies of the cookie remain."""
        if self.check(cookie) is None or cookie is None:
            return
        _, issued, nonce = cookie.rpartition(".")[0].split(".")
        now = time.time()
        with self._lock:
            if len(self._signed_out) >= MAX_SIGNED_OUT:
                expired = [n for n, end in self._signed_out.items() if end < now]
                for n in expired or list(self._signed_out)[: MAX_SIGNED_OUT // 10]:
                    del self._signed_out[n]
            self._signed_out[nonce] = int(issued) + SESSION_SECONDS

    def login_nonce_ok(self, cookie: str | None, form_value: str | None) -> bool:
        """The sign-in form's double-submit check (there is no session to bind it to yet)."""
        if not cookie or not form_value:
            return False
        return hmac.compare_digest(cookie, form_value)
