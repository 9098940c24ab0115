"""`skillfs drafts ls|show|approve|reject|split`, `skillfs archive`, `skillfs restore`
(docs/cli.md), on SQLite and through a skillfs server (grpc://)."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from skillfs import Scope
from tests.cli_helpers import as_json, error_line, ok, run
from tests.governance.test_side_entries import write_legacy
from tests.helpers import skill_files as files
from tests.helpers import skill_md
from tests.stores import url_for

ALICE = Scope.user("support-bot", "alice")
SHARED = Scope.shared("support-bot")
S = ("-s", "shared:support-bot")


@pytest.fixture(params=["sqlite", "grpc"])
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = url_for(request, request.param, tmp_path)
    skillfs.open_store(url).close()
    return url


def test_cli_drafts_review(cli_url: str) -> None:
    with skillfs.open_store(cli_url) as store:
        store.publish(SHARED, "a", files("a"))
        store.drafts.propose(
            SHARED,
            "a",
            {**files("a", "better"), "new.md": b"n"},
            options=skillfs.WriteOptions(message="tighter"),
        )
        store.drafts.propose(ALICE, "mine", files("mine"))
        store.drafts.propose(SHARED, "bad", {"SKILL.md": b"no frontmatter"})
        store.drafts.propose(SHARED, "late", files("late"))
        store.publish(SHARED, "late", files("late", "someone else"))
    rows = as_json(cli_url, "drafts", "ls", "-a", "support-bot")
    assert [(r["scope"], r["name"], r["version"], r["stale"]) for r in rows] == [
        ("shared:support-bot", "a", 1, False),
        ("shared:support-bot", "bad", 1, False),
        ("shared:support-bot", "late", 1, True),
        ("user:support-bot/alice", "mine", 1, False),
    ]
    assert rows[0]["message"] == "tighter" and rows[1]["findings"]
    table = ok(cli_url, "drafts", "ls", *S).stdout
    assert "tighter" in table and "stale" in table
    assert b"better" in run(cli_url, "cat", "_drafts/a/SKILL.md", *S).stdout_bytes
    assert "new.md" in ok(cli_url, "ls", *S, "_drafts/a").stdout
    shown = as_json(cli_url, "drafts", "show", "a", *S)
    assert shown["files"] == {"SKILL.md": "changed", "new.md": "added", "references/r.md": "same"}
    assert "changed" in ok(cli_url, "drafts", "show", "a", *S).stdout
    line = error_line(run(cli_url, "drafts", "show", "nope", *S))  # the drafts, not the skills
    assert line == "error: no draft 'nope' in shared:support-bot; drafts there: a, bad, late"
    line = error_line(run(cli_url, "drafts", "approve", "late", *S))
    assert "moved since its draft was proposed" in line
    assert "breaks the Agent Skills spec" in error_line(
        run(cli_url, "drafts", "approve", "bad", *S)
    )
    done = as_json(cli_url, "drafts", "approve", "a", *S, "--expected-version", "1")
    assert done["versions"] == {"_drafts/a": 2, "a": 2}
    ok(cli_url, "drafts", "approve", "bad", *S, "--force")
    ok(cli_url, "drafts", "reject", "late", *S, "-r", "superseded")
    assert "no draft 'zz'" in error_line(run(cli_url, "drafts", "reject", "zz", *S))
    assert [r["name"] for r in as_json(cli_url, "drafts", "ls", *S)] == []
    actions = [e["action"] for e in as_json(cli_url, "audit", *S, "--skill", "_drafts/late")]
    assert actions == ["reject", "propose"]
    assert "--market NAME" in error_line(run(cli_url, "drafts", "ls"), code=2)  # bad usage


def test_cli_archive_restore_and_split(cli_url: str) -> None:
    with skillfs.open_store(cli_url) as store:
        store.publish(SHARED, "a", files("a"))
        write_legacy(store, "_drafts", {"old/SKILL.md": skill_md("old")})
    assert "legacy" in ok(cli_url, "drafts", "ls", *S).stdout
    assert as_json(cli_url, "drafts", "split", *S)["versions"]["_drafts/old"] == 1
    assert "nothing to split" in ok(cli_url, "drafts", "split", *S).stdout
    done = as_json(cli_url, "archive", "a", *S, "-r", "unused")
    assert done["versions"] == {"a": 2, ".archive/a": 1}
    assert "a" not in [r["skill"] for r in as_json(cli_url, "ls", *S)]
    listed = ok(cli_url, "ls", *S).stdout
    assert ".archive: a (skillfs restore NAME" in listed and "_drafts: old" in listed
    assert "restored a" in ok(cli_url, "restore", "a", *S).stdout
    assert "a" in [r["skill"] for r in as_json(cli_url, "ls", *S)]
    assert "archived there: none" in error_line(run(cli_url, "restore", "a", *S))
    ok(cli_url, "archive", "a", *S)
    with skillfs.open_store(cli_url) as store:
        store.publish(SHARED, "a", files("a", "new"))
    assert "is live" in error_line(run(cli_url, "restore", "a", *S))
    assert "already holds an archived a" in error_line(run(cli_url, "archive", "a", *S))
    assert as_json(cli_url, "archive", "a", *S, "--replace")["versions"][".archive/a"] == 4
    assert "nothing to archive" in error_line(run(cli_url, "archive", "zz", *S))
