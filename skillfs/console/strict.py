"""The console's side of strict saving (docs/design.md §7, docs/console.md "Saving, strictness
and conflicts"): a write that breaks the spec is refused unless forced; these pages say so and
offer the explicit second step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from starlette.responses import Response

from skillfs.console.call import Call


def forced(call: Call) -> bool:
    """Whether the operator chose "Do it anyway": the write is then not strict."""
    return call.field("force") == "1"


def confirm(
    call: Call, action: str, title: str, problems: Mapping[str, Sequence[object]]
) -> Response:
    """The "this breaks the spec" page: the findings and a button that repeats the request
    with `force` set, so only an explicit second click stores an off-spec skill."""
    fields = {k: v for k, v in call.fields().items() if k not in ("csrf", "force")}
    return call.render(
        "confirm.html", 422, action=action, heading=title, problems=problems, fields=fields
    )
