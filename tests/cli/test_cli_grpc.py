"""The CLI against a `grpc://` store: a skillfs server in this process, tokens with grants."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import skillfs
from support import grpc_servers
from tests.cli_helpers import REPO, as_json, error_line, ok, run, skill_md

EXAMPLES = REPO / "examples" / "skills"


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        yield f"grpc://127.0.0.1:{server.grpc_port}"
    finally:
        server.stop(0)


def test_admin_round_trip(url: str, tmp_path: Path) -> None:
    admin = ("--token", grpc_servers.ADMIN)
    report = as_json(url, "import", str(EXAMPLES), "-s", "shared:support-bot", *admin)
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "SKILL.md").is_file())
    assert [r["skill"] for r in report["skills"]] == names
    rows = as_json(url, "ls", "-s", "shared:support-bot", *admin)
    assert [r["skill"] for r in rows] == names
    source = (EXAMPLES / "code-reviewer" / "SKILL.md").read_bytes()
    cat = ok(url, "cat", "code-reviewer/SKILL.md", "-s", "shared:support-bot", *admin)
    assert cat.stdout_bytes == source

    script = tmp_path / "ed.sh"
    script.write_text("#!/bin/sh\nprintf 'Checked over gRPC.\\n' >> \"$1\"\n")
    script.chmod(0o755)
    ok(
        url,
        "edit",
        "code-reviewer/SKILL.md",
        "-s",
        "shared:support-bot",
        *admin,
        EDITOR=str(script),
    )
    diff = as_json(url, "diff", "code-reviewer", "-s", "shared:support-bot", *admin)
    assert "+Checked over gRPC.\n" in diff[0]["diff"]
    ok(url, "rm", "code-reviewer", "-s", "shared:support-bot", "--yes", *admin)
    deleted = as_json(url, "ls", "-s", "shared:support-bot", "--deleted", *admin)
    assert [(d["skill"], d["version"], d["last_version"]) for d in deleted] == [
        ("code-reviewer", 3, 2)
    ]
    ok(url, "rollback", "code-reviewer", "-s", "shared:support-bot", "--to", "1", *admin)
    history = as_json(url, "history", "code-reviewer", "-s", "shared:support-bot", *admin)
    assert [(h["version"], h["deleted"]) for h in history] == [
        (4, False),
        (3, True),
        (2, False),
        (1, False),
    ]
    ok(url, "export", str(tmp_path / "out"), "-s", "shared:support-bot", *admin)
    for name in names:
        for path in (EXAMPLES / name).rglob("*"):
            if path.is_file():
                copy = tmp_path / "out" / name / path.relative_to(EXAMPLES / name)
                assert copy.read_bytes() == path.read_bytes()
                assert copy.stat().st_mode & 0o777 == path.stat().st_mode & 0o777


def test_token_from_environment_and_grants(url: str) -> None:
    publish_admin(url)
    alice = {"SKILLFS_TOKEN": grpc_servers.ALICE}
    rows = as_json_env(url, alice, "ls", "-s", "shared:support-bot")
    assert [r["skill"] for r in rows] == ["demo"]
    data = as_json_env(url, alice, "prompt", "-a", "support-bot", "-u", "alice")
    assert [s["id"] for s in data["skills"]] == ["demo"]
    denied = error_line(run(url, "rm", "demo", "-s", "shared:support-bot", "-y", **alice))
    assert "error: token 'alice' may not write shared:support-bot" in denied
    assert as_json(url, "ls", "-s", "shared:support-bot", "--token", grpc_servers.ADMIN)
    no_token = error_line(run(url, "ls", "-s", "shared:support-bot"))
    assert "token" in no_token


def test_edit_without_write_permission_is_refused_before_the_editor_opens(
    url: str, tmp_path: Path
) -> None:
    publish_admin(url)
    marker = tmp_path / "editor-ran"
    script = tmp_path / "ed.sh"
    script.write_text(f'#!/bin/sh\ntouch {marker}\necho edited >> "$1"\n')
    script.chmod(0o755)
    alice = {"SKILLFS_TOKEN": grpc_servers.ALICE, "EDITOR": str(script)}
    line = error_line(run(url, "edit", "demo/SKILL.md", "-s", "shared:support-bot", **alice))
    assert line == (
        "error: token 'alice' may not write shared:support-bot: ask an operator for a grant "
        "such as 'agent:support-bot/shared:write'"
    )
    reader = {"SKILLFS_TOKEN": grpc_servers.READER, "EDITOR": str(script)}
    line = error_line(run(url, "edit", "demo/SKILL.md", "-s", "user:support-bot/bob", **reader))
    assert (
        "may not write user:support-bot/bob" in line
        and "'agent:support-bot/user:bob:write'" in line
    )
    assert "upload" not in line
    assert not marker.exists()  # nobody typed an edit that could not be saved
    # alice may write her own scope: the check lets her through, and she gets her override
    result = ok(url, "edit", "demo/SKILL.md", "-s", "user:support-bot/alice", **alice)
    assert (
        marker.exists() and "creating alice's override of shared:support-bot/demo" in result.stdout
    )
    with skillfs.open_store(url, token=grpc_servers.ADMIN) as store:
        own = store.read(skillfs.Scope.user("support-bot", "alice"), "demo", "SKILL.md")
        assert own.endswith(b"edited\n")


def test_import_without_write_permission_names_the_grant(url: str, tmp_path: Path) -> None:
    line = error_line(
        run(
            url, "import", str(EXAMPLES), "-s", "shared:support-bot", "--token", grpc_servers.READER
        )
    )
    assert "may not write shared:support-bot" in line and "upload" not in line


def test_watch_over_grpc(url: str) -> None:
    publish_admin(url)

    def write() -> None:
        time.sleep(0.5)
        with skillfs.open_store(url, token=grpc_servers.ADMIN) as store:
            store.delete(skillfs.Scope.shared("support-bot"), "demo")

    thread = threading.Thread(target=write)
    thread.start()
    result = ok(url, "watch", "-a", "support-bot", "--timeout", "3", "--token", grpc_servers.ADMIN)
    thread.join()
    assert "remove shared:support-bot/demo  version 2" in result.stdout


def publish_admin(url: str) -> None:
    with skillfs.open_store(url, token=grpc_servers.ADMIN) as store:
        store.publish(skillfs.Scope.shared("support-bot"), "demo", {"SKILL.md": skill_md("demo")})


def as_json_env(url: str, env: dict[str, str], *args: str) -> Any:
    result = run(url, *args, "--json", **env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)
