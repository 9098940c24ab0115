"""Long lists as pages: a filter (`?q=`) and a page number (`?page=`), so a scope of 10,000
skills is 100 rows at a time (docs/console.md, "Long lists")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

T = TypeVar("T")

#: Rows per page of a paged list.
PER_PAGE = 100
#: The longest filter text looked at (a longer one is cut).
MAX_QUERY = 200


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of a filtered list, and what the page's links need."""

    items: list[T]
    page: int  # 1-based
    pages: int
    total: int  # matching the filter
    unfiltered: int  # the whole list
    q: str
    per_page: int
    param: str  # the query parameter of the page number ("page"; two lists on one page differ)
    #: Other query arguments the list's links keep (the Activity page's actor, skill, times).
    keep: tuple[tuple[str, str], ...] = ()

    @property
    def first(self) -> int:
        """The 1-based number of the first row shown (0 when none)."""
        return (self.page - 1) * self.per_page + 1 if self.items else 0

    @property
    def last(self) -> int:
        return self.first + len(self.items) - 1 if self.items else 0

    def url(self, page: int) -> str:
        """The query string of another page of this list, keeping the filter."""
        args = dict(self.keep)
        if self.q:
            args["q"] = self.q
        if page > 1:
            args[self.param] = str(page)
        return "?" + urlencode(args) if args else "?"


def query_text(query: QueryParams) -> str:
    """The filter text of a request: trimmed, at most MAX_QUERY characters."""
    return query.get("q", "").strip()[:MAX_QUERY]


def page_number(query: QueryParams, param: str = "page") -> int:
    """The page a request asks for: 1 when absent or not a positive number."""
    value = query.get(param, "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def matches(q: str, *texts: object) -> bool:
    """Whether every word of `q` occurs (case-insensitive) in one of `texts`."""
    words = q.lower().split()
    if not words:
        return True
    hay = " ".join(str(t) for t in texts if t is not None).lower()
    return all(w in hay for w in words)


def paged(
    items: Sequence[T],
    query: QueryParams,
    text: Callable[[T], Sequence[object]],
    *,
    per_page: int = PER_PAGE,
    param: str = "page",
    keep: dict[str, str] | None = None,
) -> Paged[T]:
    """The page of `items` a request asks for, filtered by its `q` over `text(item)`. A page
    past the last shows the last."""
    q = query_text(query)
    chosen = [i for i in items if matches(q, *text(i))] if q else list(items)
    pages = max(1, -(-len(chosen) // per_page))
    page = min(page_number(query, param), pages)
    start = (page - 1) * per_page
    kept = tuple((k, v) for k, v in (keep or {}).items() if v)
    return Paged(
        chosen[start : start + per_page],
        page,
        pages,
        len(chosen),
        len(items),
        q,
        per_page,
        param,
        kept,
    )
