"""What the CLI prints for people: tables that never cut a name or a number, and stored text
(skill names, descriptions, paths) stripped of the control characters a terminal acts on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from skillfs.cli.app import app
from skillfs.errors import InvalidPath
from skillfs.model.names import check_skill_name
from tests.cli_helpers import REPO, command_line, ok, publish, run, runner

LONG = "finishing-a-development-branch"
DEEP = "references/a-very-long-directory-name/with-another-long-name/and-a-long-file-name.md"
ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"


@pytest.fixture
def url(tmp_path: Path) -> str:
    """shared:bot with a long-named skill whose description spans lines, a large file deep
    down, and a skill whose name and description carry escape sequences."""
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    description = (
        "|\n  Use when implementation is complete,\n  all tests pass, and you need to decide "
        "how to integrate the work: merge, pull request or clean-up.\n"
    )
    publish(
        url,
        "shared:bot",
        LONG,
        {
            "SKILL.md": f"---\nname: {LONG}\ndescription: {description}---\n# Steps\n".encode(),
            DEEP: b"x" * 107_300,
        },
    )
    evil = f"evil{ESC}name"
    # YAML escapes: ESC and RIGHT-TO-LEFT OVERRIDE
    text = '---\nname: evil\ndescription: "red \\e[31m text \\u202e"\n---\n# Steps\n'
    with pytest.raises(InvalidPath, match=r"U\+001B"):
        publish(url, "shared:bot", evil, {"SKILL.md": text.encode()})
    # such a name from before the rule is still shown defused (written past the rule here)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("skillfs.store.committer.check_live_name", check_skill_name)
        mp.setattr("skillfs.store.rules.check_new_name", check_skill_name)
        publish(url, "shared:bot", evil, {"SKILL.md": text.encode()})
    return url


def piped(url: str, *args: str) -> str:
    """`skillfs ARGS` as a script runs it: stdout a pipe, no COLUMNS (rich assumes 80)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        command_line(*args, "--store", url),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("how", ["COLUMNS=80", "piped"])
def test_tables_never_cut_names_or_numbers(url: str, how: str) -> None:
    def show(*args: str) -> str:
        return ok(url, *args, COLUMNS="80").stdout if how != "piped" else piped(url, *args)

    skills = show("ls", "-s", "shared:bot")
    header, *rows = skills.splitlines()
    assert header.split() == ["skill", "version", "files", "size", "status", "description"]
    assert len(rows) == 2, skills  # the description's newlines do not spill into more rows
    assert rows[1].split()[:5] == [LONG, "1", "2", "105.0", "KiB"]
    assert "Use when" in rows[1] and rows[1].rstrip().endswith("…")
    files = show("ls", "-s", "shared:bot", LONG)
    assert DEEP in files and "104.8 KiB" in files and "sha256" in files
    history = show("history", LONG, "-s", "shared:bot")
    assert "105.0 KiB" in history and "version" in history.split()


def test_stored_text_reaches_the_terminal_without_control_characters(url: str) -> None:
    outputs = [
        ok(url, "ls", "-s", "shared:bot").stdout,
        ok(url, "ls", "-s", "shared:bot", f"evil{ESC}name").stdout,
        ok(url, "history", f"evil{ESC}name", "-s", "shared:bot").stdout,
        ok(url, "prompt", "--agent", "bot", "--user", "u").stdout,
        ok(url, "diff", f"evil{ESC}name", "0", "-s", "shared:bot").stdout,
        run(url, "cat", f"evil{ESC}name/nothing.md", "-s", "shared:bot").stderr,
    ]
    for text in outputs:
        assert not any(c in text for c in "\x1b\x07\u202e"), repr(text)
    assert "evil]0;pwned[2J[31mname" in outputs[0]  # defused, and visibly there
    # --json keeps the data exact, with what a terminal acts on written as \u escapes
    raw = ok(url, "ls", "-s", "shared:bot", "--json").stdout
    assert "\x1b" not in raw and "\u202e" not in raw and "\\u202e" in raw
    assert json.loads(raw)[0]["skill"] == f"evil{ESC}name"
    assert json.loads(raw)[0]["description"] == "red \x1b[31m text \u202e"


def test_validate_strips_control_characters(tmp_path: Path) -> None:
    skill = tmp_path / f"x{ESC}"  # printed as the report's path
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: x\ndescription: d\n---\n# Steps\n")
    result = runner.invoke(app, ["validate", str(skill)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.stdout  # the name is not the directory's
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["audit"], "give one of --agent AGENT"),
        (["curate", "shared:bot"], "curate takes an agent id"),
        (["curate", "Bad/Agent"], "invalid agent id"),
        (["archive", ".hidden", "-s", "shared:bot"], "is not a live skill"),
        (["archive", "a/SKILL.md", "-s", "shared:bot"], "a/SKILL.md names a file of a"),
        (["widen", "x", "-s", "shared:bot", "--fraction", "1.5"], "from 0"),
    ],
)
def test_bad_usage_exits_2_before_the_store_is_opened(args: list[str], words: str) -> None:
    """Outside testing: these exited 1, some after reading the store (`widen` said "no
    staged candidate" before the fraction was out of range)."""
    result = run("sqlite:////nonexistent/never-opened.db", *args)
    assert result.exit_code == 2, result.stderr
    assert words in " ".join(result.stderr.replace("│", " ").split())
