"""`FsspecDir`: any fsspec filesystem as a layer (memory://, a zip archive, a local directory):
precedence over and under the other layers, change detection by the listing's own keys, and a
step that reads nothing when nothing changed. Also the once-only warning for layers that do
not exist (issue 15)."""

from __future__ import annotations

import logging
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.implementations.zip import ZipFileSystem

import skillfs
from skillfs.model import Scope
from tests.runtime_helpers import md, memory_store, write_skill

SHARED = Scope.shared("bot")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the listings and file reads every fsspec filesystem class here makes."""
    counted: Counter[str] = Counter()
    for cls in (MemoryFileSystem, ZipFileSystem, LocalFileSystem):
        for method in ("find", "cat_file"):
            original = getattr(cls, method)

            def wrapper(
                self: object, *a: object, _o: object = original, _m: str = method, **k: object
            ) -> object:
                counted[_m] += 1
                return _o(self, *a, **k)  # type: ignore[operator]

            monkeypatch.setattr(cls, method, wrapper)
    return counted


@pytest.fixture
def memory_root() -> Iterator[str]:
    root = f"/skills-{uuid.uuid4().hex}"
    yield root
    fs = MemoryFileSystem()
    if fs.exists(root):
        fs.rm(root, recursive=True)


def put(root: str, skill: str, files: dict[str, bytes]) -> None:
    fs = MemoryFileSystem()
    for path, data in files.items():
        fs.pipe_file(f"{root}/{skill}/{path}", data)


def zip_of(path: Path, skills: dict[str, dict[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for skill, files in skills.items():
            for rel, data in files.items():
                zf.writestr(f"skills/{skill}/{rel}", data)
    return path


def test_memory_layer_precedence_and_change_detection(
    memory_root: str, calls: Counter[str]
) -> None:
    put(memory_root, "alpha", {"SKILL.md": md("alpha", "from memory"), "ref/a.md": b"a"})
    put(memory_root, "beta", {"SKILL.md": md("beta", "from memory")})
    put(memory_root, ".archive", {"SKILL.md": md("old")})
    store = memory_store()
    store.publish(SHARED, "beta", {"SKILL.md": md("beta", "shared wins")})
    layer = skillfs.FsspecDir(f"memory://{memory_root}", check_interval=0)
    with skillfs.Skills(store, "bot", "alice", [layer]) as skills:
        snap = skills.snapshot()
        assert [s.id for s in snap.skills] == ["alpha", "beta"]
        assert snap.skill("alpha").source.startswith("fsspec:")
        assert snap.skill("beta").description == "shared wins"  # a store scope is above it
        assert snap.read_bytes("alpha", "ref/a.md") == b"a"

        calls.clear()
        assert skills.snapshot() is snap  # a check that finds nothing changed reads no file
        assert calls["cat_file"] == 0 and calls["find"] == 1

        put(memory_root, "alpha", {"ref/a.md": b"changed"})
        calls.clear()
        after = skills.snapshot()
        assert after.read_bytes("alpha", "ref/a.md") == b"changed"
        assert calls["cat_file"] == 1  # only the file whose key changed
        assert snap.read_bytes("alpha", "ref/a.md") == b"a"  # the old snapshot is as it was (C4)


def test_a_step_between_checks_costs_no_fsspec_call(memory_root: str, calls: Counter[str]) -> None:
    put(memory_root, "alpha", {"SKILL.md": md("alpha")})
    layer = skillfs.FsspecDir(f"memory://{memory_root}", check_interval=3600)
    with skillfs.Skills(memory_store(), "bot", "alice", [layer]) as skills:
        first = skills.snapshot()
        calls.clear()
        for _ in range(5):
            assert skills.snapshot() is first
        assert sum(calls.values()) == 0


def test_zip_archive_layer_sees_a_rewritten_archive(tmp_path: Path, calls: Counter[str]) -> None:
    archive = zip_of(tmp_path / "team.zip", {"zipped": {"SKILL.md": md("zipped", "v1")}})
    layer = skillfs.FsspecDir(f"zip://skills::file://{archive}", name="team", check_interval=0)
    with skillfs.Skills(memory_store(), "bot", "alice", [layer]) as skills:
        assert skills.snapshot().skill("zipped").description == "v1"
        assert skills.snapshot().skill("zipped").source == "fsspec:team"
        time.sleep(0.01)
        zip_of(
            archive, {"zipped": {"SKILL.md": md("zipped", "v2")}, "more": {"SKILL.md": md("more")}}
        )
        snap = skills.snapshot()
        assert snap.skill("zipped").description == "v2"
        assert [s.id for s in snap.skills] == ["more", "zipped"]


def test_local_directory_through_fsspec_and_precedence_between_layers(
    tmp_path: Path, memory_root: str
) -> None:
    write_skill(tmp_path / "local", "both", {"SKILL.md": md("both", "local")})
    write_skill(tmp_path / "local", "script", {"SKILL.md": md("script"), "run.sh": b"#!/bin/sh\n"})
    (tmp_path / "local" / "script" / "run.sh").chmod(0o755)
    put(memory_root, "both", {"SKILL.md": md("both", "memory")})
    low = skillfs.FsspecDir(str(tmp_path / "local"), name="low", check_interval=0)
    high = skillfs.FsspecDir(f"memory://{memory_root}", name="high", check_interval=0)
    with skillfs.Skills(memory_store(), "bot", "alice", [low, high]) as skills:
        snap = skills.snapshot()
        assert snap.skill("both").description == "memory"  # later layers win
        assert snap.skill("both").shadows == ("fsspec:low",)
        assert snap.skill("script").files["run.sh"].mode == 0o755
        (tmp_path / "local" / "script" / "SKILL.md").write_bytes(md("script", "edited"))
        assert skills.snapshot().skill("script").description == "edited"


def test_missing_layers_warn_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="skillfs.runtime")
    store = memory_store()
    store.publish(Scope.market("team"), "m", {"SKILL.md": md("m")})
    layers = [
        skillfs.LocalDir(tmp_path / "missing", check_interval=0),
        skillfs.FsspecDir(f"memory:///nothing-{uuid.uuid4().hex}", check_interval=0),
        skillfs.Market("typo"),
    ]
    with skillfs.Skills(store, "bot", "alice", layers) as skills:
        for _ in range(3):
            assert skills.snapshot().skills == ()
    messages = [r.getMessage() for r in caplog.records if r.name == "skillfs.runtime"]
    assert len(messages) == 3, messages
    assert any("missing does not exist" in m for m in messages)
    assert any("nothing-" in m for m in messages)
    assert any("market 'typo' does not exist" in m and "markets: team" in m for m in messages)


def test_links_in_a_listing_are_left_out_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28: a link is no skill file. A zip entry that is a symbolic link was served (and
    materialized) as a file holding its target's path; a local link was dropped unsaid."""
    caplog.set_level(logging.WARNING, logger="skillfs.runtime")
    archive = tmp_path / "team.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("skills/z/SKILL.md", md("z"))
        link = zipfile.ZipInfo("skills/z/references/notes.md")
        link.external_attr = (0o120777 << 16) | 0x20  # S_IFLNK, as `zip --symlinks` writes
        zf.writestr(link, "/root/.ssh/id_rsa")
    write_skill(tmp_path / "local", "l", {"SKILL.md": md("l")})
    (tmp_path / "local" / "l" / "key").symlink_to("/root/.ssh/id_rsa")
    layers = [
        skillfs.FsspecDir(f"zip://skills::file://{archive}", name="zip", check_interval=0),
        skillfs.FsspecDir(str(tmp_path / "local"), name="local", check_interval=0),
    ]
    with skillfs.Skills(memory_store(), "bot", "alice", layers) as skills:
        snap = skills.snapshot()
        assert list(snap.skill("z").files) == ["SKILL.md"]
        assert list(snap.skill("l").files) == ["SKILL.md"]
        skills.snapshot()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # one per layer, not one per check
    assert "z/references/notes.md: a symbolic link" in messages[0]
    assert "l/key: a symbolic link" in messages[1]
