"""One change feed per store per process: a server's hub (gRPC Watch streams), its console's
live pages and its MCP sessions follow the store through one subscription each on the store's
feed, over one store connection, and one publish wakes all three (docs/design.md §6.1)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import grpc
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import skillfs
from skillfs.model import Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.remote.wire import rev_to_pb
from support.grpc_servers import ADMIN, ALICE, running
from tests.helpers import wait_until
from tests.runtime_helpers import md
from tests.stores import url_for

AGENT = "support-bot"
DOMAIN = f"agents/{AGENT}"
NAME = "skillfs-one-feed"


def _blocked_reads(admin: Any) -> int:
    """Connections of the server's store waiting in XREAD now."""
    return sum(1 for c in admin.client_list() if c.get("name") == NAME and c["cmd"] == "xread")


def _reached(target: list[Any], seen: list[Any]) -> bool:
    return bool(target) and rev_to_pb(target[0]) in seen


def _hub(
    port: int, since: skillfs.Revision, target: list[Any], seen: list[Any], woke: threading.Event
) -> Any:
    """A Watch stream whose events' revisions go to `seen`; `woke` once `target` is among
    them (the event may come before the publish call returns and `target` is known)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stream = pb_grpc.SkillReaderStub(channel).Watch(
        pb.WatchRequest(domain=DOMAIN, since=rev_to_pb(since)),
        metadata=[("authorization", f"Bearer {ADMIN}")],
    )

    def read() -> None:
        for event in stream:
            seen.append(event.through)
            if _reached(target, seen):
                woke.set()
                return

    threading.Thread(target=read, daemon=True).start()
    return channel, stream


def _console(port: int, woke: threading.Event, stop: threading.Event) -> httpx.Client:
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    page = http.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
    assert nonce, page.text
    http.post("/login", data={"nonce": nonce.group(1), "token": ADMIN})

    def read() -> None:
        with http.stream("GET", f"/events?domain={DOMAIN}") as reply:
            for line in reply.iter_lines():
                if line.startswith("event: change"):
                    woke.set()
                if stop.is_set() or woke.is_set():
                    return

    threading.Thread(target=read, daemon=True).start()
    return http


def _mcp(port: int, listed: threading.Event, woke: threading.Event, stop: threading.Event) -> None:
    async def on_message(message: Any) -> None:
        if "ResourceListChanged" in type(getattr(message, "root", message)).__name__:
            woke.set()

    async def main() -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {ALICE}"})
        transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
        async with Client(transport, mode="legacy", message_handler=on_message) as c:  # type: ignore[arg-type]
            await c.list_resources()  # opens alice's view: it follows the agent's domain
            listed.set()
            while not stop.is_set():
                await anyio.sleep(0.05)

    threading.Thread(target=lambda: anyio.run(main), daemon=True).start()


@pytest.mark.slow
def test_the_hub_console_and_mcp_share_one_store_connection(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = url_for(request, "redis", tmp_path) + f"&client_name={NAME}"
    admin = request.getfixturevalue("redis_server").client()
    alice = Scope.user(AGENT, "alice")
    writer = skillfs.open_store(url.replace(NAME, "skillfs-writer"))
    since = writer.publish(alice, "first", {"SKILL.md": md("first")}).revision
    target: list[skillfs.Revision] = []
    woke = {name: threading.Event() for name in ("hub", "console", "mcp")}
    listed, stop = threading.Event(), threading.Event()
    with running(url, tmp_path) as server:
        assert server.http_port is not None
        feed = server.store.changes.feed
        through: list[Any] = []
        channel, stream = _hub(server.grpc_port, since, target, through, woke["hub"])
        http = _console(server.http_port, woke["console"], stop)
        _mcp(server.http_port, listed, woke["mcp"], stop)
        try:
            assert listed.wait(30)
            # the hub's, the console stream's and the MCP view's follower's subscriptions
            wait_until(lambda: len(feed._domains.get(DOMAIN, ()).subs) >= 3, timeout=30)  # type: ignore[union-attr]
            seen = []
            for _ in range(20):  # waits restart every second: sample across them
                seen.append(_blocked_reads(admin))
                time.sleep(0.1)
            assert max(seen) == 1, seen  # before: the hub, the console and MCP one each
            target.append(writer.publish(alice, "second", {"SKILL.md": md("second")}).revision)
            if _reached(target, through):
                woke["hub"].set()
            for name, event in woke.items():
                assert event.wait(10), f"the publish did not reach the {name}"
        finally:
            stop.set()
            stream.cancel()
            channel.close()
            http.close()
    writer.close()
    admin.close()
