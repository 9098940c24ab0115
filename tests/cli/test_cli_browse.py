"""`skillfs ls`, `cat`, `history`, `diff`, `usage`, and the errors every command shares."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import skillfs
from skillfs.cli import common
from tests.cli_helpers import as_json, error_line, ok, publish, run, skill_md
from tests.stores import url_for

BINARY = b"\x00\x01\r\n\xff binary \x00"


@pytest.fixture
def url(tmp_path: Path) -> str:
    """An empty store (the file exists: reading commands refuse one that does not)."""
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    skillfs.open_store(url).close()
    return url


@pytest.fixture
def filled(url: str) -> str:
    """shared:bot with two skills (one broken), user:bot/alice with one, market:team with one."""
    publish(
        url,
        "shared:bot",
        "reviewer",
        {
            "SKILL.md": skill_md("reviewer"),
            "references/style.md": b"# Style\n",
            "scripts/run.sh": skillfs.File(b"#!/bin/sh\necho hi\n", mode=0o755),
            "assets/logo.bin": BINARY,
        },
    )
    publish(url, "shared:bot", "broken", {"SKILL.md": b"no frontmatter\n"})
    publish(url, "user:bot/alice", "notes", {"SKILL.md": skill_md("notes")})
    publish(url, "market:team", "shared-tool", {"SKILL.md": skill_md("shared-tool")})
    return url


# ----------------------------------------------------------------------------------------- ls


def test_ls_agents_and_markets(filled: str) -> None:
    rows = as_json(filled, "ls")
    assert [(r["kind"], r["id"]) for r in rows] == [("agent", "bot"), ("market", "team")]
    assert all(":" in r["revision"] for r in rows)
    human = ok(filled, "ls").stdout
    assert "agent" in human and "bot" in human and "team" in human


def test_ls_empty_store(url: str) -> None:
    assert as_json(url, "ls") == []
    assert "holds no skills yet" in ok(url, "ls").stdout


READING = [
    ["ls"],
    ["cat", "a/SKILL.md", "-s", "shared:bot"],
    ["history", "a", "-s", "shared:bot"],
    ["diff", "a", "-s", "shared:bot"],
    ["prompt", "--agent", "bot", "--user", "u"],
    ["watch", "--agent", "bot", "--timeout", "0"],
    ["export", "out", "-s", "shared:bot"],
    ["usage", "--agent", "bot"],
]


@pytest.mark.parametrize("args", READING, ids=lambda a: a[0])
def test_reading_commands_refuse_a_sqlite_file_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere" / "skills.db"
    line = error_line(run(f"sqlite:///{missing}", *args))
    assert line == (
        f"error: no store at {missing}: check the URL (sqlite:///relative, "
        "sqlite:////absolute) or import skills first"
    )
    assert not (tmp_path / "nowhere").exists()  # nothing created, not even the directory
    relative = error_line(run("sqlite:///skills.db", *args))  # three slashes: relative
    assert f"no store at {tmp_path / 'skills.db'}" in relative
    assert not (tmp_path / "skills.db").exists()


def test_writing_commands_create_the_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'skills.db'}"
    ok(url, "gc")
    assert (tmp_path / "new" / "skills.db").exists()
    ok(url, "ls")


def test_ls_agent_scopes(filled: str) -> None:
    assert as_json(filled, "ls", "--agent", "bot") == [
        {"scope": "shared:bot", "kind": "shared", "user": None},
        {"scope": "user:bot/alice", "kind": "user", "user": "alice"},
    ]
    assert "user:bot/alice" in ok(filled, "ls", "--agent", "bot").stdout
    assert "agent 'nobody' has no skills" in error_line(run(filled, "ls", "--agent", "nobody"))


def test_ls_scope_of_an_unknown_agent_or_market_lists_those_there_are(filled: str) -> None:
    line = error_line(run(filled, "ls", "--scope", "shared:bto"))
    assert line == f"error: agent 'bto' has no skills in {filled} (did you mean bot?); agents: bot"
    line = error_line(run(filled, "ls", "--scope", "market:taem", "--json"))
    assert (
        line
        == f"error: market 'taem' has no skills in {filled} (did you mean team?); markets: team"
    )
    user = ok(filled, "ls", "--scope", "user:bot/alcie").stdout
    assert (
        user
        == "user:bot/alcie holds no skills (did you mean alice?); users of bot with skills: alice\n"
    )
    assert as_json(filled, "ls", "--scope", "user:bot/alcie") == []


def test_ls_scope_skills(filled: str) -> None:
    rows = as_json(filled, "ls", "--scope", "shared:bot")
    assert [r["skill"] for r in rows] == ["broken", "reviewer"]
    reviewer = rows[1]
    assert set(reviewer) == {
        "skill",
        "version",
        "commit_id",
        "committed_at",
        "deleted",
        "disabled",
        "disabled_reason",
        "candidate",
        "labels",
        "actor",
        "message",
        "files",
        "size",
        "usable",
        "valid",
        "description",
        "errors",
        "warnings",
    }
    assert (reviewer["version"], reviewer["files"], reviewer["valid"]) == (1, 4, True)
    assert reviewer["description"] == "Does reviewer things. Use when testing."
    assert (rows[0]["usable"], rows[0]["valid"]) == (False, False)
    assert rows[0]["errors"][0].startswith("SKILL.md must start with a '---' line")
    human = ok(filled, "ls", "-s", "shared:bot", COLUMNS="150").stdout
    assert "✗ unusable (1 error)" in human and "✓" in human and "Does reviewer things" in human
    assert as_json(filled, "ls", "-s", "market:team")[0]["skill"] == "shared-tool"
    assert "holds no skills" in ok(filled, "ls", "-s", "user:bot/bob").stdout


def test_ls_deleted_finds_what_rollback_brings_back(filled: str) -> None:
    before = time.time()
    publish(filled, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer", "v2\n")})
    ok(filled, "rm", "reviewer", "-s", "shared:bot", "--yes")
    assert [r["skill"] for r in as_json(filled, "ls", "-s", "shared:bot")] == ["broken"]
    [row] = as_json(filled, "ls", "-s", "shared:bot", "--deleted")
    assert {k: v for k, v in row.items() if k not in ("commit_id", "deleted_at")} == {
        "skill": "reviewer",
        "version": 3,
        "archived": False,
        "last_version": 2,
        "files": 1,
        "size": len(skill_md("reviewer", "v2\n")),
        "description": "Does reviewer things. Use when testing.",
    }
    assert datetime.fromisoformat(row["deleted_at"]).timestamp() >= before - 1
    human = ok(filled, "ls", "-s", "shared:bot", "--deleted").stdout
    assert human.splitlines()[1].split()[:2] == ["reviewer", datetime.now().strftime("%Y-%m-%d")]
    assert "skillfs rollback SKILL --scope shared:bot --to RESTORE" in human
    ok(filled, "rollback", "reviewer", "-s", "shared:bot", "--to", str(row["last_version"]))
    assert as_json(filled, "ls", "-s", "shared:bot", "--deleted") == []
    assert (
        "shared:bot has no deleted skills"
        in ok(filled, "ls", "-s", "shared:bot", "--deleted").stdout
    )
    # an archived skill: restore brings it back, and its archive entry is no deleted skill
    # (outside testing: both were listed, with the rollback hint)
    ok(filled, "archive", "reviewer", "-s", "shared:bot", "-r", "old")
    [row] = as_json(filled, "ls", "-s", "shared:bot", "--deleted")
    assert row["skill"] == "reviewer" and row["archived"]
    human = ok(filled, "ls", "-s", "shared:bot", "--deleted").stdout
    assert "archived" in human and "skillfs restore SKILL --scope shared:bot" in human
    ok(filled, "restore", "reviewer", "-s", "shared:bot")
    assert as_json(filled, "ls", "-s", "shared:bot", "--deleted") == []
    assert "agent 'bto' has no skills" in error_line(
        run(filled, "ls", "-s", "shared:bto", "--deleted")
    )
    assert "--deleted lists a scope's skills" in error_line(run(filled, "ls", "--deleted"), code=2)


def test_ls_skill_files(filled: str) -> None:
    rows = as_json(filled, "ls", "-s", "shared:bot", "reviewer")
    assert [r["path"] for r in rows] == [
        "SKILL.md",
        "assets/logo.bin",
        "references/style.md",
        "scripts/run.sh",
    ]
    run_sh = rows[3]
    assert run_sh["mode"] == "0755" and run_sh["size"] == 18 and len(run_sh["sha256"]) == 64
    assert as_json(filled, "ls", "-s", "shared:bot", "reviewer/scripts") == [run_sh]
    assert as_json(filled, "ls", "-s", "shared:bot", "reviewer/scripts/run.sh") == [run_sh]
    human = ok(filled, "ls", "-s", "shared:bot", "reviewer", COLUMNS="150").stdout
    assert "version 1" in human and "scripts/run.sh" in human and "0755" in human
    line = error_line(run(filled, "ls", "-s", "shared:bot", "reviewer/nope"))
    assert "has no file 'nope'" in line and "references/style.md" in line


def test_ls_skill_at_a_version(filled: str) -> None:
    publish(filled, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer")})
    assert len(as_json(filled, "ls", "-s", "shared:bot", "reviewer")) == 1
    assert len(as_json(filled, "ls", "-s", "shared:bot", "reviewer", "--version", "1")) == 4


def test_ls_skill_needs_a_scope(filled: str) -> None:
    assert "listing a skill needs --scope" in error_line(run(filled, "ls", "reviewer"), code=2)


# ---------------------------------------------------------------------------------------- cat


def test_cat_writes_bytes_untouched(filled: str) -> None:
    result = ok(filled, "cat", "reviewer/assets/logo.bin", "-s", "shared:bot")
    assert result.stdout_bytes == BINARY
    assert ok(filled, "cat", "reviewer/SKILL.md", "-s", "shared:bot").stdout_bytes == skill_md(
        "reviewer"
    )


def test_cat_a_version(filled: str) -> None:
    publish(filled, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer", "v2\n")})
    latest = ok(filled, "cat", "reviewer/SKILL.md", "-s", "shared:bot").stdout
    first = ok(filled, "cat", "reviewer/SKILL.md", "-s", "shared:bot", "--version", "1").stdout
    assert latest.endswith("v2\n") and first.endswith("1. one\n")
    line = error_line(run(filled, "cat", "reviewer/SKILL.md", "-s", "shared:bot", "--version", "7"))
    assert "version 7 of shared:bot/reviewer is not kept" in line


@pytest.mark.parametrize(
    "args", [["ls", "reviewer"], ["cat", "reviewer/SKILL.md"], ["rm", "reviewer", "--yes"]]
)
def test_version_has_no_short_flag(filled: str, args: list[str]) -> None:
    """`-v` reads as "verbose"; `--version N` is spelled out (docs/cli.md)."""
    result = run(filled, *args, "-s", "shared:bot", "-v", "1")
    assert "No such option: -v" in error_line(result, code=2)


def test_cat_errors(filled: str) -> None:
    assert "name a file" in error_line(run(filled, "cat", "reviewer", "-s", "shared:bot"), 2)
    line = error_line(run(filled, "cat", "nope/SKILL.md", "-s", "shared:bot"))
    assert line == (
        "error: skill 'nope' does not exist in shared:bot; skills there: broken, reviewer"
    )
    line = error_line(run(filled, "cat", "reviewer/SKILL.md", "-s", "user:bot/bob"))
    assert "does not exist in user:bot/bob; skills there: none" in line


# --------------------------------------------------------------------------- shared errors


@pytest.mark.parametrize(
    "scope", ["bot", "shared:", "user:bot", "user:bot/a/b", "market:", "team:x", "shared:_x"]
)
def test_bad_scope_is_a_usage_error(url: str, scope: str) -> None:
    text = error_line(run(url, "ls", "--scope", scope), code=2)
    assert "Invalid value for '--scope'" in text


@pytest.mark.parametrize("target", ["../x/SKILL.md", "x/../../etc/passwd", "x//y", "x\\y/z"])
def test_bad_skill_path_is_a_usage_error(url: str, target: str) -> None:
    assert "Invalid value" in error_line(run(url, "cat", target, "-s", "shared:bot"), code=2)


def test_bad_agent_id_is_a_usage_error(url: str) -> None:
    assert "invalid agent id" in error_line(run(url, "ls", "--agent", "a/b"), code=2)


def test_store_down(tmp_path: Path) -> None:
    down = "redis://127.0.0.1:1/0"
    for args in (["ls"], ["cat", "a/SKILL.md", "-s", "shared:bot"]):
        line = error_line(run(down, *args))
        assert line.startswith("error: store redis://127.0.0.1:1/0 is unavailable"), line
        assert "check that it is running" in line


@pytest.mark.serial
def test_store_down_is_retried_for_the_same_budget_by_every_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common, "RETRY_FOR", 1.0)
    down = "redis://127.0.0.1:1/0"
    for args in (
        ["ls"],
        ["ls", "--agent", "bot"],
        ["history", "a", "-s", "shared:bot"],
        ["cat", "a/SKILL.md", "-s", "shared:bot"],
        ["usage", "--agent", "bot"],
    ):
        started = time.monotonic()
        line = error_line(run(down, *args))
        took = time.monotonic() - started
        assert "is unavailable" in line, (args, line)
        assert 1.0 <= took < 1.8, (args, took)  # the budget, not a first failure nor a backoff


def test_password_is_not_printed() -> None:
    line = error_line(run("redis://:s3cret@127.0.0.1:1/0", "ls"))
    assert "s3cret" not in line and "unavailable" in line


def test_unknown_store_url() -> None:
    line = error_line(run("ftp://x", "ls"))
    assert "unknown store URL 'ftp://x'" in line
    assert "redis+sentinel://h:p/service/db, etcd://host:port" in line


def test_store_from_environment(filled: str) -> None:
    from typer.testing import CliRunner

    from skillfs.cli.app import app

    result = CliRunner().invoke(app, ["ls", "--json"], env={"SKILLFS_STORE": filled})
    assert result.exit_code == 0 and '"bot"' in result.stdout


def test_token_goes_only_to_grpc(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    ok(url, "ls", "--token", "t0k")  # a SQLite store takes no token: not passed
    seen: list[dict[str, Any]] = []

    def fake_open(target: str | None, **options: Any) -> skillfs.Store:
        seen.append({"url": target, **options})
        return skillfs.open_store(url)

    monkeypatch.setattr(common, "open_store", fake_open)
    ok("grpc://server:7070", "ls", SKILLFS_TOKEN="from-env")
    ok("grpcs://server:7070", "ls", "--token", "t0k")
    assert [s.get("token") for s in seen] == ["from-env", "t0k"]


def test_help_lists_every_command() -> None:
    from typer.testing import CliRunner

    from skillfs.cli.app import app

    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "150"})
    for name in [
        "ls",
        "cat",
        "edit",
        "rm",
        "history",
        "diff",
        "rollback",
        "import",
        "export",
        "prompt",
        "watch",
        "gc",
        "usage",
        "validate",
    ]:
        assert f" {name} " in result.stdout, name


# ------------------------------------------------------------------------------------ history


def test_history_newest_first(filled: str) -> None:
    publish(filled, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer", "v2\n")})
    ok(filled, "rm", "reviewer", "-s", "shared:bot", "--yes")
    rows = as_json(filled, "history", "reviewer", "-s", "shared:bot")
    assert [(r["version"], r["deleted"], r["files"]) for r in rows] == [
        (3, True, 0),
        (2, False, 1),
        (1, False, 4),
    ]
    assert len({r["commit_id"] for r in rows}) == 3
    human = ok(filled, "history", "reviewer", "-s", "shared:bot", COLUMNS="150").stdout
    lines = [line.split() for line in human.splitlines()[1:]]
    assert [line[0] for line in lines] == ["3", "2", "1"]
    assert "deleted" in lines[0]
    assert rows[0]["commit_id"][:12] in human
    # the time says its zone: the operator's local one, named
    committed = datetime.fromisoformat(rows[0]["committed_at"]).astimezone()
    assert committed.strftime("%Y-%m-%d %H:%M:%S %Z") in human


def test_history_errors(filled: str) -> None:
    assert "does not exist" in error_line(run(filled, "history", "nope", "-s", "shared:bot"))
    text = error_line(run(filled, "history", "reviewer/SKILL.md", "-s", "shared:bot"), code=2)
    assert "give a skill, not a file" in text


# --------------------------------------------------------------------------------------- diff


def test_diff_latest_against_previous(filled: str) -> None:
    publish(
        filled,
        "shared:bot",
        "reviewer",
        {
            "SKILL.md": skill_md("reviewer", "# Steps\n\n1. one\n2. two\n"),
            "references/style.md": b"# Style\n",
            "references/new.md": b"new\n",
            "scripts/run.sh": skillfs.File(b"#!/bin/sh\necho hi\n", mode=0o700),
            "assets/logo.bin": BINARY + b"!",
        },
    )
    entries = as_json(filled, "diff", "reviewer", "-s", "shared:bot")
    by_path = {e["path"]: e for e in entries}
    assert sorted(by_path) == ["SKILL.md", "assets/logo.bin", "references/new.md", "scripts/run.sh"]
    assert by_path["SKILL.md"]["status"] == "modified"
    assert "+2. two\n" in by_path["SKILL.md"]["diff"]
    assert by_path["SKILL.md"]["diff"].startswith("--- a/SKILL.md\n+++ b/SKILL.md\n")
    assert by_path["references/new.md"]["status"] == "added"
    assert by_path["references/new.md"]["diff"].startswith("--- /dev/null\n+++ b/references/new")
    logo = by_path["assets/logo.bin"]
    assert logo["binary"] and logo["diff"] is None and logo["new"]["size"] == len(BINARY) + 1
    mode = by_path["scripts/run.sh"]
    assert (mode["old"]["mode"], mode["new"]["mode"], mode["diff"]) == ("0755", "0700", None)
    assert {e["from_version"] for e in entries} == {1} and {e["to_version"] for e in entries} == {2}
    human = ok(filled, "diff", "reviewer", "-s", "shared:bot").stdout
    assert "+2. two" in human and "mode 0755 → 0700" in human
    assert "binary file: " in human and f"({len(BINARY) + 1} bytes)" in human


def test_diff_versions_and_paths(filled: str) -> None:
    publish(filled, "shared:bot", "reviewer", {"SKILL.md": b"no newline at end"})
    publish(filled, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer")})
    v1_to_latest = as_json(filled, "diff", "reviewer", "-s", "shared:bot", "1")
    assert v1_to_latest == as_json(filled, "diff", "reviewer", "-s", "shared:bot", "1", "3")
    removed = as_json(filled, "diff", "reviewer", "-s", "shared:bot", "1", "3")
    assert {e["status"] for e in removed} == {"removed"}  # v3 has SKILL.md only
    only = as_json(filled, "diff", "reviewer/references", "-s", "shared:bot", "1", "2")
    assert [e["path"] for e in only] == ["references/style.md"]
    whole = as_json(filled, "diff", "reviewer", "-s", "shared:bot", "0", "1")
    assert {e["status"] for e in whole} == {"added"} and len(whole) == 4
    last = as_json(filled, "diff", "reviewer/SKILL.md", "-s", "shared:bot", "2", "3")[0]
    assert "-no newline at end\n\\ No newline at end of file\n" in last["diff"]
    assert "no differences between version 3 and version 3" in (
        ok(filled, "diff", "reviewer", "-s", "shared:bot", "3", "3").stdout
    )
    line = error_line(run(filled, "diff", "reviewer", "-s", "shared:bot", "9"))
    assert "version 9 of shared:bot/reviewer is not kept; kept versions: 3, 2, 1" in line


def test_diff_after_delete(filled: str) -> None:
    ok(filled, "rm", "broken", "-s", "shared:bot", "--yes")
    entries = as_json(filled, "diff", "broken", "-s", "shared:bot")
    assert [(e["path"], e["status"]) for e in entries] == [("SKILL.md", "removed")]


# -------------------------------------------------------------------------------------- usage


def test_usage(filled: str) -> None:
    with skillfs.open_store(filled) as store:
        store.usage.record("bot", {("alice", "reviewer"): 3, ("bob", "notes"): 5})
    rows = as_json(filled, "usage", "--agent", "bot")
    assert [(r["user"], r["skill"], r["count"]) for r in rows] == [
        ("bob", "notes", 5),
        ("alice", "reviewer", 3),
    ]
    assert all(r["last_used"] for r in rows)
    assert "reviewer" in ok(filled, "usage", "-a", "bot").stdout
    assert "no usage recorded" in ok(filled, "usage", "-a", "other").stdout


def test_drop_usage(filled: str) -> None:
    """`skillfs drop-usage` forgets the counters named, asks first (--yes in a script), needs
    a reason, and `usage --drops` lists who dropped what, when and why."""
    with skillfs.open_store(filled) as store:
        store.usage.record("bot", {("alice", "reviewer"): 3, ("bob", "notes"): 5})
    refused = run(filled, "drop-usage", "-a", "bot", "--user", "bob", "-m", "spam")
    assert refused.exit_code == 1 and "pass --yes" in error_line(refused)
    assert "say why" in error_line(run(filled, "drop-usage", "-a", "bot", "--yes"))
    said = ok(filled, "drop-usage", "-a", "bot", "--user", "bob", "-m", "made-up", "--yes")
    assert "dropped 1 usage counter of agent bot by " in said.stdout
    assert [r["user"] for r in as_json(filled, "usage", "-a", "bot")] == ["alice"]
    (drop,) = as_json(filled, "usage", "-a", "bot", "--drops")
    assert (drop["users"], drop["skills"], drop["dropped"], drop["reason"]) == (
        ["bob"], None, 1, "made-up",
    )  # fmt: skip
    assert "made-up" in ok(filled, "usage", "-a", "bot", "--drops").stdout
    assert "was ever dropped" in ok(filled, "usage", "-a", "other", "--drops").stdout


# ----------------------------------------------------------------------------- on Redis too


def test_browse_on_redis(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = url_for(request, "redis", tmp_path)
    publish(url, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer"), "x.bin": BINARY})
    assert [r["skill"] for r in as_json(url, "ls", "-s", "shared:bot")] == ["reviewer"]
    assert ok(url, "cat", "reviewer/x.bin", "-s", "shared:bot").stdout_bytes == BINARY
    assert as_json(url, "ls", "--agent", "bot")[0]["scope"] == "shared:bot"


def test_table_rows_end_with_their_last_cell(filled: str) -> None:
    """No row is padded with spaces to the table's width (outside testing, every `ls` and
    `history` row ended in a run of them)."""
    for args in (
        ("ls",),
        ("ls", "--scope", "shared:bot"),
        ("history", "reviewer", "-s", "shared:bot"),
    ):
        lines = ok(filled, *args, COLUMNS="200").stdout.splitlines()
        assert len(lines) > 1 and [line for line in lines if line != line.rstrip()] == [], args
