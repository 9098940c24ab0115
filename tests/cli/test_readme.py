"""The README as a new user follows it: `make run` (`skillfs run`) serves the default store,
then every Python snippet and every CLI example runs as written against that store, from the
repository, and prints what the README says it prints."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

#: Runs the snippets statement by statement. An expression whose line ends with a comment
#: that is a Python literal (`x.version  # 1`) must equal it; other comments are prose.
DRIVER = r"""
import ast, json, sys

source = sys.stdin.read()
lines = source.splitlines()
scope, checked = {}, []
for node in ast.parse(source).body:
    code = ast.Expression(node.value) if isinstance(node, ast.Expr) else ast.Module([node], [])
    mode = "eval" if isinstance(node, ast.Expr) else "exec"
    value = eval(compile(code, "README.md", mode), scope)
    comment = lines[node.end_lineno - 1][node.end_col_offset :].strip().removeprefix("#").strip()
    try:
        expected = ast.literal_eval(comment)
    except (ValueError, SyntaxError):
        continue
    if isinstance(node, ast.Expr):
        assert value == expected, f"README line {node.lineno}: {value!r}, not {expected!r}"
        checked.append(ast.get_source_segment(source, node))
print(json.dumps(checked))
"""


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, re.MULTILINE | re.DOTALL)


def environment(home: Path) -> dict[str, str]:
    """A new user's shell: their own HOME (so the default store is a fresh one), no
    $SKILLFS_STORE, the repository's code."""
    env = {k: v for k, v in os.environ.items() if k not in ("SKILLFS_STORE", "SKILLFS_TOKEN")}
    return {**env, "HOME": str(home), "PYTHONPATH": str(REPO), "COLUMNS": "100"}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """`make run` in a new user's HOME: `skillfs run` (on free ports), until it serves."""
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "skillfs"), "run",
         "--grpc", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment(tmp_path),
        cwd=REPO,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while not any(line.startswith("try ") for line in lines) and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    assert any(line.startswith("examples       shared:support-bot: imported") for line in lines), (
        "".join(lines)
    )
    try:
        yield tmp_path
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0


def _collapse(line: str) -> str:
    return " ".join(line.split())


def _matches(shown: str, printed: str) -> bool:
    """A README output line against a printed one, spacing aside; a line the README ends
    with `…` stands for any line starting with the rest (a revision, a cut description)."""
    shown, printed = _collapse(shown), _collapse(printed)
    if shown.endswith("…") and not printed.endswith("…"):
        return printed.startswith(shown.removesuffix("…").rstrip())
    return shown == printed


def _console_examples() -> list[tuple[str, list[str]]]:
    """Each `$ command` of the README's console blocks with the output lines shown under it."""
    examples: list[tuple[str, list[str]]] = []
    for block in blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                examples.append((line[2:], []))
            else:
                examples[-1][1].append(line)
    return examples


def test_the_readme_runs_against_the_store_make_run_serves(home: Path) -> None:
    env = environment(home)
    snippets = "\n".join(blocks("python"))
    assert "open_store()" in snippets and "store=" not in snippets  # the default store
    ran = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=snippets,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    checked = json.loads(ran.stdout.splitlines()[-1])
    assert len(checked) >= 2, checked  # the `# value` comments were compared, not skipped

    examples = _console_examples()
    assert [command.split()[:2] for command, _ in examples] == [
        [".venv/bin/skillfs", "ls"],
        [".venv/bin/skillfs", "prompt"],
        [".venv/bin/skillfs", "cat"],
    ]
    for command, shown in examples:
        result = subprocess.run(
            command, shell=True, capture_output=True, text=True, cwd=REPO, env=env, timeout=120
        )
        assert result.returncode == 0, (command, result.stderr)
        printed = iter(result.stdout.splitlines())
        for line in shown:  # in order, any printed lines between "…" lines
            if line.strip() == "…":
                continue
            assert any(_matches(line, p) for p in printed), (command, line, result.stdout)
