"""`skillfs validate` and `skillfs run`, and the real-world oracle: every skill of the shared
corpus gets the same valid/invalid verdict from us as from skills-ref."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import skills_ref
from typer.testing import CliRunner

from skillfs.cli.app import app

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
EXAMPLES = REPO / "examples" / "skills"
EXAMPLE_NAMES = [
    "api-docs-writer",
    "code-reviewer",
    "incident-postmortem",
    "release-notes",
    "sql-query-helper",
]
GOOD = b"---\nname: %s\ndescription: Does a thing. Use when testing.\n---\n\n# Body\n"

runner = CliRunner()


def validate_json(*paths: Path | str) -> tuple[int, list[dict[str, Any]]]:
    result = runner.invoke(app, ["validate", "--json", *map(str, paths)])
    return result.exit_code, json.loads(result.stdout)


def skill(root: Path, name: str, content: bytes | None = None) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "SKILL.md").write_bytes(GOOD % name.encode() if content is None else content)
    return path


# ------------------------------------------------------------------------------------- corpus


@pytest.fixture(scope="module")
def corpus() -> Path:
    assert CORPUS.is_dir(), (
        f"the shared skill corpus is missing: expected {CORPUS} (shared/ beside the repository)"
    )
    return CORPUS


def test_corpus_verdicts_match_skills_ref(corpus: Path) -> None:
    code, reports = validate_json(corpus)
    skill_mds = sorted(p.parent for p in corpus.rglob("SKILL.md"))
    assert sorted(Path(r["path"]) for r in reports) == skill_mds  # every skill, nothing else
    assert len(reports) >= 20
    differences = []
    for r in reports:
        theirs = skills_ref.validate(Path(r["path"]))
        if r["valid"] != (theirs == []):
            differences.append((r["path"], r["errors"], theirs))
    assert differences == []
    assert code == (0 if all(r["valid"] for r in reports) else 1)


# ------------------------------------------------------------------------------------ validate


def test_json_shape(tmp_path: Path) -> None:
    good = skill(tmp_path, "good")
    code, reports = validate_json(good)
    assert code == 0
    assert reports == [
        {"path": str(good), "name": "good", "valid": True, "errors": [], "warnings": []}
    ]


def test_exit_1_when_any_skill_has_errors(tmp_path: Path) -> None:
    skill(tmp_path, "good")
    skill(tmp_path, "bad", GOOD % b"Bad_Name")
    skill(tmp_path, "warned", (GOOD % b"warned").replace(b"---\n\n", b"metadata: x\n---\n\n"))
    code, reports = validate_json(tmp_path)
    assert code == 1
    by_name = {Path(r["path"]).name: r for r in reports}
    assert [by_name[n]["valid"] for n in ("bad", "good", "warned")] == [False, True, True]
    assert by_name["bad"]["name"] == "Bad_Name"
    assert by_name["bad"]["errors"][0].startswith("name 'Bad_Name' must use only lowercase")
    assert by_name["warned"]["warnings"] == [
        "metadata should be a mapping of string keys to string values, got str 'x'"
    ]


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    code, [report] = validate_json(skill(tmp_path, "w", b"\xef\xbb\xbf" + GOOD % b"w"))
    assert code == 0 and report["valid"] and len(report["warnings"]) == 1


def test_an_unquoted_colon_fails_validate_but_reaches_workers(tmp_path: Path) -> None:
    """docs/validation.md: other agents skip such a skill, so `validate` says error (exit 1);
    the worker view reads it as if quoted (the client guide's fallback) and shows it."""
    text = b"---\nname: c\ndescription: Use this skill when: the user asks.\n---\n\n# Body\n"
    code, [report] = validate_json(skill(tmp_path / "skills", "c", text))
    assert code == 1 and report["name"] == "c"
    assert report["errors"] == [
        "frontmatter YAML on line 3 (field 'description'): the value holds ': ' without quotes,"
        " which YAML reads as a nested mapping and other agents skip the skill; it was read as"
        ' if quoted: write description: "..."'
    ]
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    imported = runner.invoke(
        app, ["import", str(tmp_path / "skills"), "-s", "shared:bot", "--store", url]
    )
    assert imported.exit_code == 0, imported.stderr
    prompt = runner.invoke(app, ["prompt", "--agent", "bot", "--store", url])
    assert "<description>Use this skill when: the user asks.</description>" in prompt.stdout


def test_several_paths(tmp_path: Path) -> None:
    a, b = skill(tmp_path, "a"), skill(tmp_path / "group", "b")
    code, reports = validate_json(a, tmp_path / "group")
    assert code == 0
    assert [r["path"] for r in reports] == [str(a), str(b)]


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "--json", str(skill(tmp_path, "a")), "/no/such/dir"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "path '/no/such/dir' does not exist" in result.stderr


def test_one_console_and_one_json_writer_for_every_command() -> None:
    import skillfs.cli.app as cli
    from skillfs.cli import common
    from skillfs.cli import serve as server_commands

    for module in (cli, server_commands):
        assert not {"console", "err_console", "_emit_json", "_fail", "_fail_usage"} & set(
            vars(module)
        ), module.__name__
    assert cli.out is common.out and cli.emit_json is common.emit_json
    assert server_commands.out is common.out


COMMANDS = [
    "validate", "ls", "cat", "history", "diff", "usage", "edit", "rm", "rollback", "prompt",
    "watch", "gc", "import", "export", "serve", "run", "check", "check-names",
]  # fmt: skip


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_reads_cleanly_at_80_columns(command: str) -> None:
    result = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "Usage: skillfs" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    # metavars people type, not Python types, ranges or braces
    assert not re.findall(r"<(?!available_skills>)[^<>\s]+>", text), text
    assert "{" not in text and "[x>" not in text and "range]" not in text, text


def test_help_metavars() -> None:
    def usage(*args: str) -> str:
        return runner.invoke(app, [*args, "--help"], env={"COLUMNS": "80"}).stdout

    assert "Usage: skillfs edit [OPTIONS] SKILL/PATH" in usage("edit")
    assert "Usage: skillfs rm [OPTIONS] SKILL[/PATH]" in usage("rm")
    assert "Usage: skillfs validate [OPTIONS] PATH..." in usage("validate")
    assert re.search(r"--version\s+N\s", usage("ls")) and " -v " not in usage("ls")
    assert re.search(r"--json\s+Machine-readable", usage("ls"))  # a flag takes no value
    assert "admin console" in usage("run") and "admin console" in usage("serve")


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"skillfs {importlib.metadata.version('skillfs')}\n"


def test_a_directory_without_skills_is_reported(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, [report] = validate_json(tmp_path / "empty")
    assert code == 1
    assert report == {
        "path": str(tmp_path / "empty"),
        "name": None,
        "valid": False,
        "errors": ["skill directory 'empty' has no SKILL.md"],
        "warnings": [],
    }


def test_human_output(tmp_path: Path) -> None:
    skill(tmp_path, "good")
    skill(tmp_path, "bad", GOOD % b"other")
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 1
    out = result.stdout
    assert re.search(r"✓ good\s+\S*good", out)
    assert re.search(r"✗ other\s+\S*bad", out)
    assert "error    name 'other' must equal the skill's directory name 'bad'" in out
    assert "2 skill directories: 1 valid, 1 with errors, 0 with warnings" in out


def test_human_output_does_not_eat_brackets(tmp_path: Path) -> None:
    path = skill(
        tmp_path, "x", (GOOD % b"x").replace(b"---\n\n", b"allowed-tools: [Read]\n---\n\n")
    )
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert "flow-style YAML ([...] or {...})" in result.stdout


def test_console_script_entry_point(tmp_path: Path) -> None:
    """main() as installed: real process, real exit code."""
    bad = skill(tmp_path, "bad", GOOD % b"nope")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from skillfs.cli.app import main; main()",
            "validate",
            "--json",
            str(bad),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)[0]["valid"] is False


# ------------------------------------------------------------------------------- the examples


def test_examples_are_clean_for_us_and_for_skills_ref() -> None:
    code, reports = validate_json(EXAMPLES)
    assert code == 0
    assert [Path(r["path"]).name for r in reports] == EXAMPLE_NAMES
    for r in reports:
        assert (r["errors"], r["warnings"]) == ([], []), r
        assert skills_ref.validate(Path(r["path"])) == [], r["path"]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_links_resolve_and_scripts_run(name: str) -> None:
    root = EXAMPLES / name
    body = (root / "SKILL.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:references|scripts)/[^)]+)\)", body)
    mentioned = re.findall(r"`((?:scripts|references)/[\w./-]+)", body)
    assert any(link.startswith("references/") for link in links), "refers to no references/ doc"
    for rel in links + mentioned:
        assert (root / rel).is_file(), f"{name}: SKILL.md mentions {rel}, which does not exist"
    for script in (root / "scripts").glob("*") if (root / "scripts").is_dir() else []:
        assert script.read_bytes().startswith(b"#!"), f"{script} has no shebang"
        assert os.access(script, os.X_OK), f"{script} is not executable"


def test_scripts_are_executable_in_git() -> None:
    files = subprocess.run(
        ["git", "ls-files", "-s", "examples/skills"], capture_output=True, text=True, cwd=REPO
    ).stdout.splitlines()
    scripts = [line.split() for line in files if "/scripts/" in line]
    if not scripts:
        pytest.fail("no example scripts are tracked in git")
    assert {mode for mode, *_ in scripts} == {"100755"}, scripts
    assert len(scripts) >= 2


def test_lint_sql_example_script_works(tmp_path: Path) -> None:
    script = EXAMPLES / "sql-query-helper" / "scripts" / "lint_sql.py"
    bad = subprocess.run(
        [sys.executable, str(script)], input="DELETE FROM users;\n", capture_output=True, text=True
    )
    assert bad.returncode == 1 and "without WHERE" in bad.stdout
    fine = subprocess.run(
        [sys.executable, str(script)],
        input="SELECT id FROM users WHERE id = $1;\n",
        capture_output=True,
        text=True,
    )
    assert (fine.returncode, fine.stdout) == (0, "")


# ------------------------------------------------------------------------------- host profiles

HOST_SKILLS = {
    "claude-code": (
        "deploy",
        b"---\nname: deploy\ndescription: Deploys. Use when asked.\n"
        b"disable-model-invocation: true\nargument-hint: '[env]'\nmodel: sonnet\n"
        b"context: fork\nagent: Explore\nhooks:\n  PreToolUse: []\n---\n\nDeploy to $ARGUMENTS.\n",
    ),
    "agentscope": (
        "data_analysis",
        b"---\nname: data_analysis\ndescription: Analyses data. Use when asked.\n---\n\n# Body\n",
    ),
    "harness9": (
        "triage",
        b"---\nname: triage\ndescription: Triage. Use when asked.\ntrigger: on-ticket\n---\n\nB\n",
    ),
    "saa": (
        "report",
        b"---\nname: report\ndescription: Reports. Use when asked.\nallowed_tools: Read\n"
        b"allowedTools: Read\n---\n\nB\n",
    ),
}


@pytest.mark.parametrize("profile", sorted(HOST_SKILLS))
def test_a_host_profile_accepts_what_spec_flags_and_spec_agrees_with_skills_ref(
    tmp_path: Path, profile: str
) -> None:
    name, text = HOST_SKILLS[profile]
    path = skill(tmp_path, name, text)
    code, [report] = validate_json(path)
    assert code == 1 and report["errors"], report
    assert bool(skills_ref.validate(path)) is True  # skills-ref flags it too
    if profile == "agentscope":  # a name, not a field: the spec's name rule says what is wrong
        assert "must use only lowercase letters, digits and hyphens" in report["errors"][0]
    else:
        assert f"--profile {profile}" in report["errors"][0]  # the error names the profile
    result = runner.invoke(app, ["validate", "--json", "--profile", profile, str(path)])
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)[0]["errors"] == []
    other = next(p for p in HOST_SKILLS if p != profile)
    result = runner.invoke(app, ["validate", "--json", "--profile", other, str(path)])
    assert result.exit_code == 1  # another host's profile does not accept it


def test_an_unknown_profile_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "--profile", "cursor", str(skill(tmp_path, "x"))])
    assert result.exit_code == 2
    assert "unknown host profile 'cursor': choose from spec, claude-code" in result.output
