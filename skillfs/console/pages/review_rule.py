"""A scope's two-person rule on its page (docs/governance.md, "The two-person rule"): shown
to everyone who reads the scope, turned on or off by a token with an admin grant on it."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import write_level
from skillfs.console import urls
from skillfs.console.call import Call, HTTPError
from skillfs.model import Scope
from skillfs.store.rules import REVIEW


def set_rule(call: Call, scope: Scope) -> Response:
    """`required=1` requires review, `required=0` lifts it; by the signed-in token, with the
    form's message (the audit lists it)."""
    call.require(write_level(REVIEW), scope)
    wanted = call.field("required")
    if wanted not in ("0", "1"):
        raise HTTPError(400, "Bad request", f"required is 0 or 1, not {wanted!r}")
    if wanted == "1":
        call.store.review.require(scope, options=call.options())
        said = "now requires review: every live change goes through a draft another person approves"
    else:
        call.store.review.lift(scope, options=call.options())
        said = "no longer requires review: writes are live at once"
    return call.done(urls.scope_url(scope), f"{urls.scope_label(scope)} {said}")
