"""Helpers for the CLI tests: run `skillfs` in-process (typer's CliRunner) or as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

import skillfs
from skillfs.cli.app import app
from tests import helpers

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"

runner = CliRunner()


def skill_md(name: str, body: str = "# Steps\n\n1. one\n") -> bytes:
    """The CLI tests' SKILL.md: a description naming the skill, a blank line, then `body` as is
    (`cat`, `diff` and three-way merges compare these bytes)."""
    return helpers.skill_md(
        name, "\n" + body, description="Does {name} things. Use when testing.", end=""
    )


def run(url: str, *args: str, input: str | None = None, **env: str) -> Result:
    """`skillfs ARGS --store URL` in-process; stdout and stderr apart. Wide lines by default,
    so messages in rich's usage-error box are not wrapped."""
    return runner.invoke(app, [*args, "--store", url], input=input, env={"COLUMNS": "200", **env})


def ok(url: str, *args: str, **env: str) -> Result:
    result = run(url, *args, **env)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def as_json(url: str, *args: str) -> Any:
    return json.loads(ok(url, *args, "--json").stdout)


def error_line(result: Result, code: int = 1) -> str:
    """The one red line a failed command prints; asserts the exit code and no traceback."""
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.stderr
    if code == 1:
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("error: "), result.stderr
        return lines[-1]
    return result.stderr


def command_line(*args: str) -> list[str]:
    """The real `skillfs` entry point as a child process runs it."""
    return [sys.executable, "-c", "from skillfs.cli.app import main; main()", *args]


def environment(**env: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **env}


def process(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`skillfs ARGS` in a child process, with `env` added to the environment."""
    return subprocess.run(
        command_line(*args),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment(**env),
        timeout=120,
    )


def publish(url: str, scope: str, skill: str, files: dict[str, bytes | skillfs.File]) -> int:
    with skillfs.open_store(url) as store:
        return store.publish(skillfs.Scope.parse(scope), skill, files).version
