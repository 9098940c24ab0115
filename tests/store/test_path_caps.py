"""The path caps (issue 28 §2, docs/security.md): a new file path is at most 1,024 UTF-8
bytes and 32 segments, refused at every surface by the one rule (`check_new_path`); a path
stored before the caps stays readable, what writes skills to disk skips its skill with one
warning, and `skillfs check` lists it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import skillfs
from skillfs import Scope, Skills
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument, InvalidPath
from skillfs.fs import SkillFileSystem
from skillfs.model.names import MAX_PATH_BYTES, MAX_PATH_DEPTH
from tests import cli_helpers
from tests.helpers import skill_md

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
LONG = "references/" + "a" * 200 + "/" + "/".join(["b" * 250] * 4)  # 1,215 bytes
DEEP = "/".join(["d"] * MAX_PATH_DEPTH) + "/f.md"  # 33 segments
HUGE = "/".join(["x" * 250] * 17)  # 4,266 bytes: past Linux's PATH_MAX under any root


def test_the_caps_themselves() -> None:
    longest = "/".join(["p" * 250] * 5)[: MAX_PATH_BYTES - 3] + ".md"
    assert len(longest.encode()) == MAX_PATH_BYTES
    deepest = "/".join(["d"] * (MAX_PATH_DEPTH - 1)) + "/f.md"
    for ok in (longest, deepest, "é" * 126 + ".md"):
        assert skillfs.model.names.check_new_path(ok) == ok
    assert len(LONG.encode()) > MAX_PATH_BYTES and DEEP.count("/") + 1 > MAX_PATH_DEPTH
    with pytest.raises(InvalidPath, match=r"1,025 bytes long.*at most 1,024 bytes"):
        skillfs.model.names.check_new_path(longest + "x")


def test_publish_and_propose_refuse_a_path_over_the_caps(store: skillfs.Store) -> None:
    md = skill_md("s")
    assert store.publish(SHARED, "s", {"SKILL.md": md, DEEP[2:]: b"ok"}).versions == {"s": 1}
    with pytest.raises(InvalidPath, match=r"1,215 bytes long in UTF-8; a path inside a skill"):
        store.publish(SHARED, "s", {"SKILL.md": md, LONG: b"x"})
    with pytest.raises(InvalidPath, match=r"33 segments deep.*fewer directories"):
        store.publish(SHARED, "s", {"SKILL.md": md, DEEP: b"x"})
    with pytest.raises(InvalidPath, match="bytes long in UTF-8"):
        store.drafts.propose(SHARED, "s", {"SKILL.md": md, LONG: b"x"})
    with pytest.raises(InvalidPath, match="segments deep"):
        store.edits.edit_file(SHARED, "s", DEEP, b"x", base=None)
    assert store.manifest(SHARED, "s").version == 1


def _over_long(store: skillfs.Store, scope: Scope, skill: str, path: str) -> CommitOp:
    """The next version of `skill` with its SKILL.md stored again at `path`: what a store
    held before the caps (written with the engine itself, under every rule)."""
    m = store.manifest(scope, skill)
    files = {**m.files, path: m.files["SKILL.md"]}
    nxt = m.model_copy(update={"version": m.version + 1, "files": files, "commit_id": "old"})
    return CommitOp(scope=scope, manifest=nxt, expect=m.version)


def test_a_raw_grpc_commit_is_held_to_the_caps(store: skillfs.Store, store_url: str) -> None:
    if not store_url.startswith("grpc"):
        pytest.skip("a raw Commit reaches a skillfs server only over grpc://")
    store.publish(SHARED, "s", {"SKILL.md": skill_md("s")})
    for path, says in ((LONG, "bytes long in UTF-8"), (DEEP, "segments deep")):
        with pytest.raises(InvalidArgument, match=says):
            store.engine.commit(SHARED.domain, [_over_long(store, SHARED, "s", path)])
    assert store.manifest(SHARED, "s").version == 1


def test_fsspec_and_skill_manage_refuse_a_path_over_the_caps(
    store: skillfs.Store, store_url: str, tmp_path: Path
) -> None:
    store.publish(ALICE, "notes", {"SKILL.md": skill_md("notes")})
    fs = SkillFileSystem(
        store=store_url, agent_id="bot", user_id="alice", base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip
    with pytest.raises(InvalidPath, match="bytes long in UTF-8"):
        fs.pipe_file(f"skills/notes/{LONG}", b"x")
    with pytest.raises(InvalidPath, match="segments deep"):
        fs.pipe_file(f"skills/notes/{DEEP}", b"x")
    snap = Skills(store, "bot", "alice", skill_writes="live").snapshot()
    said = snap.call_tool(
        "skill_manage", {"action": "write_file", "name": "notes", "path": LONG, "content": "x"}
    )
    assert said.startswith("Error") and "at most 1,024 bytes" in said, said
    assert store.manifest(ALICE, "notes").version == 1


@pytest.fixture
def held(store: skillfs.Store, store_url: str) -> skillfs.Store:
    """A store whose skill `long` holds a path stored before the caps (4,266 bytes, as the
    outside testers stored), beside a skill `fine`."""
    if store_url.startswith("grpc"):
        pytest.skip("a server refuses the over-long path: it is written to the engine itself")
    for name in ("fine", "long"):
        store.publish(ALICE, name, {"SKILL.md": skill_md(name), "r.md": b"r\n"})
    store.engine.commit(ALICE.domain, [_over_long(store, ALICE, "long", HUGE)])
    return store


def test_a_path_stored_before_the_caps_is_read_and_edited(held: skillfs.Store) -> None:
    assert held.read(ALICE, "long", HUGE) == skill_md("long")
    held.edits.edit_file(ALICE, "long", "r.md", b"edited\n", base=b"r\n")  # carried, not refused
    assert HUGE in held.manifest(ALICE, "long").files
    snap = Skills(held, "bot", "alice").snapshot()
    assert snap.read_bytes("long", HUGE) == skill_md("long")
    held.edits.remove_files(ALICE, "long", [HUGE])  # and removed
    assert HUGE not in held.manifest(ALICE, "long").files


def test_materialize_skips_the_skill_it_cannot_write_with_one_warning(
    held: skillfs.Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skills = Skills(held, "bot", "alice")
    with caplog.at_level(logging.WARNING, logger="skillfs.runtime.materialize"):
        snap = skills.snapshot().materialize(tmp_path / "cache")
        skills.snapshot().materialize(tmp_path / "cache")  # still skipped: no second warning
    assert (tmp_path / "cache/user/fine/SKILL.md").read_bytes() == skill_md("fine")
    assert not (tmp_path / "cache/user/long").exists()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "'long'" in warned[0] and "bytes long in UTF-8" in warned[0]
    (problem,) = [p for p in snap.problems if p.skill == "long"]
    assert problem.findings[0].rule == "path-over-caps"


def test_export_and_fsspec_get_skip_the_skill_they_cannot_write(
    held: skillfs.Store, store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "out"
    result = cli_helpers.ok(store_url, "export", str(out), "--scope", str(ALICE), "--json")
    data: dict[str, Any] = json.loads(result.stdout)
    assert [r["skill"] for r in data["skills"]] == ["fine"]
    assert [r["skill"] for r in data["skipped"]] == ["long"]
    assert "skipped 'long'" in result.stderr or "skipped long" in result.stderr
    assert (out / "fine/SKILL.md").exists() and not (out / "long").exists()
    fs = SkillFileSystem(
        store=store_url, agent_id="bot", user_id="alice", base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="skillfs.fs.filesystem"):
        fs.get("skills/", str(tmp_path / "got") + "/", recursive=True)
    assert (tmp_path / "got/fine/SKILL.md").exists() and not (tmp_path / "got/long").exists()
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "'long'" in warned[0]


def test_check_lists_the_stored_paths_over_the_caps(held: skillfs.Store, store_url: str) -> None:
    data = cli_helpers.run(store_url, "check", "--json")
    assert data.exit_code == 1, (data.stdout, data.stderr)
    rows = json.loads(data.stdout)["paths_over_caps"]
    assert [(r["scope"], r["skill"], r["path"], r["bytes"]) for r in rows] == [
        (str(ALICE), "long", HUGE, len(HUGE))
    ]
    text = cli_helpers.run(store_url, "check", "--scope", str(SHARED))
    assert text.exit_code == 0 and "0 paths over the caps" in text.stdout
