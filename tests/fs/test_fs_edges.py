"""The fsspec filesystem where fsspec's and upath's suites do not look: making directories,
moving them, the `_`/`.` directories that are not skills, and a store that does not exist."""

from __future__ import annotations

import errno
import re
import uuid
from pathlib import Path

import pytest
from upath import UPath

from skillfs.errors import FailedPrecondition, InvalidPath
from skillfs.fs import SkillFileSystem
from skillfs.model import Rollout, Scope

SKILL_MD = b"---\nname: demo\ndescription: A demo. Use when testing.\n---\n\n# Demo\n"


@pytest.fixture
def fs(tmp_path: Path) -> SkillFileSystem:
    return SkillFileSystem(
        store=f"memory://edges-{uuid.uuid4().hex[:8]}",
        agent_id="a",
        base=str(tmp_path),
        skip_instance_cache=True,
    )


def test_mkdir_and_makedirs_refuse_what_exists(fs: SkillFileSystem) -> None:
    fs.pipe({"skills/x/SKILL.md": SKILL_MD, "skills/x/refs/a.md": b"a"})
    for path in ("skills/x", "skills/x/refs", "skills"):
        with pytest.raises(FileExistsError, match="a directory is there"):
            fs.mkdir(path)
        with pytest.raises(FileExistsError):
            fs.makedirs(path)
        fs.makedirs(path, exist_ok=True)
    with pytest.raises(FileExistsError, match="a file is there"):
        fs.makedirs("skills/x/SKILL.md", exist_ok=True)  # as os.makedirs
    with pytest.raises(FileExistsError, match="a file is there"):
        fs.mkdir("skills/x/SKILL.md")
    for below in ("skills/x/SKILL.md/sub", "skills/x/SKILL.md/a/b"):  # as os.makedirs
        with pytest.raises(NotADirectoryError, match=r"skills/x/SKILL\.md is a file"):
            fs.makedirs(below, exist_ok=True)
    with pytest.raises(NotADirectoryError):
        fs.mkdir("skills/x/SKILL.md/sub")
    fs.mkdir("skills/x/new")  # implied: nothing made, nothing refused
    fs.makedirs("skills/y/a/b")
    assert fs.ls("skills", detail=False) == ["skills/x"]


def test_mv_of_a_directory_moves_it_without_recursive(fs: SkillFileSystem) -> None:
    fs.pipe({"skills/x/SKILL.md": SKILL_MD, "skills/x/refs/a.md": b"a"})
    fs.mv("skills/x/refs", "skills/x/docs")
    assert fs.find("skills/x") == ["skills/x/SKILL.md", "skills/x/docs/a.md"]
    version = fs.info("skills/x")["version"]
    fs.mv("skills/x", "skills/y")
    assert fs.find("skills") == ["skills/y/SKILL.md", "skills/y/docs/a.md"]
    assert fs.info("skills/y")["version"] == 1 and version == 2  # the rename: one commit


def test_a_move_keeps_the_kill_switch_and_the_rollout(fs: SkillFileSystem) -> None:
    """Moving a disabled skill to a new name would serve it again (the new name is not
    disabled), moving a staged one would drop its rollout: both are refused, nothing moved
    (outside testing: `mv` turned a disabled skill back on for every worker)."""
    fs.pipe({"skills/x/SKILL.md": SKILL_MD})
    scope = Scope.shared("a")
    fs.store.governance.disable(scope, "x", reason="leaks a key")
    with pytest.raises(FailedPrecondition, match=r"is disabled \(leaks a key\).*enable it first"):
        fs.mv("skills/x", "skills/y")
    fs.pipe({"skills/z/SKILL.md": SKILL_MD})
    # into skills/z/x/
    with pytest.raises(FailedPrecondition, match=r"is disabled \(leaks a key\)"):
        fs.mv("skills/x", "skills/z", recursive=True)
    assert sorted(fs.store.manifest(scope, "z").files) == ["SKILL.md"]
    fs.rm("skills/z", recursive=True)
    fs.store.governance.enable(scope, "x")
    fs.store.rollouts.stage(scope, "x", {"SKILL.md": SKILL_MD + b"new\n"}, Rollout(users=["u"]))
    with pytest.raises(FailedPrecondition, match="staged candidate: promote or abort it"):
        fs.mv("skills/x", "skills/y")
    assert fs.store.skills(scope) == ["x"] and fs.store.manifest(scope, "x").candidate
    fs.store.rollouts.promote(scope, "x")
    fs.mv("skills/x", "skills/y")
    assert fs.store.skills(scope) == ["y"]


def test_a_move_into_the_store_that_fails_keeps_its_source(
    fs: SkillFileSystem, tmp_path: Path
) -> None:
    """fsspec's mv is a copy and a removal: the base file was removed at once, the store's
    copy only staged, so a commit that failed lost the file (outside testing: a file over
    the size limit was gone from both places). The source now goes once the copy is in."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_bytes(b"keep me")
    with pytest.raises(InvalidPath, match="control character"):
        fs.mv("notes/a.md", "skills/bad\x07name/a.md")  # refused when committed
    assert (tmp_path / "notes" / "a.md").read_bytes() == b"keep me"
    with pytest.raises(RuntimeError, match="abandoned"), fs.transaction:
        fs.mv("notes/a.md", "skills/x/a.md")
        raise RuntimeError("abandoned")
    assert (tmp_path / "notes" / "a.md").exists() and not fs.exists("skills/x/a.md")
    fs.mv("notes/a.md", "skills/x/a.md")
    assert fs.cat_file("skills/x/a.md") == b"keep me" and not (tmp_path / "notes/a.md").exists()


def test_the_listings_cache_never_holds_staged_changes(tmp_path: Path) -> None:
    """Outside testing: with use_listings_cache, a listing made inside a transaction was
    cached and outlived its abort (a file listed that never existed), and one cached before
    it hid the transaction's own changes from it."""
    fs = SkillFileSystem(
        store=f"memory://cache-{uuid.uuid4().hex[:8]}",
        agent_id="a",
        base=str(tmp_path),
        use_listings_cache=True,
        skip_instance_cache=True,
    )
    fs.pipe_file("skills/x/SKILL.md", SKILL_MD)
    assert fs.ls("skills/x", detail=False) == ["skills/x/SKILL.md"]  # cached
    with pytest.raises(RuntimeError, match="abandoned"), fs.transaction:
        fs.pipe_file("skills/x/draft.md", b"staged")
        assert fs.exists("skills/x/draft.md")
        assert fs.ls("skills/x", detail=False) == ["skills/x/SKILL.md", "skills/x/draft.md"]
        fs.rm("skills/x/SKILL.md")
        assert not fs.exists("skills/x/SKILL.md")
        raise RuntimeError("abandoned")
    assert fs.ls("skills/x", detail=False) == ["skills/x/SKILL.md"]
    assert not fs.exists("skills/x/draft.md") and fs.exists("skills/x/SKILL.md")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig", "utf-8"])
def test_text_written_in_any_encoding_reads_back(fs: SkillFileSystem, encoding: str) -> None:
    """Outside testing: text written in UTF-16 or UTF-32 lost its byte-order mark (Python's
    text wrapper writes it only on a seekable stream), so it could not be read back."""
    with fs.open("skills/t/notes.txt", "w", encoding=encoding) as f:
        f.write("hi é")
        assert f.tell() == len("hi é".encode(encoding))
    assert fs.cat_file("skills/t/notes.txt") == "hi é".encode(encoding)
    assert fs.read_text("skills/t/notes.txt", encoding=encoding) == "hi é"


def test_underscore_and_dot_directories_are_not_skills(fs: SkillFileSystem) -> None:
    fs.pipe(
        {
            "skills/x/SKILL.md": SKILL_MD,
            "skills/_drafts/new/SKILL.md": SKILL_MD,
            "skills/.archive/old/SKILL.md": SKILL_MD,
        }
    )
    listed = {i["name"]: i for i in fs.ls("skills")}
    assert {n: i["skill"] for n, i in listed.items()} == {
        "skills/.archive": False,
        "skills/_drafts": False,
        "skills/x": True,
    }
    for side in ("skills/_drafts", "skills/.archive"):  # info is the listing's entry
        assert fs.info(side) == listed[side]  # (outside testing: it had scope 'None')
    assert fs.ls("skills/_drafts", detail=False) == ["skills/_drafts/new"]
    for path in ("skills/_drafts/notes.md", "skills/.archive/README"):
        with pytest.raises(InvalidPath, match=re.escape("is not a skill but holds skill")):
            fs.pipe(path, b"x")
    assert fs.find("skills/_drafts") == ["skills/_drafts/new/SKILL.md"]


def test_reading_a_sqlite_store_that_does_not_exist_makes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "typo.db"
    fs = SkillFileSystem(
        store=f"sqlite:///{db}", agent_id="a", base=str(tmp_path), skip_instance_cache=True
    )
    no_store = f"no store at {db}"
    for read in (
        lambda: fs.ls("skills"),
        lambda: fs.cat("skills/x/SKILL.md"),
        lambda: fs.info("skills/x"),
        lambda: fs.open("skills/x/SKILL.md", "rb"),
        lambda: fs.get("skills/x", str(tmp_path / "out"), recursive=True),
        lambda: list(UPath("skillfs://skills/x", **fs.storage_options).iterdir()),
    ):
        with pytest.raises(FileNotFoundError, match=re.escape(no_store)):
            read()
    assert not fs.exists("skills/x") and fs.find("skills") == []
    assert fs.ls("", detail=False) == ["skills"]
    assert not db.exists()
    fs.pipe("skills/x/SKILL.md", SKILL_MD)  # a write makes the store
    assert db.exists() and fs.cat("skills/x/SKILL.md") == SKILL_MD
    with pytest.raises(FileNotFoundError):
        fs.ls("skills/missing")  # a missing directory of a store that exists


def test_reading_a_store_in_a_missing_directory_makes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "no" / "such" / "skills.db"
    fs = SkillFileSystem(
        store=f"sqlite:///{db}", agent_id="a", base=str(tmp_path), skip_instance_cache=True
    )
    with pytest.raises(FileNotFoundError, match="no store at"):
        fs.cat("skills/x/SKILL.md")
    assert not (tmp_path / "no").exists()


def test_anonymous_memory_store_is_shared_by_every_instance(tmp_path: Path) -> None:
    agent = f"anon-{uuid.uuid4().hex[:8]}"
    one, two = (
        SkillFileSystem(
            store="memory://", agent_id=agent, base=str(tmp_path), skip_instance_cache=True
        )
        for _ in range(2)
    )
    one.pipe("skills/x/SKILL.md", SKILL_MD)
    assert two.cat("skills/x/SKILL.md") == SKILL_MD
    assert one.store is two.store


def test_a_directory_is_not_moved_into_itself(fs: SkillFileSystem) -> None:
    """Outside (differential) testing: fsspec's mv copied a directory into its own
    subdirectory, then removed the source, subdirectory included: the skill was gone. It is
    refused, as a local disk refuses it (EINVAL), and nothing changes."""
    fs.pipe({"skills/r/SKILL.md": b"---\nname: r\ndescription: d\n---\n", "skills/r/d/y.txt": b"y"})
    before = fs.find("skills")
    for src, dst in [
        ("skills/r/d", "skills/r/d/sub"),
        ("skills/r", "skills/r/sub"),
        ("skills/r", "skills/r"),
    ]:
        with pytest.raises(OSError, match="into itself") as info:
            fs.mv(src, dst)
        assert info.value.errno == errno.EINVAL
    assert fs.find("skills") == before
    fs.mv("skills/r/d", "skills/r/e")  # a sibling is fine
    assert fs.cat("skills/r/e/y.txt") == b"y"
