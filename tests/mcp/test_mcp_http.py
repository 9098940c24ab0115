"""The MCP endpoint over streamable HTTP (McpHttp mounted at /mcp, served by uvicorn), driven
by clients nobody here wrote: FastMCP's skills client reads every file of every corpus skill
byte for byte with digests checked; the official SDK's client gets list-changed notifications
for a publish made while its session is open, in both protocol eras; a token for alice never
reads bob's files; bad requests get errors naming what exists."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fastmcp import Client as FastClient
from fastmcp.skills import SkillsClientExtension
from mcp.shared.exceptions import MCPError

import skillfs
from support.grpc_servers import ALICE, BOB, READER, running
from tests.mcp_helpers import (
    AGENT,
    digest,
    http_endpoint,
    publish_corpus,
    sdk_client,
    sdk_list_skills,
    tokens_text,
)
from tests.runtime_helpers import md

OVERSIZED = {"claude-api"}  # its description is over the specification's 1,024 characters


@pytest.fixture
def store(tmp_path: Path) -> skillfs.Store:
    return skillfs.open_store(f"sqlite:///{tmp_path}/skills.db")


def content_bytes(contents: list[Any]) -> bytes:
    [c] = contents
    return c.text.encode() if hasattr(c, "text") else base64.b64decode(c.blob)


def test_fastmcp_reads_the_whole_corpus_over_http(store: skillfs.Store) -> None:
    corpus = publish_corpus(store)

    async def main() -> None:
        async with http_endpoint(store, tokens_text()) as base:
            client = FastClient(f"{base}/mcp", auth=ALICE, extensions=[SkillsClientExtension()])
            async with client:
                listed = {s.frontmatter.name: s for s in await client.list_skills()}
                assert set(listed) == set(corpus) - OVERSIZED
                checked = 0
                for name, files in corpus.items():
                    if name in OVERSIZED:
                        with pytest.raises(Exception, match="not served as an MCP skill"):
                            await client.get_skill(f"skill://{name}/SKILL.md")
                        uris = {
                            f"skill://{name}/{p}": (digest(d), len(d)) for p, d in files.items()
                        }
                    else:
                        skill = await client.get_skill(listed[name].uri)
                        assert skill == listed[name]
                        uris = {r.uri: (r.digest, r.size) for r in skill.resources}
                        assert len(uris) == len(files)
                    for uri, (want_digest, size) in uris.items():
                        data = content_bytes(await client.read_resource(uri))
                        assert (digest(data), len(data)) == (want_digest, size), uri
                        assert data == files[uri.split("/", 3)[3]]
                        checked += 1
                assert checked == sum(len(f) for f in corpus.values())

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_publish_during_a_session_is_notified_and_listed(store: skillfs.Store, mode: str) -> None:
    alice = skillfs.Scope.user(AGENT, "alice")
    store.publish(alice, "first", {"SKILL.md": md("first")})

    async def main() -> None:
        got = anyio.Event()

        async def on_message(message: Any) -> None:
            if "ResourceListChanged" in type(getattr(message, "root", message)).__name__:
                got.set()

        async with (
            http_endpoint(store, tokens_text()) as base,
            sdk_client(f"{base}/mcp", ALICE, mode, message_handler=on_message) as c,
        ):
            assert c.server_capabilities.extensions == {
                "io.modelcontextprotocol/skills": {"directoryRead": True}
            }
            first = await sdk_list_skills(c.session)
            assert [s["frontmatter"]["name"] for s in first["skills"]] == ["first"]
            assert first["ttlMs"] == 0 and first["cacheScope"] == "private"
            if mode == "legacy":
                await anyio.to_thread.run_sync(
                    lambda: store.publish(alice, "second", {"SKILL.md": md("second")})
                )
                with anyio.fail_after(10):
                    await got.wait()
            else:
                async with c.listen(resources_list_changed=True) as events:
                    await anyio.to_thread.run_sync(
                        lambda: store.publish(alice, "second", {"SKILL.md": md("second")})
                    )
                    with anyio.fail_after(10):
                        async for event in events:
                            assert type(event).__name__ == "ResourcesListChanged"
                            break
            later = await sdk_list_skills(c.session)
            assert [s["frontmatter"]["name"] for s in later["skills"]] == ["first", "second"]

    anyio.run(main)


def test_a_revoked_tokens_open_session_hears_nothing_more(
    store: skillfs.Store, tmp_path: Path
) -> None:
    """Outside (authorization) testing: a session's open stream kept getting change notices
    for its view after its token was revoked. Each notice now asks the tokens first."""
    from skillfs.auth import tokens_document
    from support.grpc_servers import TOKENS

    alice = skillfs.Scope.user(AGENT, "alice")
    store.publish(alice, "first", {"SKILL.md": md("first")})
    path = tmp_path / "tokens.json"
    path.write_text(tokens_text())

    async def main() -> None:
        heard: list[str] = []

        async def on_message(message: Any) -> None:
            if "ResourceListChanged" in type(getattr(message, "root", message)).__name__:
                heard.append("changed")

        async def publish(name: str) -> None:
            await anyio.to_thread.run_sync(
                lambda: store.publish(alice, name, {"SKILL.md": md(name)})
            )

        async with (
            http_endpoint(store, path) as base,
            sdk_client(f"{base}/mcp", ALICE, "legacy", message_handler=on_message) as c,
        ):
            await sdk_list_skills(c.session)
            await publish("second")
            with anyio.fail_after(10):
                while not heard:
                    await anyio.sleep(0.05)
            rest = [t for t in TOKENS if t[1] != ALICE]
            path.write_text(tokens_document(rest, receipt_key="test-receipt-key"))
            async with httpx2.AsyncClient() as http:
                with anyio.fail_after(10):  # the server re-reads the tokens file
                    while (await http.post(
                        f"{base}/mcp/", json={}, headers={"authorization": f"Bearer {ALICE}"}
                    )).status_code != 401:  # fmt: skip
                        await anyio.sleep(0.2)
            before = len(heard)
            await publish("third")
            await anyio.sleep(3)  # a notice takes well under a second (above)
            assert len(heard) == before

    anyio.run(main)


def test_a_revoked_tokens_listen_stream_ends_and_hears_nothing(
    store: skillfs.Store, tmp_path: Path
) -> None:
    """Outside review: a 2026-07-28 `subscriptions/listen` stream kept hearing its view's
    changes after its token was revoked. It now ends, with an error saying why, at the
    first change after the revocation, and hears nothing of it."""
    from mcp.client.subscriptions import SubscriptionLost

    from skillfs.auth import tokens_document
    from support.grpc_servers import TOKENS

    alice = skillfs.Scope.user(AGENT, "alice")
    store.publish(alice, "first", {"SKILL.md": md("first")})
    path = tmp_path / "tokens.json"
    path.write_text(tokens_text())

    async def publish(name: str) -> None:
        await anyio.to_thread.run_sync(lambda: store.publish(alice, name, {"SKILL.md": md(name)}))

    async def main() -> None:
        heard: list[str] = []
        async with (
            http_endpoint(store, path) as base,
            sdk_client(f"{base}/mcp", ALICE) as c,
        ):
            with pytest.raises(SubscriptionLost) as info:  # the stream ends with our error
                async with c.listen(resources_list_changed=True) as events:
                    await publish("second")
                    async for event in events:
                        heard.append(type(event).__name__)
                        if len(heard) == 1:  # heard while allowed; now revoke and change
                            rest = [t for t in TOKENS if t[1] != ALICE]
                            path.write_text(tokens_document(rest, receipt_key="test-receipt-key"))
                            async with httpx2.AsyncClient() as http:
                                with anyio.fail_after(10):  # the server re-reads the file
                                    while (await http.post(
                                        f"{base}/mcp/", json={},
                                        headers={"authorization": f"Bearer {ALICE}"},
                                    )).status_code != 401:  # fmt: skip
                                        await anyio.sleep(0.2)
                            with anyio.fail_after(10):
                                await publish("third")
            assert heard == ["ResourcesListChanged"]
            cause = info.value.__cause__
            assert isinstance(cause, MCPError), info.value
            assert "may no longer read this view" in cause.error.message

    anyio.run(main)


def test_alice_cannot_read_bobs_files(store: skillfs.Store) -> None:
    store.publish(skillfs.Scope.user(AGENT, "alice"), "mine", {"SKILL.md": md("mine")})
    store.publish(skillfs.Scope.user(AGENT, "bob"), "secret", {"SKILL.md": md("secret")})

    async def main() -> None:
        async with http_endpoint(store, tokens_text()) as base:
            async with sdk_client(f"{base}/mcp", ALICE) as c:
                with pytest.raises(MCPError) as info:
                    await c.read_resource("skill://secret/SKILL.md")
                assert "no skill 'secret'" in info.value.error.message
                assert "mine" in info.value.error.message
            async with sdk_client(f"{base}/mcp", BOB) as c:
                text = (await c.read_resource("skill://secret/SKILL.md")).contents[0]
                assert "secret" in text.text  # type: ignore[union-attr]
            async with httpx2.AsyncClient() as http:
                asks = [
                    (ALICE, "?agent=support-bot&user=bob", 403, "user:bob"),
                    (READER, "", 400, "?agent=AGENT&user=USER"),
                    (None, "", 401, "no token"),
                    ("wrong", "", 401, "unknown or revoked token"),
                ]
                for token, query, status, words in asks:
                    headers = {"authorization": f"Bearer {token}"} if token else {}
                    r = await http.post(
                        f"{base}/mcp/{query}", headers=headers, json={"jsonrpc": "2.0"}
                    )
                    assert r.status_code == status and words in r.json()["error"], (token, r.text)
                r = await http.post(  # outside testing: the URL won silently over the header
                    f"{base}/mcp/?agent={AGENT}&user=alice",
                    headers={"authorization": f"Bearer {READER}", "x-skillfs-user": "bob"},
                    json={"jsonrpc": "2.0"},
                )
                assert r.status_code == 400 and "give the user one way" in r.json()["error"]
            async with sdk_client(f"{base}/mcp/?agent={AGENT}&user=bob", READER) as c:
                names = [
                    s["frontmatter"]["name"] for s in (await sdk_list_skills(c.session))["skills"]
                ]
                assert names == ["secret"]  # a reader of every scope picks the user

    anyio.run(main)


def test_skillfs_serve_answers_mcp_at_slash_mcp(tmp_path: Path) -> None:
    """The endpoint on a real server's HTTP port, with the same tokens as its gRPC port:
    alice lists her skills and reads one, a publish shows at her next list."""
    url = f"sqlite:///{tmp_path}/skills.db"
    alice = skillfs.Scope.user(AGENT, "alice")
    with skillfs.open_store(url) as store:
        store.publish(alice, "first", {"SKILL.md": md("first")})
        with running(url, tmp_path) as server:

            async def main() -> None:
                async with sdk_client(f"http://127.0.0.1:{server.http_port}/mcp", ALICE) as c:
                    listed = await sdk_list_skills(c.session)
                    assert [s["frontmatter"]["name"] for s in listed["skills"]] == ["first"]
                    read = await c.read_resource("skill://first/SKILL.md")
                    assert content_bytes(read.contents) == md("first")
                    store.publish(alice, "second", {"SKILL.md": md("second")})
                    listed = await sdk_list_skills(c.session)
                    names = sorted(s["frontmatter"]["name"] for s in listed["skills"])
                    assert names == ["first", "second"]

            anyio.run(main)


def test_a_session_is_bound_to_the_token_that_opened_it(store: skillfs.Store) -> None:
    """Another token can neither use nor end it: 404, as for a session that does not exist
    (outside testing: bob's token listed and deleted alice's session)."""
    store.publish(skillfs.Scope.user(AGENT, "alice"), "mine", {"SKILL.md": md("mine")})
    store.publish(skillfs.Scope.user(AGENT, "bob"), "his", {"SKILL.md": md("his")})
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    accept = {"accept": "application/json, text/event-stream"}

    def auth(token: str, session: str = "") -> dict[str, str]:
        return {**accept, "authorization": f"Bearer {token}",
                **({"mcp-session-id": session} if session else {})}  # fmt: skip

    async def main() -> None:
        async with http_endpoint(store, tokens_text()) as base, httpx2.AsyncClient() as http:
            opened = await http.post(f"{base}/mcp/", headers=auth(ALICE), json=initialize)
            session = opened.headers["mcp-session-id"]
            listing = {"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}}
            stranger = await http.post(f"{base}/mcp/", headers=auth(BOB, session), json=listing)
            assert stranger.status_code == 404
            ended = await http.delete(f"{base}/mcp/", headers=auth(BOB, session))
            assert ended.status_code == 404
            own = await http.post(f"{base}/mcp/", headers=auth(ALICE, session), json=listing)
            assert own.status_code == 200 and "skill://mine/SKILL.md" in own.text

    anyio.run(main)


def test_a_skill_disabled_in_one_mcp_session_stays_readable_in_another(
    store: skillfs.Store,
) -> None:
    """`?tools=saa` serves Spring AI Alibaba's tools. `disable_skill` holds in the MCP session
    that called it (its conversation) alone: there the skill leaves the tools' enum and reads
    of it are refused; another session of the same user reads it. A request without a
    session (protocol 2026-07-28) belongs to no conversation, so it is not offered
    `disable_skill`, and a call of it changes nothing."""
    alice = skillfs.Scope.user(AGENT, "alice")
    for name in ("first", "second"):
        store.publish(alice, name, {"SKILL.md": md(name)})

    def text(result: Any) -> str:
        return "".join(c.text for c in result.content)

    async def main() -> None:
        async with http_endpoint(store, tokens_text()) as base:
            url = f"{base}/mcp?tools=saa"
            async with sdk_client(url, ALICE, "legacy") as a, sdk_client(url, ALICE, "legacy") as b:
                listed = await a.list_tools()
                assert {t.name for t in listed.tools} == {
                    "read_skill", "disable_skill", "load_skill_through_path"
                }  # fmt: skip
                done = await a.call_tool("disable_skill", {"skill_name": "first"})
                assert not done.is_error, text(done)
                refused = await a.call_tool("read_skill", {"skill_name": "first"})
                assert refused.is_error and "disabled for the rest of this session" in text(refused)
                again = await a.call_tool(
                    "load_skill_through_path", {"skill_id": "first", "path": "SKILL.md"}
                )
                assert again.is_error
                read = await b.call_tool("read_skill", {"skill_name": "first"})
                assert not read.is_error and "first" in text(read)
            async with sdk_client(url, ALICE, "auto") as modern:
                listed = await modern.list_tools()
                assert "disable_skill" not in {t.name for t in listed.tools}
                refused = await modern.call_tool("disable_skill", {"skill_name": "second"})
                assert refused.is_error and "belongs to none" in text(refused)
                read = await modern.call_tool("read_skill", {"skill_name": "second"})
                assert not read.is_error and "second" in text(read)

    anyio.run(main)


def test_an_unknown_tool_set_is_refused_with_the_sets_named(store: skillfs.Store) -> None:
    async def main() -> None:
        async with http_endpoint(store, tokens_text()) as base, httpx2.AsyncClient() as http:
            answer = await http.post(
                f"{base}/mcp/?tools=claude",
                headers={"authorization": f"Bearer {ALICE}",
                         "accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            )  # fmt: skip
            assert answer.status_code == 400
            assert "choose a tool set from default, harness9, saa" in answer.text

    anyio.run(main)
