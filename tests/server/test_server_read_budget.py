"""The server's own reads have a short budget (docs/server.md, "A short budget for the
server's own reads"): with the store down, a console page and an MCP call answer "store
unavailable" within 5 s (`SERVER_READS`, 4 s, and the rendering), below the MCP clients'
request timeouts, instead of waiting out the store's `retry_for` (10 s here, the store's
default: without the budget the page took 20 s, its error page reading the store again, and
the MCP call 10 s). A real Redis is
stopped under a real `skillfs serve` (in process); the time to each answer is measured."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import skillfs
from skillfs.model import Scope
from skillfs.util.deadline import SERVER_READS
from support.grpc_servers import ADMIN, ALICE, in_process
from support.servers import RedisServer
from tests.helpers import skill_md

SHARED = Scope.shared("support-bot")
#: The promise (docs/server.md): "store unavailable" within 5 s, below the MCP clients'
#: request timeouts; the budget (4 s) leaves room for the page's rendering and HTTP.
LIMIT = 5.0

pytestmark = [pytest.mark.server, pytest.mark.serial]


def test_console_and_mcp_answer_store_unavailable_within_the_budget(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis").start()
    server = in_process(redis.url, tmp_path / "srv")
    base = f"http://127.0.0.1:{server.http_port}"
    try:
        with skillfs.open_store(redis.url) as store:
            store.publish(SHARED, "faq", {"SKILL.md": skill_md("faq")})
        assert SERVER_READS < LIMIT < server.store.retry_for  # what it would wait out
        operator = httpx.Client(base_url=base, timeout=60)
        nonce = re.search(r'name="nonce" value="([^"]+)"', operator.get("/login").text)
        assert nonce and operator.post("/login", data={"nonce": nonce[1], "token": ADMIN})
        page = f"/{SHARED.prefix}"
        assert operator.get(page).status_code == 200
        mcp = httpx.Client(base_url=base, timeout=60)
        headers = {"authorization": f"Bearer {ALICE}",
                   "accept": "application/json, text/event-stream"}  # fmt: skip
        hello = {"protocolVersion": "2025-11-25", "capabilities": {},
                 "clientInfo": {"name": "t", "version": "0"}}  # fmt: skip
        url = "/mcp/?agent=support-bot&user=alice"
        opened = mcp.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 1,
                          "method": "initialize", "params": hello})  # fmt: skip
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        assert "load_skill_through_path" in mcp.post(url, headers=headers, json=listed).text

        redis.stop()

        def timed(ask: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
            started = time.monotonic()
            return ask(), time.monotonic() - started

        with ThreadPoolExecutor(2) as pool:  # both at once: the test waits one budget
            asked_page = pool.submit(timed, lambda: operator.get(page))
            asked_mcp = pool.submit(
                timed, lambda: mcp.post(url, headers=headers, json={**listed, "id": 3})
            )
            (reply, console_took), (answer, mcp_took) = asked_page.result(), asked_mcp.result()
        assert reply.status_code == 503 and "The store is not answering" in reply.text
        assert re.search(r"store .*unavailable", answer.text), answer.text
        print(f"store down: console page {console_took:.2f} s, MCP tools/list {mcp_took:.2f} s")
        assert console_took < LIMIT and mcp_took < LIMIT
        redis.start()  # (the server's watches then end at once when it stops)
    finally:
        server.stop(0)
        redis.stop()
