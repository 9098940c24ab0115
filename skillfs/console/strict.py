"""The console's side of strict saving (docs/design.md §7, docs/console.md "Saving, strictness
and conflicts"): a write that breaks the spec is refused unless forced; these pages say so and
offer the explicit second step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from starlette.responses import Response

from skillfs.console.call import Call
from skillfs.spec.validation import suggest_name


def forced(call: Call) -> bool:
    """Whether the operator chose "Do it anyway": the write is then not strict."""
    return call.field("force") == "1"


def confirm(
    call: Call,
    action: str,
    title: str,
    problems: Mapping[str, Sequence[object]],
    name_field: str = "",
) -> Response:
    """The "this breaks the spec" page: the findings and a button that repeats the request
    with `force` set, so only an explicit second click stores an off-spec skill (its message
    kept, and editable: why it is stored anyway). With
    `name_field` (the form field holding a new skill's name), a name the spec refuses gets a
    first button that repeats the request with the valid name it suggests instead."""
    fields = {k: v for k, v in call.fields().items() if k not in ("csrf", "force", "message")}
    suggestion = None
    if name_field:
        name = fields.get(name_field, "").strip()
        better = suggest_name(name)
        if better and better != name:
            suggestion = (name_field, better)
    return call.render(
        "confirm.html",
        422,
        action=action,
        heading=title,
        problems=problems,
        fields=fields,
        suggestion=suggestion,
        message=call.message,
    )
