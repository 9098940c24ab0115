"""Quotas through a skillfs server (docs/security.md, "Quotas"): the server's own limits,
each token's writes charged to it whichever surface makes them (a `grpc://` publish, an
fsspec write, the agent's `skill_manage`, the CLI), the refusal the same error with the same words
everywhere, a global admin held to the scopes' quotas only, and a token's own quota from
the tokens file."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

import skillfs
from skillfs.auth import TokenConfig
from skillfs.errors import InvalidPath, QuotaExceeded
from skillfs.model import Scope
from skillfs.runtime import Skills
from skillfs.server.app import SkillfsServer
from skillfs.store.limits import Limits
from support.grpc_servers import ADMIN, ALICE, running
from tests.cli_helpers import error_line, run
from tests.helpers import skill_md

AGENT = "support-bot"
MINE = Scope.user(AGENT, "alice")
SHARED = Scope.shared(AGENT)


def files(name: str) -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name), "data.bin": name.encode().ljust(10_000, b".")}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    limits = Limits(scope_quota=40_000, token_quota=20_000)
    with running(f"memory://{uuid.uuid4().hex}", tmp_path, http=None, limits=limits) as srv:
        yield srv


def test_a_tokens_writes_are_charged_to_it_on_every_surface(
    server: SkillfsServer, tmp_path: Path
) -> None:
    url = f"grpc://127.0.0.1:{server.grpc_port}"
    alice = skillfs.open_store(url, token=ALICE)
    admin = skillfs.open_store(url, token=ADMIN)
    try:
        alice.publish(MINE, "one", files("one"))
        fs = fsspec.filesystem("skillfs", store=alice, agent_id=AGENT, user_id="alice")
        fs.pipe("skills/two/SKILL.md", skill_md("two"))  # small: it fits
        with pytest.raises(QuotaExceeded) as refused:
            alice.publish(MINE, "three", files("three"))
        said = str(refused.value)
        assert said.startswith(f"quota of token 'alice' in agents/{AGENT} exceeded: it holds ")
        assert "of its 20000" in said and "quota_bytes" in said and "nothing was written" in said
        with pytest.raises(QuotaExceeded, match="quota of token 'alice'"):
            fs.pipe("skills/two/data.bin", b"x" * 20_000)
        with Skills(alice, AGENT, "alice", skill_writes="live") as worker:
            answer = worker.snapshot().call_tool(
                "skill_manage",
                {
                    "action": "write_file",
                    "name": "two",
                    "path": "more.txt",
                    "content": "y" * 20_000,
                },
            )
        assert answer.startswith("Error: skill_manage:") and "quota of token 'alice'" in answer
        # the CLI: one error line with the same words, exit 1, nothing imported
        source = tmp_path / "source" / "three"
        source.mkdir(parents=True)
        for name, data in files("three").items():
            (source / name).write_bytes(data)
        cli = run(url, "import", str(source.parent), "-s", f"user:{AGENT}/alice", "--token", ALICE)
        assert "quota of token 'alice'" in error_line(cli)
        assert alice.skills(MINE) == ["one", "two"]
        # a global admin is held to the scope's quota alone (40,000 bytes)
        admin.publish(MINE, "three", files("three"))
        admin.publish(MINE, "four", files("four"))
        with pytest.raises(QuotaExceeded, match=f"quota of scope {MINE} exceeded"):
            admin.publish(MINE, "five", files("five"))
        admin.publish(SHARED, "five", files("five"))
    finally:
        alice.close()
        admin.close()


def test_a_tokens_own_quota_comes_from_the_tokens_file() -> None:
    doc = (
        '{"tokens": [{"name": "w", "token": "0123456789abcdef0", "grants": ["*:read"],'
        ' "quota_bytes": 1000}]}'
    )
    (principal,) = TokenConfig.parse(doc).principals.values()
    assert principal.quota_bytes == 1000
    assert principal.credential() is not None and principal.credential().quota_bytes == 1000  # type: ignore[union-attr]
    with pytest.raises(InvalidPath, match="quota_bytes of 'w' must be a whole number"):
        TokenConfig.parse(doc.replace("1000", '"lots"'))
