"""`skillfs profiles` and `skillfs validate --scope` (docs/cli.md; docs/validation.md, "Host
profiles"): a scope's host profiles shown, named, cleared and audited, and used by the CLI's
own checks (`edit`, `import`, `validate`), on SQLite with `$SKILLFS_ACTOR` as the actor (over
grpc:// the admin grant: tests/governance/test_scope_profiles.py)."""

from __future__ import annotations

from pathlib import Path

import skillfs
from skillfs import Scope
from tests.cli_helpers import as_json, error_line, ok, run

ALICE = Scope.user("support-bot", "alice")
S = ("-s", str(ALICE))
DEPLOY = b"---\nname: deploy\ndescription: Deploys.\ndisable-model-invocation: true\n---\nDeploy.\n"


def test_cli_profiles(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    source = tmp_path / "src" / "deploy"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_bytes(DEPLOY)
    skillfs.open_store(url).close()
    shown = ok(url, "profiles", *S).stdout
    assert "accepts spec (the store's profiles: it names none)" in shown
    # under spec the CLI's own checks refuse the field, as the store would
    refused = run(url, "validate", str(source), *S)
    assert refused.exit_code == 1 and "skillfs profiles --set claude-code" in refused.stdout

    set_ = ok(url, "profiles", *S, "--set", "claude-code, saa", "-m", "Claude Code",
              SKILLFS_ACTOR="ana").stdout  # fmt: skip
    assert "accepts spec, claude-code, saa (its own setting)" in set_
    assert "changed by ana" in set_ and ": Claude Code" in set_
    report = as_json(url, "validate", str(source), *S)
    assert report[0]["valid"] and report[0]["errors"] == []
    ok(url, "import", str(source.parent), *S)
    assert "accepts spec, claude-code, saa (its own setting)" in ok(url, "ls", *S).stdout
    with skillfs.open_store(url) as store:
        assert store.manifest(ALICE, "deploy").errors == []

    line = error_line(run(url, "profiles", *S, "--set", "claud"))
    assert "unknown host profile 'claud': choose from spec, claude-code" in line
    assert "give --set NAMES or --clear" in error_line(
        run(url, "profiles", *S, "--set", "saa", "--clear"), 2
    )
    assert "--profile or --scope" in error_line(
        run(url, "validate", str(source), *S, "--profile", "saa"), 2
    )
    cleared = as_json(url, "profiles", *S, "--clear", "-m", "back to spec")
    assert (cleared["profiles"], cleared["own"], cleared["version"]) == (["spec"], False, 2)
    audit = as_json(url, "audit", *S)
    assert [e["action"] for e in audit if e["skill"] == "_settings/profiles"] == [
        "clear-profiles", "set-profiles"
    ]  # fmt: skip
