"""`skillfs review-rule` and the two-person rule through the CLI (docs/cli.md,
docs/governance.md, "The two-person rule"), on SQLite with `$SKILLFS_ACTOR` as each person's
name (over grpc:// each person's token: tests/server/test_server_review.py)."""

from __future__ import annotations

from pathlib import Path

import skillfs
from skillfs import Scope
from tests.cli_helpers import as_json, error_line, ok, run
from tests.helpers import skill_files as files

SHARED = Scope.shared("support-bot")
S = ("-s", str(SHARED))


def test_cli_review_rule(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    with skillfs.open_store(url) as store:
        store.publish(SHARED, "triage", {**files("triage"), "notes.md": b"notes\n"})
    assert "does not require review" in ok(url, "review-rule", *S).stdout
    on = ok(url, "review-rule", "on", *S, "-m", "SOC 2", SKILLFS_ACTOR="ana").stdout
    assert "requires review" in on and "set by ana" in on and ": SOC 2" in on
    assert "requires review" in ok(url, "ls", *S).stdout
    usage = error_line(run(url, "review-rule", "on", *S), 1)
    assert "already requires review" in usage

    with skillfs.open_store(url) as store:
        before = store.revision("support-bot")
    source = tmp_path / "src" / "triage"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_bytes(files("triage", "imported")["SKILL.md"])
    for args in (("rm", "triage/notes.md", *S), ("import", str(source.parent), *S, "--replace")):
        line = error_line(run(url, *args, SKILLFS_ACTOR="bob"))
        assert "requires review (the two-person rule, turned on by ana)" in line, args
    with skillfs.open_store(url) as store:
        assert store.revision("support-bot") == before
        store.drafts.propose(
            SHARED, "triage", files("triage", "reviewed"), options=skillfs.WriteOptions(actor="bob")
        )
    line = error_line(run(url, "drafts", "approve", "triage", *S, SKILLFS_ACTOR="bob"))
    assert "'bob' wrote the draft of triage" in line and "nothing was written" in line
    ok(url, "drafts", "approve", "triage", *S, SKILLFS_ACTOR="ana")
    assert "reviewed" in ok(url, "cat", "triage/SKILL.md", *S).stdout
    ok(url, "disable", "triage", *S, "-r", "immediate", SKILLFS_ACTOR="bob")

    off = as_json(url, "review-rule", "off", *S, "-m", "audit over")
    assert (off["required"], off["message"]) == (False, "audit over")
    audit = as_json(url, "audit", *S)
    assert [e["action"] for e in audit if e["skill"] == "_settings/review"] == [
        "lift-review", "require-review"
    ]  # fmt: skip
    ok(url, "rm", "triage/references/r.md", *S, "-m", "live again", SKILLFS_ACTOR="bob")
