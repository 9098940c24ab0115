"""`skillfs import` reads regular files only: a link out of the directory (an operator's SSH
key), a FIFO (blocks forever) and a link to /dev/zero (fills memory) are skipped with a
warning; `--follow-symlinks` reads links to regular files inside the imported directory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path

import pytest

import skillfs
from tests.cli_helpers import REPO, command_line, environment, skill_md


def _import(url: str, directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`skillfs import --json` as a child process held to 1 GiB of memory and 60 s, so the
    failures this file guards against (reading /dev/zero, opening a FIFO) end the test."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        command_line(
            "import", str(directory), "-s", "shared:bot", "--json", "--store", url, *options
        ),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment(),
        timeout=60,
        preexec_fn=limit,
    )


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    """skills/tricky: a SKILL.md, a regular reference, and the hazards."""
    root = tmp_path / "skills" / "tricky"
    (root / "references").mkdir(parents=True)
    (root / "SKILL.md").write_bytes(skill_md("tricky"))
    (root / "references" / "style.md").write_text("# Style\n")
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (root / "references" / "notes.md").symlink_to(secret)
    os.mkfifo(root / "references" / "pipe")
    (root / "assets").mkdir()
    (root / "assets" / "zero.bin").symlink_to("/dev/zero")
    (root / "references" / "same.md").symlink_to("style.md")  # stays inside
    (root / "linked").symlink_to(tmp_path / "home")  # a directory: never followed
    return root


def _stored(url: str) -> dict[str, bytes]:
    with skillfs.open_store(url) as store:
        m = store.manifest(skillfs.Scope.shared("bot"), "tricky")
        return {p: store.read(skillfs.Scope.shared("bot"), "tricky", p) for p in m.files}


def test_import_skips_what_is_not_a_regular_file(skill: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    result = _import(url, skill.parent)
    assert result.returncode == 0, result.stderr
    assert sorted(_stored(url)) == ["SKILL.md", "references/style.md"]
    skipped = {s["path"]: s["reason"] for s in json.loads(result.stdout)["skipped"]}
    assert skipped.keys() == {
        "assets/zero.bin",
        "linked",
        "references/notes.md",
        "references/pipe",
        "references/same.md",
    }
    assert skipped["references/pipe"] == "a named pipe (FIFO), not a regular file"
    assert skipped["references/notes.md"].startswith("a symbolic link (to ")
    assert "--follow-symlinks reads links inside DIRECTORY" in skipped["references/notes.md"]
    warning = "warning: skipped tricky/references/notes.md: a symbolic link (to "
    assert warning in result.stderr and "Traceback" not in result.stderr


def test_follow_symlinks_reads_links_inside_the_directory_only(skill: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    result = _import(url, skill.parent, "--follow-symlinks")
    assert result.returncode == 0, result.stderr
    stored = _stored(url)
    assert sorted(stored) == ["SKILL.md", "references/same.md", "references/style.md"]
    assert stored["references/same.md"] == b"# Style\n"
    skipped = {s["path"]: s["reason"] for s in json.loads(result.stdout)["skipped"]}
    assert "outside the imported directory" in skipped["references/notes.md"]
    assert (
        skipped["assets/zero.bin"] == "a symbolic link to /dev/zero, outside the imported directory"
    )
    assert "not a regular file" in skipped["references/pipe"]


def test_a_directory_without_skill_md_is_reported_not_dropped(tmp_path: Path) -> None:
    """Outside testing: `lower/skill.md` (a name skills-ref accepts) and a directory with no
    SKILL.md were left out without a word; `skillfs validate` reports both."""
    root = tmp_path / "skills"
    (root / "good").mkdir(parents=True)
    (root / "good" / "SKILL.md").write_bytes(skill_md("good"))
    (root / "lower").mkdir()
    (root / "lower" / "skill.md").write_bytes(skill_md("lower"))
    (root / "empty" / "references").mkdir(parents=True)
    (root / "empty" / "references" / "a.md").write_text("a\n")
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    result = _import(url, root)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [s["skill"] for s in report["skills"]] == ["good"]
    assert report["skipped"] == [
        {
            "skill": "empty",
            "path": "",
            "reason": "skill directory 'empty' has no SKILL.md; not imported",
        },
        {
            "skill": "lower",
            "path": "",
            "reason": "skill directory 'lower' has no SKILL.md (found 'skill.md': rename it "
            "to SKILL.md); not imported",
        },
    ]
    assert "warning: skipped lower/: skill directory 'lower' has no SKILL.md" in result.stderr


def test_a_file_name_that_is_not_utf8_is_one_error_line(tmp_path: Path) -> None:
    root = tmp_path / "skills" / "s"
    root.mkdir(parents=True)
    (root / "SKILL.md").write_bytes(skill_md("s"))
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:  # a Latin-1 file name
        f.write(b"x")
    result = _import(f"sqlite:///{tmp_path / 'skills.db'}", root.parent)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "caf\\xe9.txt': file path" in result.stderr
    assert "not valid UTF-8 text" in result.stderr and "rename the file" in result.stderr
