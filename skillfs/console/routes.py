"""Which page answers which URL: one table of (method, pattern, handler).

URLs mirror the store's logical keys (docs/console.md, "Pages"). A pattern is the path's
segments: a literal, `{name}` for one segment, `{path*}` for the rest (maybe none), and a
leading `{scope}` for a scope's key prefix (`agents/A/shared/skills`, `agents/A/users/U/skills`,
`markets/M/skills`). The segments become the handler's keyword arguments, checked first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skillfs.console import urls
from skillfs.console.call import Call
from skillfs.console.pages import agents, editor, files, history, lifecycle, live, skill, worker
from skillfs.console.web import HTTPError, Response
from skillfs.names import check_id, check_skill_name

Handler = Callable[..., Response]

#: How each named segment is checked before a handler sees it.
_CHECKS: dict[str, Callable[[str], str]] = {
    "agent": lambda v: check_id("agent", v),
    "user": lambda v: check_id("user", v),
    "market": lambda v: check_id("market", v),
    "skill": check_skill_name,
}


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str
    handler: Handler

    def match(self, segments: list[str]) -> dict[str, Any] | None:
        """The handler's arguments when the path fits the pattern (unchecked), else None."""
        pattern = self.pattern.split("/") if self.pattern else []
        args: dict[str, Any] = {}
        if pattern[:1] == ["{scope}"]:
            parsed = urls.parse_scope(segments)
            if parsed is None:
                return None
            args["scope"], segments = parsed
            pattern = pattern[1:]
        for i, part in enumerate(pattern):
            if part == "{path*}":
                args["path"] = "/".join(segments[i:])
                return args
            if i >= len(segments):
                return None
            if part.startswith("{"):
                args[part.strip("{}")] = segments[i]
            elif part != segments[i]:
                return None
        return args if len(segments) == len(pattern) else None


ROUTES = [
    Route("GET", "", agents.home),
    Route("GET", "events", live.events),
    Route("POST", "api/validate", editor.api_validate),
    Route("GET", "agents", agents.open_agent),
    Route("GET", "agents/{agent}", agents.agent_page),
    Route("GET", "agents/{agent}/users", agents.open_user),
    Route("GET", "agents/{agent}/shared", agents.to_agent),
    Route("GET", "agents/{agent}/users/{user}", worker.worker_page),
    Route("GET", "markets/{market}", agents.to_market),
    Route("GET", "{scope}", agents.scope_page),
    Route("POST", "{scope}", lifecycle.scope_post),
    Route("GET", "{scope}/{skill}", skill.skill_page),
    Route("GET", "{scope}/{skill}/files/{path*}", editor.editor_page),
    Route("POST", "{scope}/{skill}/save", editor.save),
    Route("GET", "{scope}/{skill}/raw/{path*}", files.download),
    Route("GET", "{scope}/{skill}/zip", files.download_zip),
    Route("POST", "{scope}/{skill}/upload", files.upload),
    Route("POST", "{scope}/{skill}/rmfile", files.remove_file),
    Route("GET", "{scope}/{skill}/history", history.history_page),
    Route("GET", "{scope}/{skill}/diff", history.diff_page),
    Route("POST", "{scope}/{skill}/rollback", history.rollback),
    Route("POST", "{scope}/{skill}/delete", lifecycle.delete),
    Route("POST", "{scope}/{skill}/rename", lifecycle.rename),
    Route("POST", "{scope}/{skill}/override", lifecycle.override),
]


def route(call: Call) -> Response:
    """The response of the page the request's method and path name."""
    path = call.req.path.strip("/")
    segments = path.split("/") if path else []
    methods: list[str] = []
    for r in ROUTES:
        args = r.match(segments)
        if args is None:
            continue
        if r.method != call.req.method:
            methods.append(r.method)
            continue
        checked = {k: _CHECKS[k](v) if k in _CHECKS else v for k, v in args.items()}
        return r.handler(call, **checked)
    if not methods:
        raise call.no_page()
    if "GET" in methods:
        raise HTTPError(405, "Method not allowed", "this page is only read")
    raise HTTPError(405, "Method not allowed", "this action needs a form submission")
