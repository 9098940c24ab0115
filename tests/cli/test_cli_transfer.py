"""`skillfs import` and `skillfs export`: the shared corpus round-trips byte for byte with modes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import skillfs
from skillfs.engines.memory import MemoryEngine
from skillfs.errors import StoreUnavailable
from tests.cli_helpers import CORPUS, REPO, as_json, error_line, ok, process, run, skill_md
from tests.stores import url_for


@pytest.fixture(scope="module")
def collections() -> list[Path]:
    assert CORPUS.is_dir(), (
        f"the shared skill corpus is missing: expected {CORPUS} (shared/ beside the repository)"
    )
    found = sorted(d for d in CORPUS.iterdir() if d.is_dir())
    assert len(found) >= 2, f"expected the skill collections under {CORPUS}, found {found}"
    return found


def _tree(root: Path) -> dict[str, tuple[bytes, int, float]]:
    """Every file below root: bytes, permission bits, modification time."""
    tree = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            st = path.stat()
            tree[path.relative_to(root).as_posix()] = (
                path.read_bytes(),
                st.st_mode & 0o7777,
                round(st.st_mtime, 3),
            )
    return tree


def _skill(root: Path, name: str, *, content: bytes | None = None) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "SKILL.md").write_bytes(skill_md(name) if content is None else content)
    return path


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'skills.db'}"


# ----------------------------------------------------------------------- the corpus


@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_corpus_round_trip(
    engine: str, collections: list[Path], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = url_for(request, engine, tmp_path)
    total = 0
    for collection in collections:
        scope = f"market:{collection.name}"
        skills = sorted(p.parent for p in collection.rglob("SKILL.md"))
        assert skills, f"no skills in {collection}"
        report = as_json(url, "import", str(collection), "--scope", scope)
        assert [r["source"] for r in report["skills"]] == [str(s) for s in skills]
        assert {r["status"] for r in report["skills"]} == {"created"}
        assert len(report["commits"]) >= 1
        target = tmp_path / "export" / collection.name
        exported = as_json(url, "export", str(target), "--scope", scope)
        assert [r["skill"] for r in exported["skills"]] == sorted(s.name for s in skills)
        assert sorted(os.listdir(target)) == sorted(s.name for s in skills)
        for source in skills:
            assert _tree(target / source.name) == _tree(source), source
        total += len(skills)
        again = as_json(url, "import", str(collection), "--scope", scope)
        assert {r["status"] for r in again["skills"]} == {"unchanged"} and again["commits"] == []
    assert total == len(list(CORPUS.rglob("SKILL.md")))


def test_corpus_import_summary(collections: list[Path], url: str) -> None:
    result = ok(url, "import", str(collections[0]), "-s", "shared:bot", COLUMNS="200")
    n = len(list(collections[0].rglob("SKILL.md")))
    assert f"imported {n} skills into shared:bot in 1 commit" in result.stdout
    assert f"{n} created, 0 updated, 0 unchanged" in result.stdout
    rows = as_json(url, "ls", "-s", "shared:bot")
    flagged = [r for r in rows if r["errors"] or r["warnings"]]
    for r in flagged:
        assert r["skill"] in result.stdout
        for message in r["errors"] + r["warnings"]:
            assert message in result.stdout


# --------------------------------------------------------------------------------- import


def test_import_keeps_bytes_modes_and_findings(url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    good = _skill(src, "good")
    (good / "scripts").mkdir()
    (good / "scripts" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (good / "scripts" / "run.sh").chmod(0o750)
    (good / "secret.txt").write_bytes(b"\x00\xff")
    (good / "secret.txt").chmod(0o600)
    (good / "__pycache__").mkdir()
    (good / "__pycache__" / "x.pyc").write_bytes(b"junk")
    _skill(src / "group", "bad", content=skill_md("Bad_Name"))
    _skill(src / "_drafts", "draft")
    (src / "notes").mkdir()
    (src / "notes" / "README").write_text("not a skill")
    result = ok(url, "import", str(src), "-s", "user:bot/alice")
    assert "2 skills into user:bot/alice in 1 commit" in result.stdout
    assert "✗ bad" in result.stdout and "name 'Bad_Name' must use only lowercase" in result.stdout
    assert "1 with errors (stored;" in result.stdout
    files = as_json(url, "ls", "-s", "user:bot/alice", "good")
    assert {f["path"]: f["mode"] for f in files} == {
        "SKILL.md": "0644",
        "scripts/run.sh": "0750",
        "secret.txt": "0600",
    }
    assert ok(url, "cat", "good/secret.txt", "-s", "user:bot/alice").stdout_bytes == b"\x00\xff"
    assert [r["skill"] for r in as_json(url, "ls", "-s", "user:bot/alice")] == ["bad", "good"]


def test_import_reports_findings_under_the_stores_profiles(url: str, tmp_path: Path) -> None:
    """The report says what the store's commit finds: a Claude Code field is an error on a
    store of the spec alone and none on one that accepts Claude Code's profile."""
    text = skill_md("cc").decode().replace("description:", "argument-hint: <n>\ndescription:", 1)
    src = _skill(tmp_path, "cc", content=text.encode())
    spec = json.loads(run(url, "import", str(src), "-s", "shared:bot", "--json").stdout)
    assert [r["valid"] for r in spec["skills"]] == [False]
    claude = json.loads(
        run(url, "import", str(src), "-s", "shared:bot", "--json",
            SKILLFS_PROFILES="claude-code").stdout
    )  # fmt: skip
    assert [(r["valid"], r["errors"]) for r in claude["skills"]] == [(True, [])]


def test_import_a_single_skill_and_updates(url: str, tmp_path: Path) -> None:
    one = _skill(tmp_path, "one")
    report = as_json(url, "import", str(one), "-s", "shared:bot")
    assert [(r["skill"], r["status"], r["version"]) for r in report["skills"]] == [
        ("one", "created", 1)
    ]
    (one / "extra.md").write_text("more\n")
    report = as_json(url, "import", str(one), "-s", "shared:bot")
    assert [(r["status"], r["version"]) for r in report["skills"]] == [("updated", 2)]
    (one / "extra.md").chmod(0o755)  # a mode change alone is a change
    assert as_json(url, "import", str(one), "-s", "shared:bot")["skills"][0]["version"] == 3
    row = report["skills"][0]
    assert set(row) == {
        "skill",
        "source",
        "status",
        "version",
        "files",
        "size",
        "valid",
        "errors",
        "warnings",
    }
    commit = report["commits"][0]
    assert set(commit) == {"revision", "commit_id", "skills"} and commit["skills"] == ["one"]


def test_import_in_batches(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        _skill(tmp_path / "src", f"s{i}")
    report = as_json(url, "import", str(tmp_path / "src"), "-s", "shared:bot", "--batch", "2")
    assert [c["skills"] for c in report["commits"]] == [["s0", "s1"], ["s2", "s3"], ["s4"]]
    # A store's own limit per atomic commit caps the batches (etcd: 128 operations), less the
    # entry its name register takes (skillfs.store.name_register).
    monkeypatch.setattr(MemoryEngine, "max_ops", 4)
    memory = "memory://cli-batches"
    report = as_json(memory, "import", str(tmp_path / "src"), "-s", "shared:bot", "--batch", "50")
    assert [len(c["skills"]) for c in report["commits"]] == [3, 2]
    with skillfs.open_store(memory) as store:
        assert store.skills(skillfs.Scope.shared("bot")) == [f"s{i}" for i in range(5)]


def test_import_through_a_server_splits_by_its_stores_limit(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside (differential) testing: a grpc:// client did not know the limit of the store
    behind the server, so an import of 64 skills to an etcd-backed server (63 per commit)
    failed where a direct client split it. The server's Ping tells it."""
    for i in range(5):
        _skill(tmp_path / "src", f"s{i}")
    monkeypatch.setattr(MemoryEngine, "max_ops", 4)  # the server's store (in this process)
    url = url_for(request, "grpc", tmp_path)
    with skillfs.open_store(url) as store:
        assert store.max_ops == 3
    report = as_json(url, "import", str(tmp_path / "src"), "-s", "shared:bot", "--batch", "50")
    assert [len(c["skills"]) for c in report["commits"]] == [3, 2]


def test_import_bad_input_writes_nothing(url: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert "no skill in" in error_line(
        run(url, "import", str(tmp_path / "empty"), "-s", "shared:b")
    )
    missing = run(url, "import", str(tmp_path / "nope"), "-s", "shared:b")
    assert "does not exist" in error_line(missing, code=2)
    _skill(tmp_path / "dup" / "a", "same")
    _skill(tmp_path / "dup" / "b", "same")
    line = error_line(run(url, "import", str(tmp_path / "dup"), "-s", "shared:b"))
    assert "two skills are named 'same'" in line
    bad = _skill(tmp_path / "badpath", "ok")
    _skill(tmp_path / "badpath", "worse")
    (tmp_path / "badpath" / "worse" / "a\\b").write_text("backslash")
    line = error_line(run(url, "import", str(tmp_path / "badpath"), "-s", "shared:b"))
    assert "contains a backslash" in line
    assert bad.is_dir() and as_json(url, "ls") == []


def test_an_import_cut_short_says_what_it_committed(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches commit one by one: when one fails, the operator is told which skills the
    earlier ones committed, and that running the import again finishes it (outside testing:
    only the store's error was shown)."""
    for name in ("a", "b", "c", "d"):
        _skill(tmp_path / "src", name)
    commit = skillfs.Store.commit
    calls = []

    def down_at_the_second(self: skillfs.Store, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise StoreUnavailable("store x is unavailable; check that it is running")
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(skillfs.Store, "commit", down_at_the_second)
    result = run(url, "import", str(tmp_path / "src"), "-s", "shared:bot", "--batch", "2")
    assert error_line(result) == "error: store x is unavailable; check that it is running"
    warning = " ".join(result.stderr.split())
    assert (
        "warning: 2 skills of this import were committed to shared:bot before the failure"
        in (warning)
        and "run the same import again to finish it" in warning
    )
    monkeypatch.setattr(skillfs.Store, "commit", commit)
    again = ok(url, "import", str(tmp_path / "src"), "-s", "shared:bot", "--batch", "2").stdout
    assert "2 created, 0 updated, 2 unchanged" in again


# --------------------------------------------------------------------------------- export


def test_export_refuses_a_non_empty_directory(url: str, tmp_path: Path) -> None:
    ok(url, "import", str(_skill(tmp_path / "src", "one")), "-s", "shared:bot")
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    (target / "one").mkdir()
    (target / "one" / "stale.md").write_text("old")
    line = error_line(run(url, "export", str(target), "-s", "shared:bot"))
    assert line == (
        f"error: nothing exported: {target} is not empty and there is no terminal to ask; "
        "pass --yes to replace the exported skills' directories in it, or export into an "
        "empty directory"
    )
    assert (target / "one" / "stale.md").exists()
    no = error_line(run(url, "export", str(target), "-s", "shared:bot", "--force"), code=2)
    assert "No such option: --force" in no  # --force means only "allow off-spec"
    result = ok(url, "export", str(target), "-s", "shared:bot", "--yes")
    assert "exported 1 skill of shared:bot" in result.stdout
    assert sorted(os.listdir(target / "one")) == ["SKILL.md"]  # the skill's dir is replaced
    assert (target / "keep.txt").read_text() == "mine"  # the rest is left alone


def test_export_into_a_non_empty_directory_asks_a_person(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skillfs.cli import common

    monkeypatch.setattr(common, "interactive", lambda: True)
    ok(url, "import", str(_skill(tmp_path / "src", "one")), "-s", "shared:bot")
    target = tmp_path / "out"
    (target / "one").mkdir(parents=True)
    (target / "one" / "stale.md").write_text("old")
    line = error_line(run(url, "export", str(target), "-s", "shared:bot", input="n\n"))
    assert line == f"error: nothing exported: {target} is not empty"
    assert (target / "one" / "stale.md").exists()
    result = ok(url, "export", str(target), "-s", "shared:bot", input="y\n")
    assert "replace the exported skills' directories in it?" in result.stdout
    assert sorted(os.listdir(target / "one")) == ["SKILL.md"]


def test_an_export_that_fails_midway_leaves_the_directory_as_it_was(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every skill is written beside the directory's own, then moved in (outside testing: a
    failing third skill left the first two replaced, their local files gone)."""
    from skillfs.cli import export

    for name in ("a", "b", "c"):
        _skill(tmp_path / "src", name)
    ok(url, "import", str(tmp_path / "src"), "-s", "shared:bot")
    write = export._write_skill

    def disk_full_at_c(root: Path, *args: Any) -> None:
        if root.name == "c":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(root))
        write(root, *args)

    monkeypatch.setattr(export, "_write_skill", disk_full_at_c)
    target = tmp_path / "out"
    (target / "a").mkdir(parents=True)
    (target / "a" / "local.md").write_text("mine")
    line = error_line(run(url, "export", str(target), "-s", "shared:bot", "--yes"))
    assert line == "error: nothing exported: writing c failed (No space left on device)"
    assert sorted(os.listdir(target)) == ["a"] and os.listdir(target / "a") == ["local.md"]
    fresh = tmp_path / "fresh"
    error_line(run(url, "export", str(fresh), "-s", "shared:bot"))
    assert not fresh.exists()
    monkeypatch.setattr(export, "_write_skill", write)
    ok(url, "export", str(target), "-s", "shared:bot", "--yes")
    assert sorted(os.listdir(target)) == ["a", "b", "c"] and os.listdir(target / "a") == [
        "SKILL.md"
    ]


def test_export_some_skills(url: str, tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        _skill(tmp_path / "src", name)
    ok(url, "import", str(tmp_path / "src"), "-s", "shared:bot")
    data = as_json(
        url, "export", str(tmp_path / "out"), "-s", "shared:bot", "--skill", "a", "--skill", "c"
    )
    assert data == {
        "scope": "shared:bot",
        "directory": str(tmp_path / "out"),
        "skills": [
            {"skill": "a", "version": 1, "files": 1, "size": len(skill_md("a"))},
            {"skill": "c", "version": 1, "files": 1, "size": len(skill_md("c"))},
        ],
        "skipped": [],
    }
    line = error_line(run(url, "export", str(tmp_path / "o2"), "-s", "shared:bot", "--skill", "x"))
    assert "no skill 'x' in shared:bot; skills there: a, b, c" in line
    line = error_line(run(url, "export", str(tmp_path / "o3"), "-s", "shared:nope"))
    assert "agent 'nope' has no skills in" in line and "agents: bot" in line  # a typo: said
    assert not (tmp_path / "o3").exists()  # (outside testing: an empty backup, exit 0)
    assert as_json(url, "export", str(tmp_path / "o4"), "-s", "user:bot/zed")["skills"] == []


def test_export_leaves_out_drafts_and_archived_skills(url: str, tmp_path: Path) -> None:
    """Outside testing: export of a scope holding a draft or an archived skill failed
    ("No such file or directory: .../_drafts/new"): they are not the scope's skills."""
    for name in ("a", "b"):
        _skill(tmp_path / "src", name)
    ok(url, "import", str(tmp_path / "src"), "-s", "shared:bot")
    ok(url, "archive", "b", "-s", "shared:bot")
    with skillfs.open_store(url) as store:
        store.drafts.propose(skillfs.Scope.shared("bot"), "new", {"SKILL.md": skill_md("new")})
    data = as_json(url, "export", str(tmp_path / "out"), "-s", "shared:bot")
    assert [row["skill"] for row in data["skills"]] == ["a"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a"]


def test_import_and_ls_through_the_real_entry_point(url: str, tmp_path: Path) -> None:
    _skill(tmp_path / "src", "one")
    proc = process("import", str(tmp_path / "src"), "-s", "shared:bot", "--store", url)
    assert proc.returncode == 0, proc.stderr
    assert "imported 1 skill into shared:bot" in proc.stdout
    proc = process("ls", "-s", "shared:bot", "--json", "--store", url)
    assert [r["skill"] for r in json.loads(proc.stdout)] == ["one"]
    proc = process("ls", "-s", "shared:bot", "--store", "redis://127.0.0.1:1/0")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: store redis://127.0.0.1:1/0 is unavailable")
    proc = process("ls", "-s", "nope", "--store", url)
    assert proc.returncode == 2 and "invalid scope 'nope'" in proc.stderr
    for module in ("skillfs", "skillfs.cli"):  # outside testing: `-m skillfs.cli` ran nothing
        ran = subprocess.run(
            [sys.executable, "-m", module, "ls", "-s", "shared:bot", "--json", "--store", url],
            capture_output=True, text=True, cwd=REPO, timeout=120,
        )  # fmt: skip
        assert [r["skill"] for r in json.loads(ran.stdout)] == ["one"], (module, ran.stderr)


def test_a_skill_of_many_files_round_trips(url: str, tmp_path: Path) -> None:
    """Its file table is stored in chunks (docs/design.md §2, "File tables"): the import
    writes them, the export reads every file back."""
    src = _skill(tmp_path / "src", "wide")
    for i in range(400):
        (src / "references").mkdir(exist_ok=True)
        (src / "references" / f"n-{i:03d}.md").write_bytes(b"%d\n" % i)
    ok(url, "import", str(tmp_path / "src"), "-s", "shared:bot")
    ok(url, "export", str(tmp_path / "out"), "-s", "shared:bot")
    assert _tree(tmp_path / "out") == _tree(tmp_path / "src")
