"""A scope's host profiles on its page (docs/validation.md, "Host profiles"; docs/console.md):
shown to everyone who reads the scope, changed by a token with an admin grant on it."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import write_level
from skillfs.console import urls
from skillfs.console.call import Call
from skillfs.model import Scope
from skillfs.store.scope_profiles import PROFILES

#: The form's checkbox of profile `<name>` is the field `profile:<name>`.
FIELD = "profile:"


def set_profiles(call: Call, scope: Scope) -> Response:
    """`clear=1` clears the scope's setting (the store's profiles apply); otherwise the
    checked profiles become what the scope accepts. By the signed-in token, with the form's
    message (the audit lists it); an unknown name is refused, listing the known ones."""
    call.require(write_level(PROFILES), scope)
    if call.field("clear") == "1":
        call.store.host_profiles.clear(scope, options=call.options())
        said = "accepts the store's host profiles again"
    else:
        names = [
            k.removeprefix(FIELD) for k, v in call.fields().items() if k.startswith(FIELD) and v
        ]
        call.store.host_profiles.accept(scope, names, options=call.options())
        said = "accepts " + ", ".join(call.store.host_profiles.of(scope).names)
    return call.done(urls.scope_url(scope), f"{urls.scope_label(scope)} {said}")
