"""Signed-cookie sessions and CSRF tokens.

The session cookie names the token by its SHA-256 and is signed with a key derived from the
tokens config, so every console of one deployment (sharing the tokens file) accepts it and
nothing is kept in server memory; the principal is looked up again on every request, so a
token removed from the config ends its sessions within seconds.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from skillfs.auth import Principal, Tokens, hash_token

COOKIE = "skillfs_session"
LOGIN_COOKIE = "skillfs_login"
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class Session:
    principal: Principal
    issued: int
    csrf: str  # derived from the cookie's nonce; every POST must carry it


class Sessions:
    """Issues and checks session cookies against the current tokens config."""

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens

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
        if time.time() - issued > SESSION_SECONDS:
            return None
        principal = self.tokens.config.principals.get(digest)
        if principal is None:
            return None
        return Session(principal, issued, self._sign("csrf." + nonce))

    def login_nonce_ok(self, cookie: str | None, form_value: str | None) -> bool:
        """The sign-in form's double-submit check (there is no session to bind it to yet)."""
        if not cookie or not form_value:
            return False
        return hmac.compare_digest(cookie, form_value)
