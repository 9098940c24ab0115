"""The kill switch (docs/governance.md, "Disable and enable"): a skill switched off with a
reason and on again, and a shared or market skill hidden from one user and shown again.

A user's *hiding entry* is a disabled entry with no files in the user's scope: it is not a
skill of the user's, so the pages show it as "hidden from this user", never as an empty skill.
"""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call, HTTPError
from skillfs.model import Scope

#: Where a switch returns the operator: the skill's page, or the user view it was used from.
BACK = ("skill", "user")


def disable(call: Call, scope: Scope, skill: str) -> Response:
    """Switch a skill off (files and history kept); in a user's scope, for a skill the user
    sees from the shared scope or a market, hide it from that user alone. The reason is the
    form's message, the commit's message."""
    call.require(Level.write, scope)
    reason = call.message
    expected = call.form_int("expected")
    back = _back(call, scope, skill)  # every field checked before anything is written
    call.store.governance.disable(scope, skill, reason, options=call.options(expected))
    # in a user's scope, a skill it does not hold (expected 0) can only be hidden
    hid = scope.kind == "user" and expected == 0
    said = f": {reason}" if reason else ""
    if hid:
        message = f"Hid {skill} from {scope.user_id}{said}"
    else:
        message = f"Disabled {skill}{said}. Workers leave it out from their next step"
    return call.done(back, message)


def enable(call: Call, scope: Scope, skill: str) -> Response:
    """Switch a disabled skill on again; a user's hiding entry is removed, so the user sees
    the skill from below again."""
    call.require(Level.write, scope)
    expected = call.form_int("expected")
    unhide = call.store.manifest(scope, skill, version=expected).hides
    back = _back(call, scope, skill, gone=unhide)
    call.store.governance.enable(scope, skill, options=call.options(expected))
    if unhide:
        message = f"{skill} is no longer hidden from {scope.user_id}"
    else:
        message = f"Enabled {skill}: workers see it again from their next step"
    return call.done(back, message)


def _back(call: Call, scope: Scope, skill: str, *, gone: bool = False) -> str:
    """The page to return to: the user view the form was on, else the skill's page (or,
    when the entry no longer exists, its scope's)."""
    back = call.field("back", "skill")
    if back not in BACK:
        raise HTTPError(400, "Bad request", f"back must be one of {', '.join(BACK)}")
    if back == "user" and scope.kind == "user" and scope.agent_id and scope.user_id:
        return urls.user_url(scope.agent_id, scope.user_id)
    return urls.scope_url(scope) if gone else urls.skill_url(scope, skill)
