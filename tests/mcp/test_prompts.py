"""Skills as MCP prompts (docs/integrations.md, "Skills as prompts"), with the official `mcp`
SDK's client: `prompts/list` paged, `prompts/get` with the one `arguments` argument and with
named ones, over stdio and HTTP, `prompts/list_changed` after a publish in both protocol
eras; a `disable-model-invocation` skill is in `prompts/list` and `skills/list` (its
frontmatter as written) and nowhere the model looks."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

import skillfs
from skillfs.mcp import ViewKey, Views, build_server
from support.grpc_servers import ALICE as ALICE_TOKEN
from tests.mcp_helpers import (
    AGENT,
    http_endpoint,
    sdk_client,
    sdk_list_skills,
    stdio_params,
    tokens_text,
)
from tests.runtime_helpers import md

ALICE = skillfs.Scope.user(AGENT, "alice")


def skill_md(name: str, extra: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: Does {name}.\n{extra}---\n\n{body}\n".encode()


def publish_skills(store: skillfs.Store) -> None:
    store.publish(ALICE, "open", {"SKILL.md": md("open", "An ordinary skill.", "Plain.")})
    deploy = skill_md(
        "deploy",
        "disable-model-invocation: true\nargument-hint: '[environment] [--now]'\n",
        "Deploy to $0 ($1). All: $ARGUMENTS",
    )
    store.publish(ALICE, "deploy", {"SKILL.md": deploy})
    store.publish(
        ALICE,
        "migrate",
        {
            "SKILL.md": skill_md(
                "migrate",
                "arguments: [component, source, target]\n",
                "$component: $source -> $target",
            )
        },
    )
    store.publish(
        ALICE,
        "background",
        {"SKILL.md": skill_md("background", "user-invocable: false\n", "Know.")},
    )


def in_process(store: skillfs.Store, **kw: Any) -> Client:
    return Client(build_server(Views(store, lambda ctx: ViewKey(AGENT, "alice")), **kw))


def text_of(result: Any) -> str:
    [message] = result.messages
    assert message.role == "user"
    return str(message.content.text)


def test_prompts_list_get_and_what_the_model_sees() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    publish_skills(store)

    async def main() -> None:
        async with in_process(store, page_size=2) as c:
            assert c.server_capabilities.prompts is not None
            listed: list[Any] = []
            cursor = None
            while True:
                page = await c.list_prompts(cursor=cursor)
                listed += page.prompts
                cursor = page.next_cursor
                if not cursor:
                    break
            by_name = {p.name: p for p in listed}
            assert list(by_name) == ["deploy", "migrate", "open"]  # not background
            [hint] = by_name["deploy"].arguments or []
            assert (hint.name, hint.description, hint.required) == (
                "arguments",
                "[environment] [--now]",
                False,
            )
            assert [a.name for a in by_name["migrate"].arguments or []] == [
                "component",
                "source",
                "target",
            ]
            assert by_name["open"].description == "An ordinary skill."

            got = await c.get_prompt("deploy", {"arguments": '"eu west" --now'})
            assert text_of(got) == 'Deploy to eu west (--now). All: "eu west" --now\n'
            got = await c.get_prompt("migrate", {"component": "Search Bar", "target": "Vue"})
            assert text_of(got) == "Search Bar:  -> Vue\n"  # source left out: empty
            assert text_of(await c.get_prompt("open", {"arguments": "x"})).endswith(
                "\n\nARGUMENTS: x\n"
            )
            assert "ARGUMENTS" not in text_of(await c.get_prompt("open"))
            for name, args, words in [
                ("background", {}, "no prompt 'background'"),
                ("nope", {}, "prompts: deploy, migrate, open"),
                ("migrate", {"arguments": "x"}, "takes component, source, target"),
            ]:
                with pytest.raises(MCPError) as info:
                    await c.get_prompt(name, args)
                assert info.value.error.code == -32602
                assert words in info.value.error.message, info.value.error.message

            # skills/list keeps it, its frontmatter as the host's YAML reads it
            skills = {
                s["frontmatter"]["name"]: s["frontmatter"]
                for s in (await sdk_list_skills(c.session))["skills"]
            }
            assert skills["deploy"]["disable-model-invocation"] is True
            # the model's tools refuse it
            read = await c.call_tool("read_skill", {"skill_id": "deploy"})
            assert read.is_error and "disable-model-invocation" in read.content[0].text  # type: ignore[union-attr]
            found = await c.call_tool("search_skills", {"query": "deploy"})
            assert found.content[0].text.startswith("No skill matches")  # type: ignore[union-attr]

        with skillfs.Skills(store, AGENT, "alice") as worker:
            assert "deploy" not in worker.snapshot().prompt()

    anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_publish_tells_prompts_list_changed_over_stdio(tmp_path: Path, mode: str) -> None:
    url = f"sqlite:///{tmp_path}/skills.db"
    store = skillfs.open_store(url)
    publish_skills(store)

    async def main() -> None:
        got = anyio.Event()

        async def on_message(message: Any) -> None:
            if "PromptListChanged" in type(getattr(message, "root", message)).__name__:
                got.set()

        async with Client(stdio_params(url), mode=mode, message_handler=on_message) as c:
            assert c.server_capabilities.prompts is not None
            assert c.server_capabilities.prompts.list_changed
            before = [p.name for p in (await c.list_prompts()).prompts]
            assert before == ["deploy", "migrate", "open"]
            got_text = text_of(await c.get_prompt("deploy", {"arguments": "prod"}))
            assert got_text == "Deploy to prod ($1). All: prod\n"  # $1 missing: as written
            added = skill_md("added", "argument-hint: '[file]'\n", "Add $ARGUMENTS.")
            if mode == "legacy":
                await anyio.to_thread.run_sync(
                    lambda: store.publish(ALICE, "added", {"SKILL.md": added})
                )
                with anyio.fail_after(10):
                    await got.wait()
            else:
                async with c.listen(prompts_list_changed=True) as events:
                    await anyio.to_thread.run_sync(
                        lambda: store.publish(ALICE, "added", {"SKILL.md": added})
                    )
                    with anyio.fail_after(10):
                        async for event in events:
                            assert type(event).__name__ == "PromptsListChanged"
                            break
            after = await c.list_prompts(cache_mode="refresh")
            assert [p.name for p in after.prompts] == ["added", *before]
            assert text_of(await c.get_prompt("added", {"arguments": "a.txt"})) == "Add a.txt.\n"

    anyio.run(main)


def test_prompts_over_http_are_the_tokens_users() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    publish_skills(store)
    bob = skillfs.Scope.user(AGENT, "bob")
    store.publish(bob, "bobs", {"SKILL.md": md("bobs")})

    async def main() -> None:
        async with (
            http_endpoint(store, tokens_text()) as base,
            sdk_client(f"{base}/mcp", ALICE_TOKEN, "legacy") as c,
        ):
            names = [p.name for p in (await c.list_prompts()).prompts]
            assert names == ["deploy", "migrate", "open"]  # alice's view: no bobs
            got = await c.get_prompt("migrate", {"component": "a", "source": "b", "target": "c"})
            assert text_of(got) == "a: b -> c\n"

    anyio.run(main)


def test_the_prompt_listing_moves_exactly_when_a_prompt_does() -> None:
    """`prompts.listed`, what a view compares to tell `prompts/list_changed`: equal for an
    edit no prompt shows (a body, a file), different when a prompt's arguments, hint or
    description change, or a prompt comes or goes; equal listings, equal prompts."""
    from skillfs.mcp import prompts

    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    publish_skills(store)
    skills = skillfs.Skills(store, AGENT, "alice")

    def step(skill: str, extra: str, body: str = "Body.", **files: bytes) -> tuple[bool, bool]:
        before = skills.snapshot()
        store.publish(ALICE, skill, {"SKILL.md": skill_md(skill, extra, body), **files})
        now = skills.snapshot()
        assert now.token != before.token
        made = [prompts.prompt(s) for s in prompts.invocable(now)]
        made_before = [prompts.prompt(s) for s in prompts.invocable(before)]
        return prompts.listed(now) != prompts.listed(before), made != made_before

    assert step("migrate", "arguments: [component, source, target]\n", "Other.") == (False, False)
    assert step("migrate", "arguments: [component, source, target]\n", **{"a.md": b"a"}) == (
        False,
        False,
    )
    assert step("migrate", "arguments: [component, target]\n") == (True, True)
    assert step("deploy", "disable-model-invocation: true\nargument-hint: '[env]'\n") == (
        True,
        True,
    )
    assert step("background", "") == (True, True)  # now users invoke it
    assert step("fresh", "") == (True, True)
