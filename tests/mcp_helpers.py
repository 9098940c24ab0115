"""Helpers for the MCP tests: the shared corpus in a store, the MCP endpoint served by uvicorn
on 127.0.0.1, `skillfs mcp` as a subprocess, and the request types of the Skills extension
for the official SDK's client (it has none of its own)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.routing import Mount

import skillfs
from skillfs.auth import Tokens
from skillfs.mcp import McpHttp
from skillfs.mcp.server import DirectoryReadParams, GetSkillParams, ListSkillsParams
from support.grpc_servers import REPO, TOKENS
from support.servers import free_port

CORPUS = REPO.parent / "shared" / "corpus"
AGENT = "support-bot"


def corpus_skills() -> dict[str, Path]:
    """Every skill directory of the corpus by name."""
    assert CORPUS.is_dir(), f"the skill corpus is missing: expected it at {CORPUS}"
    return {
        d.name: d
        for c in sorted(CORPUS.iterdir())
        if c.is_dir()
        for d in sorted(c.iterdir())
        if (d / "SKILL.md").is_file()
    }


def files_of(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def publish_corpus(store: skillfs.Store) -> dict[str, dict[str, bytes]]:
    """The corpus into alice's view: the first collection shared, the others in her scope.
    Returns every skill's files, as on disk."""
    out: dict[str, dict[str, bytes]] = {}
    for i, (name, directory) in enumerate(corpus_skills().items()):
        files = files_of(directory)
        scope = skillfs.Scope.shared(AGENT) if i % 2 else skillfs.Scope.user(AGENT, "alice")
        modes = {
            rel: stat.S_IMODE((directory / rel).stat().st_mode) & 0o755 or 0o644 for rel in files
        }
        store.publish(scope, name, {r: skillfs.File(d, mode=modes[r]) for r, d in files.items()})
        out[name] = files
    return out


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@contextlib.asynccontextmanager
async def http_endpoint(store: skillfs.Store, tokens_text: str | Path) -> AsyncIterator[str]:
    """McpHttp mounted at /mcp as a server would, served by uvicorn; yields the base URL.
    Tokens from a text, or from a file (re-read when it changes, as a server's are)."""
    tokens = Tokens(path=tokens_text) if isinstance(tokens_text, Path) else Tokens(text=tokens_text)
    mcp = McpHttp(store, tokens)
    app = Starlette(routes=[Mount("/mcp", app=mcp)], lifespan=lambda app: mcp.lifespan())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve)
        with anyio.fail_after(20):
            while not server.started:
                await anyio.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


def sdk_client(url: str, token: str, mode: str = "auto", **kw: Any) -> Client:
    """The official SDK's client over streamable HTTP with a bearer token."""
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode, **kw)  # type: ignore[arg-type]


def tokens_text() -> str:
    from skillfs.auth import tokens_document

    return tokens_document(TOKENS, receipt_key="test-receipt-key")


def stdio_command(store_url: str, user: str = "alice") -> tuple[str, list[str], dict[str, str]]:
    """`skillfs mcp` as a host would start it, with this checkout on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["-c", "from skillfs.cli.app import main; main()", "mcp", "--store", store_url]
    return sys.executable, [*args, "--agent", AGENT, "--user", user], env


def stdio_params(store_url: str, user: str = "alice") -> StdioServerParameters:
    command, args, env = stdio_command(store_url, user)
    return StdioServerParameters(command=command, args=args, env=env)


class AnyResult(types.Result):
    model_config = {"extra": "allow"}


class ListSkills(types.Request[ListSkillsParams, Literal["skills/list"]]):
    method: Literal["skills/list"] = "skills/list"
    params: ListSkillsParams


class GetSkill(types.Request[GetSkillParams, Literal["skills/get"]]):
    method: Literal["skills/get"] = "skills/get"
    params: GetSkillParams


class ReadDirectory(types.Request[DirectoryReadParams, Literal["resources/directory/read"]]):
    method: Literal["resources/directory/read"] = "resources/directory/read"
    params: DirectoryReadParams


async def sdk_list_skills(session: Any, cursor: str | None = None) -> dict[str, Any]:
    result = await session.send_request(
        ListSkills(params=ListSkillsParams(cursor=cursor)), AnyResult
    )
    data: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True)
    return data
