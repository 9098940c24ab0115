"""`skillfs mcp` (stdio) and the MCP server's answers: FastMCP's skills client reads every file
of every corpus skill byte for byte over stdio; the official SDK's client in both protocol eras
(over stdio, and in process for the error cases); bad URIs get -32602 errors naming what
exists; nested paths need no %2F; pagination, directory reads and the skill tools."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client as FastClient
from fastmcp.client.transports import StdioTransport
from fastmcp.skills import SkillsClientExtension
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

import skillfs
from skillfs.mcp import ViewKey, Views, build_server
from skillfs.mcp.server import DirectoryReadParams, GetSkillParams
from tests.cli_helpers import error_line, run
from tests.mcp_helpers import (
    AGENT,
    AnyResult,
    GetSkill,
    ReadDirectory,
    digest,
    publish_corpus,
    sdk_list_skills,
    stdio_command,
    stdio_params,
)
from tests.runtime_helpers import md

ALICE = skillfs.Scope.user(AGENT, "alice")


def content_bytes(contents: list[Any]) -> bytes:
    [c] = contents
    return c.text.encode() if hasattr(c, "text") else base64.b64decode(c.blob)


def test_fastmcp_reads_the_whole_corpus_over_stdio(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/skills.db"
    corpus = publish_corpus(skillfs.open_store(url))
    command, args, env = stdio_command(url)

    async def main() -> None:
        transport = StdioTransport(command, args, env=env)
        async with FastClient(transport, extensions=[SkillsClientExtension()]) as client:
            listed = await client.list_skills()
            assert len(listed) == len(corpus) - 1  # claude-api: description over 1,024 chars
            for skill in listed:
                files = corpus[skill.frontmatter.name]
                assert {r.uri.split("/", 3)[3] for r in skill.resources} == set(files)
                for r in skill.resources:
                    data = content_bytes(await client.read_resource(r.uri))
                    assert digest(data) == r.digest and len(data) == r.size
                    assert data == files[r.uri.split("/", 3)[3]], r.uri
            data = content_bytes(await client.read_resource("skill://claude-api/SKILL.md"))
            assert data == corpus["claude-api"]["SKILL.md"]  # left out of the list, still readable

    anyio.run(main)


def test_a_frontmatter_a_client_would_refuse_is_left_out_not_the_whole_listing(
    tmp_path: Path,
) -> None:
    """skills/list leaves out what FastMCP's own model refuses (outside testing: an empty
    `compatibility` failed FastMCP's whole listing)."""
    url = f"sqlite:///{tmp_path}/skills.db"
    store = skillfs.open_store(url)
    bad = {
        "empty-compat": "compatibility: ''",
        "long-compat": f"compatibility: {'x' * 501}",
        "null-metadata": "metadata:",
    }
    for name, extra in {**bad, "fine": "compatibility: linux"}.items():
        text = f"---\nname: {name}\ndescription: Does {name}.\n{extra}\n---\nbody\n"
        store.publish(ALICE, name, {"SKILL.md": text.encode()})
    command, args, env = stdio_command(url)

    async def main() -> None:
        transport = StdioTransport(command, args, env=env)
        async with FastClient(transport, extensions=[SkillsClientExtension()]) as client:
            assert [s.frontmatter.name for s in await client.list_skills()] == ["fine"]

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_official_client_over_stdio_sees_a_publish(tmp_path: Path, mode: str) -> None:
    url = f"sqlite:///{tmp_path}/skills.db"
    store = skillfs.open_store(url)
    store.publish(ALICE, "first", {"SKILL.md": md("first"), "references/deep/a.md": b"deep"})

    async def main() -> None:
        got = anyio.Event()
        notices = []

        async def on_message(message: Any) -> None:
            if "ResourceListChanged" in type(getattr(message, "root", message)).__name__:
                notices.append(message)
                got.set()

        async with Client(stdio_params(url), mode=mode, message_handler=on_message) as c:
            assert "io.modelcontextprotocol/skills" in (c.server_capabilities.extensions or {})
            for _ in range(5):  # one notice per change per connection, however many requests
                assert (await c.read_resource("skill://first/references/deep/a.md")).contents
            listen = c.listen(resources_list_changed=True) if mode == "auto" else None
            async with listen or _nothing() as events:
                store.publish(ALICE, "second", {"SKILL.md": md("second")})
                with anyio.fail_after(10):
                    if events is None:
                        await got.wait()
                        await anyio.sleep(0.5)  # (outside testing: 5 copies came here)
                        assert len(notices) == 1
                    else:
                        async for _ in events:
                            break
            names = [s["frontmatter"]["name"] for s in (await sdk_list_skills(c.session))["skills"]]
            assert names == ["first", "second"]

    anyio.run(main)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:ping is removed")  # a handshake-era session pings
def test_a_view_made_while_the_store_is_down_does_not_end_the_server() -> None:
    """Its request gets the store's error and the server goes on (outside testing: the
    view's watch failed its first snapshot, and that ended the whole stdio server)."""

    async def main() -> None:
        async with Client(stdio_params("redis://127.0.0.1:1/0"), mode="legacy") as c:
            with anyio.fail_after(60):
                with pytest.raises(MCPError, match="unavailable"):
                    await c.list_tools()
                called = await c.call_tool("read_skill", {"skill_id": "a"})  # the model reads it
                assert called.is_error and "unavailable" in called.content[0].text  # type: ignore[union-attr]
                await anyio.sleep(8)  # the watch's own first snapshot has failed by now
                await c.send_ping()

    anyio.run(main)


@pytest.mark.serial
def test_the_stdio_server_exits_as_soon_as_its_input_ends(tmp_path: Path) -> None:
    """A host stops `skillfs mcp` by closing its stdin: the process is gone within a second
    or so, not after the view's watch has waited out its 5 s (as it was)."""
    url = f"sqlite:///{tmp_path}/skills.db"
    skillfs.open_store(url).publish(ALICE, "first", {"SKILL.md": md("first")})
    command, args, env = stdio_command(url)
    proc = subprocess.Popen(
        [command, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/list"},
    ):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        if "id" in message:
            assert json.loads(proc.stdout.readline())["id"] == message["id"]
    time.sleep(0.5)  # the view's watch is waiting by now
    ended = time.monotonic()
    proc.stdin.close()
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    assert time.monotonic() - ended < 2.5


class _nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def in_process(store: skillfs.Store, **kw: Any) -> Client:
    return Client(build_server(Views(store, lambda ctx: ViewKey(AGENT, "alice")), **kw))


def test_bad_uris_get_errors_naming_what_exists() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(
        ALICE, "code-reviewer", {"SKILL.md": md("code-reviewer"), "references/style.md": b"s"}
    )

    async def main() -> None:
        async with in_process(store) as c:
            read = await c.read_resource("skill://code-reviewer/references/style.md")
            assert read.contents[0].text == "s"  # type: ignore[union-attr]
            escaped = await c.read_resource("skill://code-reviewer/references%2Fstyle.md")
            assert escaped.contents[0].text == "s"  # type: ignore[union-attr]
            cases = {
                "skill://code-reviewer/../other/SKILL.md": "'.', '..'",
                "skill://nope/SKILL.md": "no skill 'nope'",
                "skill://code-reviewer/missing.md": "no file of skill 'code-reviewer'",
                "skill://code-reviewer/references": "is a directory",
                "https://example.com/x": "not a skill:// URI",
                "skill://code-reviewer//SKILL.md": "empty segments",  # (was served)
            }
            for uri, words in cases.items():
                with pytest.raises(MCPError) as info:
                    await c.read_resource(uri)
                assert info.value.error.code == -32602
                assert words in info.value.error.message, info.value.error.message
                assert "code-reviewer" in info.value.error.message  # what exists
            with pytest.raises(MCPError, match=r"no skill 'nope'.*code-reviewer"):
                await c.session.send_request(
                    GetSkill(params=GetSkillParams(uri="skill://nope/SKILL.md")), AnyResult
                )
            root = await c.session.send_request(
                ReadDirectory(params=DirectoryReadParams(uri="skill://code-reviewer")), AnyResult
            )
            children = root.model_dump(by_alias=True)["resources"]
            assert [(x["name"], x["mimeType"]) for x in children] == [
                ("SKILL.md", "text/markdown"),
                ("references", "inode/directory"),
            ]
            with pytest.raises(
                MCPError, match=r"not a directory.*skill://code-reviewer/references"
            ):
                await c.session.send_request(
                    ReadDirectory(params=DirectoryReadParams(uri="skill://code-reviewer/x")),
                    AnyResult,
                )

    anyio.run(main)


def test_pagination_and_tools() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    for i in range(5):
        store.publish(ALICE, f"s{i}", {"SKILL.md": md(f"s{i}", f"Skill number {i}.")})
    store.publish(
        ALICE,
        "s1",
        {"SKILL.md": md("s1", "Skill number 1."), "e.md": b"Error: E001 means a full disk."},
    )

    async def main() -> None:
        async with in_process(store, page_size=2) as c:
            names: list[str] = []
            cursor = None
            while True:
                page = await sdk_list_skills(c.session, cursor)
                names += [s["frontmatter"]["name"] for s in page["skills"]]
                cursor = page.get("nextCursor")
                if not cursor:
                    break
            with pytest.raises(MCPError, match="invalid cursor"):  # -1 (outside testing: a page)
                await sdk_list_skills(c.session, "LTE=")
            assert names == [f"s{i}" for i in range(5)]
            tools = {t.name for t in (await c.list_tools()).tools}
            assert tools == {"load_skill_through_path", "read_skill", "search_skills"}
            found = await c.call_tool("search_skills", {"query": "number 3"})
            assert found.content[0].text.startswith("s3:")  # type: ignore[union-attr]
            wrong = await c.call_tool("load_skill_through_path", {"skill_id": "s9", "path": "x"})
            assert wrong.is_error and "s1, s2" in wrong.content[0].text  # type: ignore[union-attr]
            # a file that begins "Error:" is read, not an error (outside testing: isError)
            read = await c.call_tool("load_skill_through_path", {"skill_id": "s1", "path": "e.md"})
            assert not read.is_error and read.content[0].text == "Error: E001 means a full disk."  # type: ignore[union-attr]

    anyio.run(main)


def test_a_resource_subscription_hears_when_its_file_changes() -> None:
    """The 2026-07-28 era advertises `resources.subscribe`: a listen stream's
    `resourceSubscriptions` get `notifications/resources/updated` for their URIs only
    (outside testing: they were acknowledged, and never told anything)."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(ALICE, "first", {"SKILL.md": md("first"), "ref.md": b"one"})
    store.publish(ALICE, "other", {"SKILL.md": md("other")})

    async def main() -> None:
        async with in_process(store) as c:
            await c.list_tools()  # the view exists, and its watch
            async with c.listen(resource_subscriptions=["skill://first/ref.md"]) as events:
                store.publish(ALICE, "other", {"SKILL.md": md("other", "Changed.")})
                store.publish(ALICE, "first", {"SKILL.md": md("first"), "ref.md": b"two"})
                with anyio.fail_after(10):
                    async for event in events:
                        assert event.uri == "skill://first/ref.md"  # type: ignore[union-attr]
                        break

    anyio.run(main)


@pytest.mark.parametrize("first", ["list_tools", "listen"])
def test_a_change_after_a_listen_is_told_however_late_the_watch_starts(
    monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """CI under load: a change made right after a request was answered was sometimes never
    told, because the view's watch took its starting snapshot later, in its own thread, and
    the change was already in it. The watch now starts from the first request's snapshot
    (a listen takes one before its acknowledgement); here its start is held back 0.5 s."""
    from skillfs.mcp.views import View

    started = View.watch

    async def late(self: View, limiter: anyio.CapacityLimiter) -> None:
        await anyio.sleep(0.5)
        await started(self, limiter)

    monkeypatch.setattr(View, "watch", late)
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(ALICE, "first", {"SKILL.md": md("first")})

    async def main() -> None:
        async with in_process(store) as c:
            if first == "list_tools":
                await c.list_tools()
            async with c.listen(resources_list_changed=True) as events:
                store.publish(ALICE, "second", {"SKILL.md": md("second")})
                with anyio.fail_after(5):
                    async for event in events:
                        assert type(event).__name__ == "ResourcesListChanged"
                        break

    anyio.run(main)


def test_an_error_repeats_at_most_200_characters_of_what_was_sent() -> None:
    """Outside testing: a 2 MB URI came back as a 2 MB error message."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(ALICE, "first", {"SKILL.md": md("first")})

    async def main() -> None:
        async with in_process(store) as c:
            for sent in ("skill://first/" + "x" * 2_000_000, "skill://" + "y" * 100_000):
                with pytest.raises(MCPError) as info:
                    await c.read_resource(sent)
                said = info.value.error.message
                assert len(said) < 1000 and f"({len(sent)} characters)" in said, said[:300]
                assert "first" in said  # still names what exists

    anyio.run(main)


def test_empty_view_has_no_tools() -> None:
    async def main() -> None:
        async with in_process(skillfs.open_store(f"memory://{uuid.uuid4().hex}")) as c:
            assert (await c.list_tools()).tools == []
            assert (await sdk_list_skills(c.session))["skills"] == []

    anyio.run(main)


def test_a_views_tool_set_is_what_the_host_is_offered() -> None:
    """`skillfs mcp --tools harness9|saa`: the view's model tools are the chosen set's. Over
    stdio the process is one conversation, so `disable_skill` is offered and holds there;
    a set nobody makes is refused before the store is opened."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    for name in ("first", "second"):
        store.publish(ALICE, name, {"SKILL.md": md(name)})

    def client(tools: Any) -> Client:
        return Client(build_server(Views(store, lambda ctx: ViewKey(AGENT, "alice", tools=tools))))

    async def main() -> None:
        async with client("harness9") as c:
            assert [t.name for t in (await c.list_tools()).tools] == [
                "use_skill", "load_skill_through_path"
            ]  # fmt: skip
            used = await c.call_tool("use_skill", {"skill_name": "first"})
            assert not used.is_error
        async with client("saa") as c:
            done = await c.call_tool("disable_skill", {"skill_name": "first"})
            assert not done.is_error
            refused = await c.call_tool("read_skill", {"skill_name": "first"})
            assert refused.is_error

    anyio.run(main)
    unreachable = "redis://127.0.0.1:1/0"
    result = run(unreachable, "mcp", "--agent", AGENT, "--user", "alice", "--tools", "claude")
    assert "choose a tool set from default, harness9, saa" in error_line(result)


def test_skillfs_mcp_serves_the_tool_set_it_is_given(tmp_path: Path) -> None:
    """`skillfs mcp --tools saa` as a host starts it: the command hands its set to the view
    (the test above builds the view itself), and `disable_skill` holds in the process's one
    conversation."""
    url = f"sqlite:///{tmp_path}/skills.db"
    with skillfs.open_store(url) as store:
        for name in ("first", "second"):
            store.publish(ALICE, name, {"SKILL.md": md(name)})
    command, args, env = stdio_command(url)
    params = StdioServerParameters(command=command, args=[*args, "--tools", "saa"], env=env)

    async def main() -> None:
        async with Client(params) as c:
            assert [t.name for t in (await c.list_tools()).tools] == [
                "read_skill", "disable_skill", "load_skill_through_path"
            ]  # fmt: skip
            assert not (await c.call_tool("disable_skill", {"skill_name": "first"})).is_error
            assert (await c.call_tool("read_skill", {"skill_name": "first"})).is_error
            assert not (await c.call_tool("read_skill", {"skill_name": "second"})).is_error

    anyio.run(main)
