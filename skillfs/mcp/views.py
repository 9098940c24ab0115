"""The views an MCP server serves, one per (agent, user, markets), and the watch that tells
their sessions of a change as soon as it lands.

Every request takes a fresh snapshot of its view (docs/design.md §3 C3: an edit is seen at the
next request; C4: everything one request reads is of one snapshot). Each view also has one
watch task, woken by the runtime's follower (`Skills.wait_changed`); when the view's token
moves it sends `notifications/resources/list_changed` (and `prompts/list_changed` when the
prompts a user picks from changed) to the sessions that read the view:
on their `subscriptions/listen` streams (protocol 2026-07-28) and on the connection of
handshake-era sessions (≤ 2025-11-25), which the SDK offers no registry of, so the view keeps
the ones that called it (bounded).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST

from skillfs.api import Store
from skillfs.mcp import prompts
from skillfs.mcp.catalog import uri
from skillfs.model.pins import Pins
from skillfs.runtime import Market, Skills, Snapshot
from skillfs.runtime.model_tools import ToolSet
from skillfs.runtime.skill_writes import WriteMode, check_mode
from skillfs.util.deadline import SERVER_READS, within
from skillfs.util.outage import Outage

log = logging.getLogger("skillfs.mcp")

#: How long one wait on the watch lasts before the task looks again (and can be cancelled).
WAIT_SECONDS = 5.0
#: Handshake-era sessions remembered per view for notifications (the oldest is forgotten).
MAX_SESSIONS = 1000


@dataclass(frozen=True)
class ViewKey:
    """Which skills a session sees, and through which tools: the worker view `Skills(store,
    agent, user, markets, environment=, pins=, tools=)` ("": no environment declared to staged
    rollouts; docs/governance.md, "Labels and pins"; the tool set, docs/runtime.md, "Tool
    sets")."""

    agent: str
    user: str
    markets: tuple[str, ...] = ()
    environment: str = ""
    pins: Pins = field(default_factory=Pins)
    tools: ToolSet = "default"


class View:
    """One view, shared by every session that reads it."""

    def __init__(self, key: ViewKey, skills: Skills) -> None:
        self.key = key
        self.skills = skills
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        #: Per connection: its session, and whether its token may still read the view.
        self._sessions: OrderedDict[int, tuple[ServerSession, Allowed]] = OrderedDict()
        #: Open listen streams (2026-07-28), each with its token's check.
        self._listening: dict[anyio.CancelScope, Allowed] = {}
        self._cancel: anyio.CancelScope | None = None
        #: The first snapshot a request of the view took, until the watch starts from it.
        self._first: Snapshot | None = None
        self._watching = False

    async def snapshot(self, session: str | None = None) -> Snapshot:
        """A fresh snapshot of the conversation `session` (`conversation`; None: the view's
        own), taken in a thread (the store clients block)."""
        snap = await anyio.to_thread.run_sync(
            functools.partial(within, SERVER_READS, self.skills.snapshot, session=session)
        )
        if self._first is None and not self._watching:
            self._first = snap
        return snap

    def remember(self, session: ServerSession, allowed: Allowed) -> None:
        """Notify this session's connection of changes too (handshake-era sessions have no
        listen stream). The SDK makes a `ServerSession` per request, each sending its
        notifications on its connection: one is kept per connection, which the request
        context does not expose otherwise (without this, a connection got one copy of
        each notification per request it had made). `allowed` is asked before each notice:
        a revoked or narrowed token's open stream is told nothing more."""
        key = id(getattr(session, "_connection", session))
        self._sessions[key] = (session, allowed)
        self._sessions.move_to_end(key)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)

    async def serve_listen(
        self, ctx: ServerRequestContext[Any, Any], params: Any, allowed: Allowed
    ) -> Any:
        """One `subscriptions/listen` stream. Once its token may no longer read the view
        (revoked or narrowed, asked before each notice as for handshake-era sessions), the
        stream ends with an error saying so, and the client's listen again is refused."""
        with anyio.CancelScope() as scope:
            self._listening[scope] = allowed
            try:
                return await self.listen(ctx, params)
            finally:
                del self._listening[scope]
        raise MCPError(
            code=INVALID_REQUEST,
            message="this token may no longer read this view (revoked or narrowed): listen "
            "again with a token that may",
        )

    async def watch(self, limiter: anyio.CapacityLimiter) -> None:
        """Until cancelled: wait for the view to change, then tell its sessions."""
        outage = Outage(log, f"watching {self.key}")
        with anyio.CancelScope() as scope:
            self._cancel = scope
            snap: Snapshot | None = None
            while True:
                try:
                    if snap is None:  # a view made while the store is down waits for it too
                        await self.snapshot()
                        # From the first request's snapshot, not this later one: a change
                        # made once a request was answered (a listen stream acknowledged)
                        # must be told, though this read may have begun after it landed.
                        snap, self._first, self._watching = self._first, None, True
                        assert snap is not None
                    now = await anyio.to_thread.run_sync(
                        self.skills.wait_changed,
                        snap.token,
                        WAIT_SECONDS,
                        limiter=limiter,
                        abandon_on_cancel=True,
                    )
                except Exception as exc:  # the store is down: the next request reports it
                    outage.failed(exc)  # logged once, and once when it is back
                    await anyio.sleep(1.0)
                    continue
                outage.recovered()
                if now.token != snap.token:
                    await self._notify(now, snap)
                snap = now

    async def _notify(self, now: Snapshot, before: Snapshot) -> None:
        tools = bool(now.model_skills) != bool(before.model_skills)
        listed = prompts.listed(now) != prompts.listed(before)
        for scope, allowed in list(self._listening.items()):
            if not allowed():
                scope.cancel()  # before the publish below: the stream hears none of it
        for changed in changed_uris(now, before):  # resourceSubscriptions of listen streams
            await self.bus.publish(ResourceUpdated(changed))
        await self.bus.publish(ResourcesListChanged())
        if tools:  # the skill tools come and go with the skills
            await self.bus.publish(ToolsListChanged())
        if listed:  # a prompt added, gone, or described anew
            await self.bus.publish(PromptsListChanged())
        for key, (session, allowed) in list(self._sessions.items()):
            if not allowed():
                self._sessions.pop(key, None)
                continue
            try:  # best effort: the connection may be gone
                await session.send_resource_list_changed()
                if tools:
                    await session.send_tool_list_changed()
                if listed:
                    await session.send_prompt_list_changed()
            except Exception:
                self._sessions.pop(key, None)

    def close(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()
        self.listen.close()
        self.skills.close()


def changed_uris(now: Snapshot, before: Snapshot) -> list[str]:
    """The `skill://` URIs whose content differs between two snapshots of a view: a file
    added, changed or gone, and the skill's root when its file set changed."""
    was = {s.id: s.files for s in before.skills}
    out: list[str] = []
    for s in now.skills:
        old = was.pop(s.id, {})
        for path in sorted(s.files.keys() | old.keys()):
            entry, held = s.files.get(path), old.get(path)
            if entry is None or held is None or entry.sha256 != held.sha256:
                out.append(uri(s.id, path))
        if s.files.keys() != old.keys():
            out.append(uri(s.id))
    for gone, files in was.items():
        out += [uri(gone, p) for p in sorted(files)] + [uri(gone)]
    return out


Resolver = Callable[[ServerRequestContext[Any, Any]], ViewKey]
#: The header of an MCP session over HTTP (Streamable HTTP).
SESSION_HEADER = "mcp-session-id"
#: Whether a session's token may still read its view (asked again before each notice).
Allowed = Callable[[], bool]


def conversation(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The conversation a request belongs to: its MCP session over HTTP (the session header,
    which the transport binds to the token that opened it); None over stdio, whose process is
    one conversation, and for a stateless request (docs/runtime.md, "Sessions")."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    return None if headers is None else headers.get(SESSION_HEADER)


def sessionless(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether a request belongs to no conversation: one over HTTP without a session header
    (protocol 2026-07-28 has none), whose snapshot is the view's own session, shared by every
    such request of the view."""
    return getattr(ctx.request, "headers", None) is not None and conversation(ctx) is None


def always() -> bool:
    """A session that cannot lose its view (stdio: the process's own)."""
    return True


class Views:
    """The views of one MCP server: `resolve` says which view a request is for (fixed for
    stdio; from the bearer token and the request for HTTP). At most `max_views` are kept;
    the least recently used one is closed first."""

    def __init__(
        self,
        store: Store,
        resolve: Resolver,
        *,
        max_views: int = 1000,
        skill_writes: WriteMode | None = None,
        allowed: Callable[[ServerRequestContext[Any, Any]], Allowed] | None = None,
    ) -> None:
        self.store = store
        self.resolve = resolve
        #: The check a request's session keeps (HTTP: its token, looked up again).
        self.allowed = allowed
        self.max_views = max_views
        #: The views' `Skills(..., skill_writes=)`: `skillfs mcp --skill-writes` only, whose
        #: store is the caller's own (the server's /mcp writes nothing: its store is its own).
        self.skill_writes = check_mode(skill_writes)
        self._views: OrderedDict[ViewKey, View] = OrderedDict()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._limiter = anyio.CapacityLimiter(max_views)  # watches wait in their own threads

    def view(self, ctx: ServerRequestContext[Any, Any]) -> View:
        """The view of this request (created, and its watch started, on first use)."""
        key = self.resolve(ctx)
        view = self._views.get(key)
        if view is None:
            layers = [Market(m) for m in key.markets]
            skills = Skills(
                self.store,
                key.agent,
                key.user,
                layers,
                environment=key.environment or None,
                pins=key.pins,
                tools=key.tools,
                skill_writes=self.skill_writes,
            )
            view = self._views[key] = View(key, skills)
            if self._tasks is not None:
                self._tasks.start_soon(view.watch, self._limiter)
            while len(self._views) > self.max_views:
                self._views.popitem(last=False)[1].close()
        self._views.move_to_end(key)
        view.remember(ctx.session, self.check(ctx))
        return view

    def check(self, ctx: ServerRequestContext[Any, Any]) -> Allowed:
        """Whether this request's token may still read its view, asked before each notice."""
        return always if self.allowed is None else self.allowed(ctx)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The watches run inside this (the MCP server's lifespan)."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            for view in self._views.values():
                tasks.start_soon(view.watch, self._limiter)
            try:
                yield
            finally:
                self._tasks = None
                for view in self._views.values():
                    view.close()
                self._views.clear()
                tasks.cancel_scope.cancel()
