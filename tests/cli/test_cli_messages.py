"""Every `skillfs` command that writes takes `--message`/`-m` and the message reaches the
store's history and audit; `skillfs mv` (store.edits.rename); `import --policy`
(docs/cli.md)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import skillfs
from skillfs import Scope
from skillfs.cli.app import app
from skillfs.governance.edits import ImportPolicy
from tests.cli_helpers import as_json, error_line, ok, publish, run, skill_md
from tests.helpers import write_legacy
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
S = ("-s", str(SHARED))

#: The commands that write a version: each takes --message, and the scenario below runs each.
WRITES = {
    "edit", "rm", "rollback", "mv", "import", "disable", "enable", "stage", "widen", "promote",
    "abort", "archive", "restore", "curate", "drafts approve", "drafts reject", "drafts split",
    "review-rule", "label set", "label rm", "profiles",
}  # fmt: skip
#: The commands that write no version of their own, and why they need no --message.
NO_VERSIONS = {
    **dict.fromkeys(
        ["ls", "cat", "history", "diff", "usage", "prompt", "watch", "audit", "validate"],
        "reads only",
    ),
    "drafts ls": "reads only",
    "check": "reads only",
    "check-names": "reads only",
    "drafts show": "reads only",
    "label ls": "reads only",
    "export": "writes local files only",
    "gc": "removes unreferenced blobs and expired history: no version to say why in",
    "drop-usage": "forgets usage counters, no version; its --message is the drop's reason",
    "serve": "writes what its clients send, each with their own message",
    "mcp": "writes what the host's model sends, each with its own message",
    "run": "adds the example skills once, with a message of its own (EXAMPLES_MESSAGE)",
}


def _commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every command of the app (typer's own click), a sub-app's as `drafts approve`."""
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


def test_every_command_that_writes_takes_a_message() -> None:
    commands = dict(_commands(typer.main.get_command(app)))
    unsorted = commands.keys() - WRITES - NO_VERSIONS.keys()
    assert not unsorted, (
        f"new commands {sorted(unsorted)}: a command that writes a version takes MessageOption "
        "(skillfs/cli/common.py) and goes in WRITES (and the scenario below); one that does "
        "not goes in NO_VERSIONS with why"
    )
    assert not (WRITES | NO_VERSIONS.keys()) - commands.keys(), "a listed command is gone"
    for name in sorted(WRITES):
        opts = {o for p in commands[name].params for o in p.opts}
        assert {"--message", "-m"} <= opts, f"`skillfs {name}` writes but takes no --message"


@pytest.fixture(params=["sqlite", "grpc"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = url_for(request, request.param, tmp_path)
    skillfs.open_store(url).close()
    return url


def _skill_dir(root: Path, name: str, body: str = "# Steps\n\n1. one\n") -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "SKILL.md").write_bytes(skill_md(name, body))
    (path / "notes.md").write_bytes(b"notes\n")
    return path


def test_every_write_keeps_its_message(url: str, tmp_path: Path) -> None:
    source = tmp_path / "skills"
    for name in ("alpha", "beta", "gamma", "delta", "eps"):
        _skill_dir(source, name)
    editor = tmp_path / "ed.sh"
    editor.write_text("#!/bin/sh\nprintf '2. two\\n' >> \"$1\"\n")
    editor.chmod(0o755)
    ran: set[str] = set()

    def write(name: str, *args: str, **env: str) -> Any:
        ran.add(name)
        return ok(url, *name.split(), *args, *S, "-m", f"why {name}", **env)

    write("import", str(source))
    write("edit", "alpha/SKILL.md", EDITOR=str(editor))
    write("rm", "beta", "--yes")
    write("rollback", "beta", "--to", "1")
    write("mv", "gamma", "gamma2")
    write("disable", "delta")
    write("enable", "delta")
    write("label set", "alpha", "stable")
    write("label rm", "alpha", "stable")
    staged = _skill_dir(tmp_path / "next", "eps", "# Steps\n\n1. better\n")
    write("stage", str(staged), "--user", "alice")
    write("widen", "eps", "--user", "bob")
    write("promote", "eps")
    ok(url, "stage", str(staged), *S, "--fraction", "0.5")
    write("abort", "eps")
    with skillfs.open_store(url) as store:
        store.drafts.propose(SHARED, "alpha", {"SKILL.md": skill_md("alpha", "# Better\n")})
        store.drafts.propose(SHARED, "beta", {"SKILL.md": skill_md("beta", "# No\n")})
        write_legacy(store, "_drafts", {"old/SKILL.md": skill_md("old")})
    write("drafts approve", "alpha")
    write("drafts reject", "beta")
    write("drafts split")
    write("archive", "delta")
    write("restore", "delta")
    write("review-rule", "on")
    ok(url, "review-rule", "off", *S)
    write("profiles", "--set", "claude-code")
    ran.add("curate")  # a domain, not a scope: no -s
    ok(url, "curate", AGENT, "--apply", "--stale-after", "0.01s", "--archive-after", "0.01s",
       "-m", "why curate")  # fmt: skip
    assert ran == WRITES, "run every command that writes here"

    entries = as_json(url, "audit", "--agent", AGENT, "--limit", "1000")
    messages = {e["message"] for e in entries}
    for name in sorted(WRITES):
        assert any(m.startswith(f"why {name}") for m in messages), (name, sorted(messages))
    # the same messages in each skill's history, e.g.:
    rows = as_json(url, "history", "gamma2", *S)
    assert rows[-1]["message"] == "why mv"
    assert as_json(url, "history", "gamma", *S)[0]["message"] == "why mv"  # its tombstone
    curated = [e for e in entries if e["message"].startswith("why curate")]
    assert curated and all(" — curation: idle" in e["message"] for e in curated)


def test_reason_is_the_same_option_as_message(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    publish(url, str(SHARED), "a", {"SKILL.md": skill_md("a")})
    ok(url, "disable", "a", *S, "--reason", "broken")
    assert as_json(url, "ls", *S)[0]["disabled_reason"] == "broken"
    assert as_json(url, "history", "a", *S)[0]["message"] == "broken"
    ok(url, "enable", "a", *S)
    ok(url, "disable", "a", *S, "-m", "still broken")
    assert as_json(url, "ls", *S)[0]["disabled_reason"] == "still broken"


# ------------------------------------------------------------------------------------ mv


@pytest.fixture
def sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    files = {
        "SKILL.md": skill_md("reviewer"),
        "scripts/run.sh": skillfs.File(b"#!/bin/sh\necho hi\n", mode=0o750),
    }
    publish(url, str(SHARED), "reviewer", files)
    publish(url, str(SHARED), "other", {"SKILL.md": skill_md("other")})
    return url


def test_mv_renames_and_skill_md_follows(sqlite: str) -> None:
    result = ok(sqlite, "mv", "reviewer", "code-review", *S, "-m", "clearer name")
    assert f"renamed {SHARED}/reviewer to {SHARED}/code-review: now version 1" in result.stdout
    assert [r["skill"] for r in as_json(sqlite, "ls", *S)] == ["code-review", "other"]
    text = ok(sqlite, "cat", "code-review/SKILL.md", *S).stdout
    assert "name: code-review\n" in text and "name: reviewer" not in text
    with skillfs.open_store(sqlite) as store:
        m = store.manifest(SHARED, "code-review")
        assert m.files["scripts/run.sh"].mode == 0o750  # the other files as they were
        assert store.read(SHARED, "code-review", "scripts/run.sh") == b"#!/bin/sh\necho hi\n"
    # the new name starts its history; the old one keeps its own, ended by the rename
    assert [
        (r["version"], r["message"]) for r in as_json(sqlite, "history", "code-review", *S)
    ] == [(1, "clearer name")]
    old = as_json(sqlite, "history", "reviewer", *S)
    assert [(r["version"], r["deleted"], r["message"]) for r in old] == [
        (2, True, "clearer name"),
        (1, False, None),
    ]
    assert "reviewer" in ok(sqlite, "ls", *S, "--deleted").stdout  # rollback brings it back


def test_mv_into_another_scope_and_as_json(sqlite: str) -> None:
    data = as_json(sqlite, "mv", "other", "mine", *S, "--into", f"user:{AGENT}/alice")
    assert data["into"] == f"user:{AGENT}/alice" and data["new_name"] == "mine"
    assert data["version"] == 1 and data["revision"].count(":") == 1
    alice = ["mine"]
    assert [r["skill"] for r in as_json(sqlite, "ls", "-s", f"user:{AGENT}/alice")] == alice
    assert [r["skill"] for r in as_json(sqlite, "ls", *S)] == ["reviewer"]


def test_mv_onto_an_existing_skill_writes_nothing(sqlite: str) -> None:
    line = error_line(run(sqlite, "mv", "reviewer", "other", *S, "-m", "merge them"))
    assert line == (
        f"error: {SHARED}/other already holds a skill (version 1): renaming {SHARED}/reviewer "
        "onto it would overwrite it; nothing was written: pick another name, or delete, "
        "archive or rename other first"
    )
    with skillfs.open_store(sqlite) as store:
        assert store.skills(SHARED) == ["other", "reviewer"]
        assert [m.version for m in store.history(SHARED, "reviewer")] == [1]
        assert [m.version for m in store.history(SHARED, "other")] == [1]
        assert b"name: other" in store.read(SHARED, "other", "SKILL.md")


def test_mv_refusals(sqlite: str) -> None:
    assert "invalid" in error_line(run(sqlite, "mv", "reviewer", "_hidden", *S), 2).lower()
    assert "give a skill, not a file" in error_line(
        run(sqlite, "mv", "reviewer/SKILL.md", "x", *S), 2
    )
    line = error_line(run(sqlite, "mv", "reviewer", "x", *S, "--version", "7"))
    assert "you expected version 7, now at version 1" in line
    assert "does not exist" in error_line(run(sqlite, "mv", "nope", "x", *S))
    ok(sqlite, "disable", "reviewer", *S, "-m", "broken")
    assert "disabled" in error_line(run(sqlite, "mv", "reviewer", "x", *S))
    with skillfs.open_store(sqlite) as store:
        assert store.skills(SHARED) == ["other", "reviewer"]


# ------------------------------------------------------------------------- import --policy


def test_reimport_updates_its_own_and_refuses_another_operators(url: str, tmp_path: Path) -> None:
    """Issue 30: after operator B edited release-notes, importing the examples again put the
    old text back. A re-import updates what it wrote, refuses (naming B's version) what B
    changed, writes nothing on --dry-run or a refusal; --policy keep and --replace decide."""
    source = tmp_path / "examples"
    for name in ("release-notes", "triage"):
        _skill_dir(source, name)
    first = as_json(url, "import", str(source), *S)
    assert first["source"] == str(source.resolve()) and first["policy"] == "update"
    with skillfs.open_store(url, actor="operator-b") as store:
        edited = store.publish(SHARED, "release-notes", {"SKILL.md": skill_md(
            "release-notes", "B's rewrite\n")}).version  # fmt: skip
        b = store.manifest(SHARED, "release-notes").actor  # over grpc://: the token's name
        before = store.revision(AGENT)
    _skill_dir(source, "triage", "# Steps\n\n1. one\n2. two\n")  # the source moved on too
    _skill_dir(source, "fresh")

    dry = ok(url, "import", str(source), *S, "--dry-run").stdout
    assert "dry run: nothing written" in dry
    assert "1 created, 1 updated, 0 unchanged, 1 refused" in dry
    assert f"refused   release-notes (version {edited} by {b})" in dry
    as_dry = as_json(url, "import", str(source), *S, "--dry-run")
    statuses = {r["skill"]: (r["status"], r["version"]) for r in as_dry["skills"]}
    assert statuses == {
        "release-notes": ("refused", edited), "triage": ("updated", 1), "fresh": ("created", None)
    }  # fmt: skip
    line = error_line(run(url, "import", str(source), *S))
    assert f"release-notes (version {edited} by {b})" in line and "nothing was written" in line
    with skillfs.open_store(url) as store:
        assert store.revision(AGENT) == before  # neither the dry run nor the refusal wrote
        assert store.skills(SHARED) == ["release-notes", "triage"]

    kept = ok(url, "import", str(source), *S, "--policy", "keep", "-m", "new ones").stdout
    assert "1 created, 1 updated, 0 unchanged, 1 kept" in kept
    assert f"kept release-notes: version {edited} by {b}" in kept
    with skillfs.open_store(url) as store:
        assert b"B's rewrite" in store.read(SHARED, "release-notes", "SKILL.md")
        assert store.manifest(SHARED, "fresh").message == "new ones"

    usage = error_line(run(url, "import", str(source), *S, "--replace", "--policy", "keep"), 2)
    assert "--replace is --policy replace" in usage
    replaced = ok(url, "import", str(source), *S, "--replace").stdout
    assert "0 created, 1 updated, 2 unchanged" in replaced
    with skillfs.open_store(url) as store:
        assert b"B's rewrite" not in store.read(SHARED, "release-notes", "SKILL.md")
    # another path holding the same skills is another source, unless --source names it
    copy = tmp_path / "checkout"
    shutil.copytree(source, copy)
    _skill_dir(copy, "fresh", "# Steps\n\n1. changed\n")
    assert "refused" in ok(url, "import", str(copy), *S, "--dry-run").stdout
    named = as_json(url, "import", str(copy), *S, "--source", str(source.resolve()))
    assert {r["skill"]: r["status"] for r in named["skills"]}["fresh"] == "updated"
    usage = error_line(run(url, "import", str(source), *S, "--policy", "x"), 2)
    assert "'x' is not one of 'update', 'keep', 'replace'" in usage


def test_import_help_names_the_policies_and_the_default() -> None:
    result = run("memory://", "import", "--help")
    text = " ".join(result.stdout.split())
    for policy in ImportPolicy:
        assert f"{policy.value}:" in text
    assert "(the default" in text
