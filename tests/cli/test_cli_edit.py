"""`skillfs edit`, `rm`, `rollback`: scripted editors, spec checks, conflicts, resolutions."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

import skillfs
from skillfs.cli import common
from skillfs.errors import StoreUnavailable
from skillfs.util.text_merge import has_markers, merge3
from tests.cli_helpers import REPO, as_json, error_line, ok, process, publish, run, skill_md
from tests.stores import url_for

SCOPE = skillfs.Scope.shared("bot")

# A scripted $EDITOR: each run takes the next step of the JSON plan in $EDIT_PLAN, records the
# text it was shown, rewrites the file, and may make a concurrent change through the store API
# (another operator saving while this one edits).
EDITOR = r"""
import json, os, sys
from pathlib import Path
import skillfs

plan = Path(os.environ["EDIT_PLAN"])
steps = json.loads(plan.read_text())
step = steps.pop(0)
plan.write_text(json.dumps(steps))
path = Path(sys.argv[1])
text = path.read_text()
with open(str(plan) + ".seen", "a") as seen:
    seen.write(json.dumps(text) + "\n")
for old, new in step.get("replace", []):
    assert old in text, (old, text)
    text = text.replace(old, new)
if "write" in step:
    text = step["write"]
path.write_text(text)
change = step.get("concurrent")
if change:
    with skillfs.open_store(change["url"]) as store:
        scope = skillfs.Scope.parse(change["scope"])
        if change.get("delete"):
            store.delete(scope, change["skill"])
        elif change.get("create"):
            files = {p: new.encode() for p, new in change["files"].items()}
            store.publish(scope, change["skill"], files, expected_version=0)
        else:
            m = store.manifest(scope, change["skill"])
            files = {p: skillfs.File(store.read_entry(e), mode=e.mode) for p, e in m.files.items()}
            for p, new in change["files"].items():
                files[p] = new.encode()
            store.publish(scope, change["skill"], files, expected_version=m.version)
sys.exit(step.get("exit", 0))
"""


@pytest.fixture(autouse=True)
def edit_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`skillfs edit`'s temporary copies go below the test's own directory, never /tmp."""
    where = tmp_path / "edit-tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def _copies(edit_tmp: Path) -> list[Path]:
    return sorted(edit_tmp.glob("skillfs-edit-*"))


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    publish(url, "shared:bot", "reviewer", _files())
    return url


def _files(body: str = "# Steps\n\n1. one\n2. two\n3. three\n") -> dict[str, bytes | skillfs.File]:
    return {
        "SKILL.md": skill_md("reviewer", body),
        "references/style.md": b"# Style\n",
        "scripts/run.sh": skillfs.File(b"#!/bin/sh\necho hi\n", mode=0o750),
    }


class ScriptedEditor:
    """`skillfs edit` with $EDITOR running the steps given, one per time the editor opens."""

    def __init__(self, tmp_path: Path) -> None:
        self.script = tmp_path / "editor.py"
        self.script.write_text(EDITOR)
        self.plan = tmp_path / "plan.json"

    def __call__(
        self,
        url: str,
        target: str,
        *args: str,
        steps: list[Any],
        scope: str = "shared:bot",
        **kw: Any,
    ) -> Result:
        self.plan.write_text(json.dumps(steps))
        env = {
            "EDITOR": f"{sys.executable} {self.script}",
            "EDIT_PLAN": str(self.plan),
            "PYTHONPATH": str(REPO),
        }
        result = run(url, "edit", target, "-s", scope, *args, **kw, **env)
        assert json.loads(self.plan.read_text()) == [], "the editor ran fewer times than planned"
        return result

    def seen(self) -> list[str]:
        """The text the editor was shown, each time it opened."""
        lines = Path(f"{self.plan}.seen").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def editor(tmp_path: Path) -> ScriptedEditor:
    return ScriptedEditor(tmp_path)


def _read(url: str, path: str = "SKILL.md", skill: str = "reviewer") -> str:
    with skillfs.open_store(url) as store:
        return store.read(SCOPE, skill, path).decode()


def _version(url: str, skill: str = "reviewer") -> int:
    with skillfs.open_store(url) as store:
        return store.manifest(SCOPE, skill).version


def _kept_copy(result: Result) -> Path:
    """The path of the operator's edited copy named in the error line."""
    line = error_line(result)
    return Path(line.rsplit("your edit is kept in ", 1)[1])


# ---------------------------------------------------------------------------------- edit


def test_edit_copies_a_shared_skill_into_the_user_scope(url: str, editor: ScriptedEditor) -> None:
    alice = skillfs.Scope.user("bot", "alice")
    result = editor(
        url,
        "reviewer/SKILL.md",
        scope="user:bot/alice",
        steps=[{"replace": [["2. two", "2. two, for alice"]]}],
    )
    assert result.exit_code == 0, result.output
    assert editor.seen()[0] == _read(url)  # the editor opened on the shared text, no template
    assert (
        "creating alice's override of shared:bot/reviewer (shared version 1): saving copies "
        "it into user:bot/alice with your edit" in result.stdout
    )
    assert "saved user:bot/alice/reviewer/SKILL.md: version 1" in result.stdout
    assert "alice's override of shared version 1" in result.stdout
    with skillfs.open_store(url) as store:
        m = store.manifest(alice, "reviewer")
        assert m.version == 1 and len(store.history(alice, "reviewer")) == 1  # one commit
        assert sorted(m.files) == ["SKILL.md", "references/style.md", "scripts/run.sh"]
        assert m.files["scripts/run.sh"].mode == 0o750
        assert "2. two, for alice" in store.read(alice, "reviewer", "SKILL.md").decode()
    assert "2. two, for alice" not in _read(url) and _version(url) == 1  # shared untouched
    # the next edit is of alice's own override
    again = editor(url, "reviewer/SKILL.md", scope="user:bot/alice", steps=[{"write": "x"}])
    assert "creating alice's override" not in again.stdout


def test_an_override_created_meanwhile_is_a_conflict(url: str, editor: ScriptedEditor) -> None:
    theirs = skill_md("reviewer", "alice's own\n").decode()
    change = {
        "url": url,
        "scope": "user:bot/alice",
        "skill": "reviewer",
        "create": True,
        "files": {"SKILL.md": theirs},
    }
    steps = [{"replace": [["2. two", "2. mine"]], "concurrent": change}]
    result = editor(url, "reviewer/SKILL.md", scope="user:bot/alice", steps=steps)
    line = error_line(result)
    assert "not saved: reviewer changed since you read it" in line
    assert (
        "user:bot/alice/reviewer changed since you read the shared version 1 (no override "
        "yet): now version 1" in result.stdout
    )
    assert "--- shared version 1\n+++ version 1\n" in result.stdout
    with skillfs.open_store(url) as store:
        own = store.read(skillfs.Scope.user("bot", "alice"), "reviewer", "SKILL.md").decode()
    assert own == theirs  # theirs kept; yours in the kept copy
    assert "2. mine" in _kept_copy(result).read_text()


#: The template's placeholder instructions replaced (skillfs.spec.template refuses them).
OWN_INSTRUCTIONS = [
    ["1. First step.", "1. Do it."],
    ["2. Second step.\n", ""],
    ["Say when the agent should use this skill, and what it gets done.", "For fresh things."],
    ["- A request this skill handles, and what a good answer looks like.", "- Make it fresh."],
]


def test_a_new_skill_needs_a_description_of_its_own(
    url: str, editor: ScriptedEditor, edit_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = [{"replace": OWN_INSTRUCTIONS}]
    result = editor(url, "fresh/SKILL.md", steps=body)
    line = error_line(result)
    assert "not saved: fresh still has the template's placeholder description" in line
    assert "pass --force" in line
    assert "description is still the template's placeholder" in result.stdout
    assert "1. Do it." in _kept_copy(result).read_text()
    with skillfs.open_store(url) as store:
        assert store.manifests(SCOPE, ["fresh"]) == {}
    monkeypatch.setattr(common, "interactive", lambda: True)
    fixed = [*body, {"replace": [["What this skill does, and when", "Does fresh things, when"]]}]
    result = editor(url, "fresh/SKILL.md", steps=fixed, input="e\n")
    assert result.exit_code == 0, result.output
    assert "still has the template's placeholder description. [e]dit again" in result.stdout
    assert "description: Does fresh things, when the agent" in _read(url, skill="fresh")
    forced = editor(url, "other/SKILL.md", "--force", steps=body)
    assert forced.exit_code == 0, forced.output
    assert _version(url, "other") == 1


def test_a_new_skill_needs_instructions_of_its_own(url: str, editor: ScriptedEditor) -> None:
    """The template's placeholder instructions left in are refused as its description is
    (skillfs.spec.template, the console's New skill's check too), each line named."""
    described = [{"replace": [["What this skill does, and when", "Does fresh things, when"]]}]
    result = editor(url, "fresh/SKILL.md", steps=described)
    assert "not saved: fresh still has the template's placeholder text" in error_line(result)
    assert "line 12 is still the template's placeholder ('1. First step.')" in result.stdout
    with skillfs.open_store(url) as store:
        assert store.manifests(SCOPE, ["fresh"]) == {}


def test_temporary_copies_are_removed_unless_they_hold_unsaved_text(
    url: str, editor: ScriptedEditor, edit_tmp: Path, tmp_path: Path
) -> None:
    editor(url, "reviewer/SKILL.md", steps=[{"replace": [["2. two", "2. TWO"]]}])
    assert _copies(edit_tmp) == []  # saved
    editor(url, "reviewer/SKILL.md", steps=[{}])
    assert _copies(edit_tmp) == []  # nothing typed
    line = error_line(editor(url, "reviewer/SKILL.md", steps=[{"exit": 1}]))
    assert line.endswith("exited with status 1: nothing saved")  # nothing typed: no copy
    missing = run(url, "edit", "reviewer/SKILL.md", "-s", "shared:bot", EDITOR="no-such-editor")
    assert error_line(missing).endswith("not found: set $EDITOR; nothing saved")
    assert _copies(edit_tmp) == []
    unset = run(url, "edit", "reviewer/SKILL.md", "-s", "shared:bot", EDITOR="")
    assert error_line(unset) == (  # not vi, waiting for keys with no terminal to type them
        "error: no editor: $EDITOR is not set and there is no terminal for vi; set it, e.g. "
        "EDITOR=nano or EDITOR='code --wait'; nothing saved"
    )
    assert _copies(edit_tmp) == []
    typed = editor(url, "reviewer/SKILL.md", steps=[{"replace": [["1. one", "1. x"]], "exit": 1}])
    assert "exited with status 1: nothing saved; your edit is kept in" in error_line(typed)
    kept = _kept_copy(typed)
    assert _copies(edit_tmp) == [kept.parent] and "1. x" in kept.read_text()


def test_a_store_error_while_saving_names_the_kept_copy(
    url: str, editor: ScriptedEditor, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("store sqlite:///x is unavailable (test)")

    monkeypatch.setattr(skillfs.Store, "commit", down)  # where store.edits ends
    result = editor(url, "reviewer/SKILL.md", steps=[{"replace": [["2. two", "2. mine"]]}])
    line = error_line(result)
    assert line.startswith("error: store sqlite:///x is unavailable (test); nothing saved; ")
    assert "2. mine" in _kept_copy(result).read_text()


def test_edit_with_a_shell_script(url: str, tmp_path: Path) -> None:
    script = tmp_path / "ed.sh"
    script.write_text("#!/bin/sh\nsed -i 's/^2. two$/2. TWO/' \"$1\"\n")
    script.chmod(0o755)
    result = ok(url, "edit", "reviewer/SKILL.md", "-s", "shared:bot", EDITOR=str(script))
    assert "saved shared:bot/reviewer/SKILL.md: version 2" in result.stdout
    assert "2. TWO\n" in _read(url)
    with skillfs.open_store(url) as store:
        m = store.manifest(SCOPE, "reviewer")
        assert m.files["scripts/run.sh"].mode == 0o750  # the other files are kept as they were
        assert store.read(SCOPE, "reviewer", "references/style.md") == b"# Style\n"


def test_edit_without_changes_saves_nothing(url: str, editor: ScriptedEditor) -> None:
    result = editor(url, "reviewer/SKILL.md", steps=[{}])
    assert result.exit_code == 0 and "no changes: nothing saved" in result.stdout
    assert _version(url) == 1


def test_edit_a_script_keeps_its_mode(url: str, editor: ScriptedEditor) -> None:
    result = editor(url, "reviewer/scripts/run.sh", steps=[{"replace": [["hi", "hello"]]}])
    assert result.exit_code == 0, result.output
    with skillfs.open_store(url) as store:
        assert store.manifest(SCOPE, "reviewer").files["scripts/run.sh"].mode == 0o750
    assert _read(url, "scripts/run.sh") == "#!/bin/sh\necho hello\n"


def test_edit_creates_a_file_and_a_skill(url: str, editor: ScriptedEditor) -> None:
    result = editor(url, "reviewer/references/new.md", steps=[{"write": "new\n"}])
    assert result.exit_code == 0, result.output
    assert _read(url, "references/new.md") == "new\n"
    result = editor(
        url,
        "fresh/SKILL.md",
        steps=[{"replace": [["What this skill does", "Makes things"], *OWN_INSTRUCTIONS]}],
    )
    assert result.exit_code == 0, result.output
    assert editor.seen()[-1].startswith("---\nname: fresh\ndescription: What this skill does")
    assert _version(url, "fresh") == 1
    assert "Makes things, and when" in _read(url, skill="fresh")


def test_a_draft_is_checked_as_the_skill_it_holds(url: str, editor: ScriptedEditor) -> None:
    """`_drafts/<name>/SKILL.md` names `<name>`, as the store checks it (outside testing: the
    directory name `_drafts/<name>` was required, which no name can be, so only --force
    saved)."""
    with skillfs.open_store(url) as store:
        store.drafts.propose(SCOPE, "newx", {"SKILL.md": skill_md("newx", "Drafts things")})
    result = editor(url, "_drafts/newx/SKILL.md", steps=[{"replace": [["Drafts", "Edits"]]}])
    assert result.exit_code == 0, result.output
    with skillfs.open_store(url) as store:
        assert "Edits things" in store.read(SCOPE, "_drafts/newx", "SKILL.md").decode()


def test_spec_violation_rejected_then_forced(url: str, editor: ScriptedEditor) -> None:
    bad = [{"replace": [["name: reviewer", "name: Reviewer_2"]]}]
    result = editor(url, "reviewer/SKILL.md", steps=bad)
    line = error_line(result)
    assert "not saved: reviewer would break the Agent Skills spec (2 errors)" in line
    assert "reviewer: 2 errors\n" in result.stdout  # counts in words, none of "0 warnings"
    assert "pass --force" in line
    assert "name 'Reviewer_2' must use only lowercase" in result.stdout  # the findings shown
    assert _version(url) == 1
    kept = _kept_copy(result)
    assert "name: Reviewer_2" in kept.read_text()
    result = editor(url, "reviewer/SKILL.md", "--force", steps=bad)
    assert result.exit_code == 0, result.output
    assert "saved" in result.stdout and _version(url) == 2
    row = as_json(url, "ls", "-s", "shared:bot")[0]
    assert row["valid"] is False and row["usable"] is True  # stored with its findings


def test_spec_violation_interactive_fix(
    url: str, editor: ScriptedEditor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "interactive", lambda: True)
    steps = [
        {"replace": [["description: Does", "description:"], ["---\n\n#", "bad: 1\n---\n\n#"]]},
        {"replace": [["description:", "description: Fixed"], ["bad: 1\n", ""]]},
    ]
    result = editor(url, "reviewer/SKILL.md", steps=steps, input="x\ne\n")
    assert result.exit_code == 0, result.output
    assert "[e]dit again, [s]ave anyway, [a]bort" in result.stdout
    assert "field 'bad' is not an Agent Skills field" in result.stdout
    assert "description: Fixed reviewer things" in _read(url)
    seen = editor.seen()
    assert "bad: 1" in seen[1]  # the second run showed the operator's own edit


def test_spec_violation_interactive_save_anyway(
    url: str, editor: ScriptedEditor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "interactive", lambda: True)
    steps = [{"replace": [["name: reviewer", "name: other"]]}]
    result = editor(url, "reviewer/SKILL.md", steps=steps, input="s\n")
    assert result.exit_code == 0, result.output
    assert "name: other" in _read(url)


def test_binary_file_is_refused(url: str, editor: ScriptedEditor) -> None:
    publish(url, "shared:bot", "reviewer", {**_files(), "logo.png": b"\x89PNG\xff\x00"})
    result = run(url, "edit", "reviewer/logo.png", "-s", "shared:bot", EDITOR="true")
    assert "is binary, not UTF-8 text" in error_line(result)


def test_editor_failures(url: str, tmp_path: Path) -> None:
    missing = run(url, "edit", "reviewer/SKILL.md", "-s", "shared:bot", EDITOR="no-such-editor")
    assert "editor 'no-such-editor' not found: set $EDITOR" in error_line(missing)
    failed = run(url, "edit", "reviewer/SKILL.md", "-s", "shared:bot", EDITOR="false")
    assert "editor 'false' exited with status 1: nothing saved" in error_line(failed)
    assert _version(url) == 1


def test_edit_needs_a_file(url: str) -> None:
    assert "name a file" in error_line(run(url, "edit", "reviewer", "-s", "shared:bot"), 2)


# ------------------------------------------------------------------------------- conflicts


def _concurrent(url: str, **files: str) -> dict[str, Any]:
    return {"url": url, "scope": "shared:bot", "skill": "reviewer", "files": files}


def test_conflict_on_another_file_retries_by_itself(url: str, editor: ScriptedEditor) -> None:
    steps = [
        {
            "replace": [["2. two", "2. TWO"]],
            "concurrent": _concurrent(url, **{"references/style.md": "# Their style\n"}),
        }
    ]
    result = editor(url, "reviewer/SKILL.md", steps=steps)
    assert result.exit_code == 0, result.output
    assert "changed since you read version 1: now version 2" in result.stdout
    assert "modified  references/style.md" in result.stdout
    assert "SKILL.md itself is unchanged there: your edit is saved on top of version 2" in (
        result.stdout
    )
    assert _version(url) == 3
    assert "2. TWO" in _read(url) and _read(url, "references/style.md") == "# Their style\n"


def _theirs(url: str, old: str, new: str) -> dict[str, Any]:
    text = skill_md("reviewer", "# Steps\n\n1. one\n2. two\n3. three\n").decode()
    return _concurrent(url, **{"SKILL.md": text.replace(old, new)})


def test_conflict_reopen_merges_both_edits(url: str, editor: ScriptedEditor) -> None:
    steps = [
        {"replace": [["1. one", "1. ONE"]], "concurrent": _theirs(url, "3. three", "3. THREE")},
        {"replace": [["2. two", "2. two (checked)"]]},
    ]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", "reopen", steps=steps)
    assert result.exit_code == 0, result.output
    assert "merged their change with yours" in result.stdout
    seen = editor.seen()
    assert "1. ONE" in seen[1] and "3. THREE" in seen[1]  # reopened: both edits, no markers
    assert _read(url).endswith("1. ONE\n2. two (checked)\n3. THREE\n")
    assert _version(url) == 3


def test_conflict_merge_saves_a_clean_merge_by_itself(url: str, editor: ScriptedEditor) -> None:
    """--on-conflict merge is the store's merge policy (store.edits.edit_file): their change
    and yours on other lines are saved without reopening the editor."""
    steps = [
        {"replace": [["1. one", "1. ONE"]], "concurrent": _theirs(url, "3. three", "3. THREE")}
    ]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", "merge", "-m", "louder", steps=steps)
    assert result.exit_code == 0, result.output
    assert "changed since you read version 1: now version 2" in result.stdout
    assert "merged their change to SKILL.md with yours, on version 2" in result.stdout
    assert _read(url).endswith("1. ONE\n2. two\n3. THREE\n") and _version(url) == 3
    assert as_json(url, "history", "reviewer", "-s", "shared:bot")[0]["message"] == "louder"


@pytest.mark.parametrize("policy", ["reopen", "merge"])
def test_conflict_reopens_on_markers(url: str, editor: ScriptedEditor, policy: str) -> None:
    """Both changed the same lines: --on-conflict reopen (the CLI's merge) and merge (the
    store's, which writes nothing) reopen the editor on the same markers, and the resolved
    text is saved on their version."""
    resolved = skill_md("reviewer", "# Steps\n\n1. one\n2. both\n3. three\n").decode()
    steps = [
        {"replace": [["2. two", "2. mine"]], "concurrent": _theirs(url, "2. two", "2. theirs")},
        {"write": resolved},
    ]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", policy, steps=steps)
    assert result.exit_code == 0, result.output
    assert "both changed the same lines: resolve the conflict markers" in result.stdout
    assert (
        "<<<<<<< your edit\n2. mine\n=======\n2. theirs\n>>>>>>> version 2\n" in (editor.seen()[1])
    )
    assert _read(url) == resolved and _version(url) == 3


def test_conflict_markers_left_in_are_not_saved(url: str, editor: ScriptedEditor) -> None:
    steps = [
        {"replace": [["2. two", "2. mine"]], "concurrent": _theirs(url, "2. two", "2. theirs")},
        {},  # the operator closes the editor with the markers still there
    ]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", "reopen", steps=steps)
    assert "resolve the conflict markers" in error_line(result)
    assert has_markers(_kept_copy(result).read_text())
    assert "2. theirs" in _read(url) and _version(url) == 2


def test_conflict_overwrite(url: str, editor: ScriptedEditor) -> None:
    steps = [{"replace": [["2. two", "2. mine"]], "concurrent": _theirs(url, "1. one", "1. x")}]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", "overwrite", steps=steps)
    assert result.exit_code == 0, result.output
    assert "1. one\n2. mine\n" in _read(url) and _version(url) == 3


def test_conflict_without_a_person_aborts_keeping_the_edit(
    url: str, editor: ScriptedEditor
) -> None:
    steps = [{"replace": [["2. two", "2. mine"]], "concurrent": _theirs(url, "2. two", "2. x")}]
    result = editor(url, "reviewer/SKILL.md", steps=steps)
    line = error_line(result)
    assert "not saved: reviewer changed since you read it" in line
    assert "--on-conflict merge, reopen or overwrite" in line
    assert "2. mine" in _kept_copy(result).read_text()
    assert "modified  SKILL.md" in result.stdout
    assert "their change to SKILL.md:\n--- version 1\n+++ version 2\n" in result.stdout
    assert "-2. two\n+2. x\n" in result.stdout
    assert "2. x" in _read(url) and _version(url) == 2


def test_conflict_interactive_reopen(
    url: str, editor: ScriptedEditor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "interactive", lambda: True)
    steps = [
        {"replace": [["1. one", "1. ONE"]], "concurrent": _theirs(url, "3. three", "3. THREE")},
        {},
    ]
    result = editor(url, "reviewer/SKILL.md", steps=steps, input="r\n")
    assert result.exit_code == 0, result.output
    assert "SKILL.md changed there too. [r]eopen with your edit" in result.stdout
    assert _read(url).endswith("1. ONE\n2. two\n3. THREE\n")


def test_conflict_with_a_delete(url: str, editor: ScriptedEditor) -> None:
    steps = [
        {
            "replace": [["2. two", "2. mine"]],
            "concurrent": {"url": url, "scope": "shared:bot", "skill": "reviewer", "delete": True},
        }
    ]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", "overwrite", steps=steps)
    assert result.exit_code == 0, result.output
    assert "was deleted since you read version 1" in result.stdout
    assert "2. mine" in _read(url) and _version(url) == 3  # re-created after the tombstone
    with skillfs.open_store(url) as store:  # with the edited file alone, as the store edits
        assert sorted(store.manifest(SCOPE, "reviewer").files) == ["SKILL.md"]


def test_conflict_on_redis(
    request: pytest.FixtureRequest, tmp_path: Path, editor: ScriptedEditor
) -> None:
    url = url_for(request, "redis", tmp_path)
    publish(url, "shared:bot", "reviewer", _files())
    steps = [
        {"replace": [["1. one", "1. ONE"]], "concurrent": _theirs(url, "3. three", "3. THREE")},
        {},
    ]
    result = editor(url, "reviewer/SKILL.md", "--on-conflict", "reopen", steps=steps)
    assert result.exit_code == 0, result.output
    assert _read(url).endswith("1. ONE\n2. two\n3. THREE\n")
    assert [r["version"] for r in as_json(url, "history", "reviewer", "-s", "shared:bot")] == [
        3,
        2,
        1,
    ]


def test_edit_through_the_real_entry_point(url: str, tmp_path: Path) -> None:
    script = tmp_path / "ed.sh"
    script.write_text("#!/bin/sh\nprintf '4. four\\n' >> \"$1\"\n")
    script.chmod(0o755)
    proc = process(
        "edit",
        "reviewer/SKILL.md",
        "-s",
        "shared:bot",
        "--store",
        url,
        EDITOR=str(script),
        TMPDIR=str(tmp_path / "edit-tmp"),
    )
    assert proc.returncode == 0, proc.stderr
    assert _read(url).endswith("3. three\n4. four\n")


# ---------------------------------------------------------------------------------- merge3


@pytest.mark.parametrize(
    ("ours", "theirs", "merged", "clean"),
    [
        ("a\nB\nc\n", "a\nb\nC\n", "a\nB\nC\n", True),  # adjacent lines
        (
            "a\nB\nc\n",
            "a\nx\nb\nc\n",
            "a\n<<<<<<< your edit\nB\n=======\nx\nb\n>>>>>>> v2\nc\n",
            False,
        ),
        ("A\nb\nc\n", "A\nb\nc\n", "A\nb\nc\n", True),  # the same change on both sides
        ("a\nb\nc\nd\n", "z\na\nb\nc\n", "z\na\nb\nc\nd\n", True),  # appends on both ends
        ("a\nX\nc\n", "a\nY\nc\n", "a\n<<<<<<< your edit\nX\n=======\nY\n>>>>>>> v2\nc\n", False),
        (
            "a\nb\nc",
            "a\nb\nc\nd\n",
            "a\nb\n<<<<<<< your edit\nc\n=======\nc\nd\n>>>>>>> v2\n",
            False,
        ),
    ],
)
def test_merge3(ours: str, theirs: str, merged: str, clean: bool) -> None:
    assert merge3("a\nb\nc\n", ours, theirs, "v2") == (merged, clean)
    assert has_markers(merged) is not clean


# -------------------------------------------------------------------------------- rm


def test_rm_skill(url: str) -> None:
    result = ok(url, "rm", "reviewer", "-s", "shared:bot", "--yes")
    assert "removed shared:bot/reviewer: now version 2" in result.stdout
    assert as_json(url, "ls", "-s", "shared:bot") == []
    assert "does not exist" in error_line(run(url, "rm", "reviewer", "-s", "shared:bot", "-y"))


def test_rm_skill_without_a_terminal_needs_yes(url: str) -> None:
    line = error_line(run(url, "rm", "reviewer", "-s", "shared:bot"))
    assert line == (
        "error: not deleted: shared:bot/reviewer: no terminal to ask; pass --yes to go ahead "
        "without asking"
    )
    line = error_line(run(url, "rm", "reviewer", "-s", "shared:bot", "--force"))
    assert "pass --yes" in line  # --force only allows an off-spec result; it does not answer
    assert _version(url) == 1


def test_rm_names_the_version_it_removes(url: str) -> None:
    publish(url, "shared:bot", "reviewer", _files("v2\n"))
    line = error_line(run(url, "rm", "reviewer", "-s", "shared:bot", "--version", "1", "-y"))
    assert "you expected version 1, now at version 2" in line
    data = as_json(url, "rm", "reviewer", "-s", "shared:bot", "--version", "2", "--yes")
    assert data["version"] == 3 and data["skill"] == "reviewer" and data["path"] is None
    assert data["revision"].count(":") == 1 and len(data["commit_id"]) == 32


def test_rm_asks_a_person(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "interactive", lambda: True)
    line = error_line(run(url, "rm", "reviewer", "-s", "shared:bot", input="n\n"))
    assert line == "error: not deleted: shared:bot/reviewer"
    assert _version(url) == 1
    ok(url, "rm", "reviewer", "-s", "shared:bot", input="y\n")
    assert as_json(url, "ls", "-s", "shared:bot") == []
    ok(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "1")
    ok(url, "rm", "reviewer", "-s", "shared:bot", "--yes")  # asks nothing
    assert as_json(url, "ls", "-s", "shared:bot") == []


def test_rm_a_file_or_directory(url: str) -> None:
    ok(url, "rm", "reviewer/scripts", "-s", "shared:bot")
    ok(url, "rm", "reviewer/references/style.md", "-s", "shared:bot")
    assert [r["path"] for r in as_json(url, "ls", "-s", "shared:bot", "reviewer")] == ["SKILL.md"]
    line = error_line(run(url, "rm", "reviewer/nope", "-s", "shared:bot"))
    assert "has no file or directory 'nope'; files: SKILL.md" in line
    line = error_line(run(url, "rm", "reviewer/SKILL.md", "-s", "shared:bot", "--force"))
    assert "a skill needs at least one file; to delete it, delete it" in line


def test_rm_skill_md_needs_force(url: str) -> None:
    line = error_line(run(url, "rm", "reviewer/SKILL.md", "-s", "shared:bot"))
    assert "not removed: reviewer would break the Agent Skills spec" in line
    ok(url, "rm", "reviewer/SKILL.md", "-s", "shared:bot", "--force")
    assert as_json(url, "ls", "-s", "shared:bot")[0]["usable"] is False


# --------------------------------------------------------------------------- rollback


def test_rollback(url: str) -> None:
    publish(url, "shared:bot", "reviewer", _files("v2\n"))
    result = ok(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "1")
    assert "rolled shared:bot/reviewer back to version 1: now version 3" in result.stdout
    assert _read(url).endswith("3. three\n")
    ok(url, "rm", "reviewer", "-s", "shared:bot", "--yes")
    data = as_json(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "2")
    assert data["version"] == 5 and _read(url).endswith("v2\n")
    with skillfs.open_store(url) as store:
        assert store.manifest(SCOPE, "reviewer").files["scripts/run.sh"].mode == 0o750


def test_rollback_to_an_off_spec_version_needs_force(url: str) -> None:
    publish(url, "shared:bot", "reviewer", {"SKILL.md": b"---\nname: Bad_Name\n---\nx\n"})
    publish(url, "shared:bot", "reviewer", _files("v3\n"))
    line = error_line(run(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "2"))
    assert "not rolled back: version 2 of reviewer breaks the Agent Skills spec" in line
    assert "pass --force" in line and _version(url) == 3
    ok(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "2", "--force")
    assert _version(url) == 4 and "Bad_Name" in _read(url)


def test_rollback_errors(url: str) -> None:
    line = error_line(run(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "9"))
    assert "version 9 of shared:bot/reviewer is not kept" in line
    assert "does not exist" in error_line(
        run(url, "rollback", "x", "-s", "shared:bot", "--to", "1")
    )
    assert "Missing option '--to'" in error_line(run(url, "rollback", "x", "-s", "shared:bot"), 2)
    ok(url, "rm", "reviewer", "-s", "shared:bot", "--yes")
    line = error_line(run(url, "rollback", "reviewer", "-s", "shared:bot", "--to", "2"))
    assert line == "error: version 2 of shared:bot/reviewer is a deletion: pick another version"


def test_a_field_the_stores_profiles_accept_saves_without_force(
    editor: ScriptedEditor, url: str
) -> None:
    """`skillfs edit` checks a save under the store's host profiles, as its commit does: on a
    store that accepts Claude Code's fields one of them is no error to confirm; on a store
    of the spec alone it is, and the save is refused without --force (the edit kept)."""
    field = [["description: Does", "disable-model-invocation: true\ndescription: Does"]]
    refused = editor(url, "reviewer/SKILL.md", steps=[{"replace": field}])
    assert refused.exit_code == 1 and "is not an Agent Skills field" in refused.stdout
    assert "not saved" in refused.stderr
    assert _version(url) == 1
    saved = editor(url, "reviewer/SKILL.md", steps=[{"replace": field}],
                   SKILLFS_PROFILES="claude-code")  # fmt: skip
    assert saved.exit_code == 0, (saved.stdout, saved.stderr)
    assert _version(url) == 2 and "disable-model-invocation: true" in _read(url)
