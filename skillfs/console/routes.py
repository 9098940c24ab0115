"""Which page answers which URL: one table of (method, path, handler, body limit).

URLs mirror the store's logical keys (docs/console.md, "Pages"). Paths are Starlette's
(`{name}` one segment, `{path:path}` the rest) written without the trailing slash the
console's links carry (the application drops it before routing, so both answer), and a
leading `{scope}` stands for a scope's key prefix: `agents/A/shared/skills`,
`agents/A/users/U/skills` or `markets/M/skills`. The segments become the handler's keyword
arguments, checked first (`scope` built from them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from starlette.responses import Response

from skillfs.console.pages import (
    activity,
    agents,
    curation,
    editor,
    files,
    history,
    lifecycle,
    live,
    review,
    rollout,
    skill,
    switch,
    worker,
)
from skillfs.model import Scope
from skillfs.model.names import check_id, check_skill_name

Handler = Callable[..., Response]
#: Which request-body limit a route has (docs/console.md, "Limits"): none read, a form
#: (the editor's text included), a JSON edit to validate, or an upload.
Body = Literal["none", "form", "json", "upload"]

#: How each named segment is checked before a handler sees it.
CHECKS: dict[str, Callable[[str], str]] = {
    "agent": lambda v: check_id("agent", v),
    "user": lambda v: check_id("user", v),
    "market": lambda v: check_id("market", v),
    "skill": check_skill_name,
}

#: A scope's key prefix as a path, and the scope its segments name.
SCOPE_PATHS: dict[str, Callable[[dict[str, str]], Scope]] = {
    "/agents/{agent}/shared/skills": lambda a: Scope.shared(a.pop("agent")),
    "/agents/{agent}/users/{user}/skills": lambda a: Scope.user(a.pop("agent"), a.pop("user")),
    "/markets/{market}/skills": lambda a: Scope.market(a.pop("market")),
}


@dataclass(frozen=True)
class Page:
    method: str
    path: str
    handler: Handler
    body: Body = "none"

    def paths(self) -> list[tuple[str, Callable[[dict[str, str]], Scope] | None]]:
        """The Starlette paths of this page, each with how its segments make the scope."""
        if not self.path.startswith("/{scope}"):
            return [(self.path, None)]
        rest = self.path.removeprefix("/{scope}")
        return [(prefix + rest, make) for prefix, make in SCOPE_PATHS.items()]


def args_of(
    params: dict[str, str], make_scope: Callable[[dict[str, str]], Scope] | None
) -> dict[str, object]:
    """A handler's keyword arguments from the path's segments, each checked."""
    checked: dict[str, str] = {k: CHECKS[k](v) if k in CHECKS else v for k, v in params.items()}
    if make_scope is None:
        return dict(checked)
    scope = make_scope(checked)  # takes its segments out of `checked`
    return {"scope": scope, **checked}


PAGES = [
    Page("GET", "/", agents.home),
    Page("GET", "/events", live.events),
    Page("POST", "/api/validate", editor.api_validate, "json"),
    Page("GET", "/agents", agents.open_agent),
    Page("GET", "/agents/{agent}", agents.agent_page),
    Page("GET", "/agents/{agent}/users", agents.open_user),
    Page("GET", "/agents/{agent}/activity", activity.agent_activity),
    Page("GET", "/markets/{market}/activity", activity.market_activity),
    Page("GET", "/agents/{agent}/drafts", review.agent_queue),
    Page("GET", "/markets/{market}/drafts", review.market_queue),
    Page("GET", "/agents/{agent}/curation", curation.agent_curation),
    Page("GET", "/markets/{market}/curation", curation.market_curation),
    Page("POST", "/agents/{agent}/curation", curation.apply_agent, "form"),
    Page("POST", "/agents/{agent}/usage/drop", curation.drop_usage, "form"),
    Page("POST", "/markets/{market}/curation", curation.apply_market, "form"),
    Page("GET", "/agents/{agent}/shared", agents.to_agent),
    Page("GET", "/agents/{agent}/users/{user}", worker.worker_page),
    Page("GET", "/markets/{market}", agents.to_market),
    Page("GET", "/{scope}", agents.scope_page),
    Page("POST", "/{scope}", lifecycle.scope_post, "upload"),
    # side entries (`_drafts/<name>`, `.archive/<name>`) before the skill routes: no skill
    # is named `_drafts` or `.archive`
    Page("GET", "/{scope}/_drafts/{skill}", review.draft_page),
    Page("POST", "/{scope}/_drafts/{skill}/approve", review.approve, "form"),
    Page("POST", "/{scope}/_drafts/{skill}/reject", review.reject, "form"),
    Page("POST", "/{scope}/.archive/{skill}/restore", curation.restore, "form"),
    Page("GET", "/{scope}/{skill}", skill.skill_page),
    Page("GET", "/{scope}/{skill}/files", editor.editor_page),
    Page("GET", "/{scope}/{skill}/files/{path:path}", editor.editor_page),
    Page("POST", "/{scope}/{skill}/save", editor.save, "form"),
    Page("GET", "/{scope}/{skill}/raw/{path:path}", files.download),
    Page("GET", "/{scope}/{skill}/zip", files.download_zip),
    Page("POST", "/{scope}/{skill}/upload", files.upload, "upload"),
    Page("POST", "/{scope}/{skill}/rmfile", files.remove_file, "form"),
    Page("GET", "/{scope}/{skill}/history", history.history_page),
    Page("GET", "/{scope}/{skill}/diff", history.diff_page),
    Page("POST", "/{scope}/{skill}/rollback", history.rollback, "form"),
    Page("POST", "/{scope}/{skill}/label", history.label, "form"),
    Page("POST", "/{scope}/{skill}/restore", history.restore, "form"),
    Page("POST", "/{scope}/{skill}/delete", lifecycle.delete, "form"),
    Page("POST", "/{scope}/{skill}/rename", lifecycle.rename, "form"),
    Page("POST", "/{scope}/{skill}/override", lifecycle.override, "form"),
    Page("POST", "/{scope}/{skill}/disable", switch.disable, "form"),
    Page("POST", "/{scope}/{skill}/enable", switch.enable, "form"),
    Page("POST", "/{scope}/{skill}/widen", rollout.widen, "form"),
    Page("POST", "/{scope}/{skill}/promote", rollout.promote, "form"),
    Page("POST", "/{scope}/{skill}/abort", rollout.abort, "form"),
    Page("POST", "/{scope}/{skill}/archive", curation.archive, "form"),
]
