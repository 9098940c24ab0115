"""universal-pathlib's own BaseTests (vendored from its 0.3.10 sdist, tests/_vendor/upath_tests)
on `skillfs://`, and the path semantics they do not cover.

Each test's path is a fresh skill directory holding upath's fixture tree, on the memory engine,
etcd (the most constrained engine) and grpc:// (a skillfs server, as workers mount it), as the
agent-shared and as a user scope. Store directories are implied by their files, so the suite
runs with SUPPORTS_EMPTY_DIRS = False, as upath's S3/GCS/Azure tests do (docs/fsspec.md
"Directories are implied by files")."""

from __future__ import annotations

import importlib.metadata
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import upath

VENDORED = Path(__file__).parent.parent / "_vendor" / "upath_tests"
VENDORED_VERSION = "0.3.10"
if str(VENDORED) not in upath.__path__:
    upath.__path__.append(str(VENDORED))  # `upath.tests` is the vendored copy

from upath import UPath  # noqa: E402
from upath.tests.cases import BaseTests  # noqa: E402
from upath.tests.utils import OverrideMeta, overrides_base  # noqa: E402

from skillfs.fs.upath import SkillPath  # noqa: E402
from support.grpc_servers import ADMIN  # noqa: E402
from tests.stores import url_for  # noqa: E402

ENGINES = ["memory", "etcd", "grpc"]


def test_vendored_cases_match_installed_upath() -> None:
    assert importlib.metadata.version("universal-pathlib") == VENDORED_VERSION, (
        "tests/_vendor/upath_tests is from another universal-pathlib: refresh it as its "
        "README.md says"
    )


# upath/tests/conftest.py's fixtures that BaseTests uses (that conftest itself cannot be
# imported here: it needs smbclient, and its session fixture clears fsspec's registry)
@pytest.fixture
def local_testdir(tmp_path: Path) -> str:
    (tmp_path / "folder1").mkdir()
    for name in ["file1.txt", "file2.txt"]:
        (tmp_path / "folder1" / name).write_text(name)
    (tmp_path / "file1.txt").write_text("hello world")
    (tmp_path / "file2.txt").write_bytes(b"hello world")
    return str(tmp_path)


@pytest.fixture
def pathlib_base(local_testdir: str) -> Path:
    return Path(local_testdir)


@pytest.fixture
def clear_fsspec_memory_cache() -> Iterator[None]:
    cls = fsspec.get_filesystem_class("memory")  # fsspec's memory://, not skillfs's engine
    dirs, store = cls.pseudo_dirs.copy(), cls.store.copy()
    yield
    cls.pseudo_dirs, cls.store = dirs, store


@pytest.fixture(scope="module", params=ENGINES)
def engine_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return url_for(request, request.param, tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module", params=["shared", "user"])
def scope_options(request: pytest.FixtureRequest) -> dict[str, str]:
    """No `user_id` at all for the shared scope: the defaults must fill it in."""
    return {"user_id": "u"} if request.param == "user" else {}


@pytest.fixture
def options(
    engine_url: str, scope_options: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    base = str(tmp_path_factory.mktemp("base"))
    token = {"token": ADMIN} if engine_url.startswith("grpc") else {}
    return {"store": engine_url, "agent_id": "upath", "base": base, **token, **scope_options}


class TestSkillPath(BaseTests, metaclass=OverrideMeta):  # type: ignore[misc]
    SUPPORTS_EMPTY_DIRS = False

    @pytest.fixture(autouse=True)
    def path(self, local_testdir: str, options: dict[str, Any]) -> None:
        """The name BaseTests' own autouse fixtures depend on: a fresh skill directory."""
        self.path = UPath(f"skillfs://skills/t{uuid.uuid4().hex[:10]}", **options)
        self.prepare_file_system()  # folder1/file{1,2}.txt, file1.txt, file2.txt

    @overrides_base
    def test_is_correct_class(self) -> None:
        assert isinstance(self.path, SkillPath)


# ----------------------------------------------------------------- what BaseTests leaves out


@pytest.fixture
def skill(tmp_path: Path) -> UPath:
    opts = {"store": f"memory://up-{uuid.uuid4().hex[:8]}", "agent_id": "a"}
    return UPath("skillfs://skills/x", base=str(tmp_path), **opts)


def test_store_paths_are_absolute_under_their_first_segment(skill: UPath) -> None:
    f = skill / "refs" / "a.md"
    assert (f.anchor, f.drive, f.parts) == ("skills/", "skills", ("skills/", "x", "refs", "a.md"))
    assert f.is_absolute() and f.parts[0] == f.anchor
    f.write_text("a")
    moved = f.rename("skills/x/new.md")  # a plain target: absolute, no cwd() needed
    assert moved.read_text() == "a" and not f.exists()
    assert str(moved) == "skillfs://skills/x/new.md"


def test_path_storage_options_are_the_filesystems(
    skill: UPath, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKILLFS_USER_ID", raising=False)
    assert skill.storage_options == skill.fs.storage_options
    assert skill.storage_options["user_id"] is None
    monkeypatch.setenv("SKILLFS_AGENT_ID", "from-env")
    monkeypatch.setenv("SKILLFS_STORE", skill.storage_options["store"])
    p = UPath("skillfs://skills/y", base=skill.storage_options["base"])
    assert p.storage_options == p.fs.storage_options
    assert p.storage_options["agent_id"] == "from-env"


def test_renaming_a_skill_directory_moves_it(skill: UPath) -> None:
    (skill / "SKILL.md").write_text("s")
    (skill / "refs" / "a.md").write_text("a")
    moved = skill.rename(skill.with_name("y"))
    assert moved.exists() and not skill.exists()
    assert sorted(p.path for p in moved.rglob("*") if p.is_file()) == [
        "skills/y/SKILL.md",
        "skills/y/refs/a.md",
    ]


def test_text_write_that_raises_writes_nothing(skill: UPath) -> None:
    f = skill / "SKILL.md"
    f.write_text("before")
    with pytest.raises(RuntimeError), f.open("w") as out:
        out.write("partial")
        raise RuntimeError
    assert f.read_text() == "before"
    g = skill / "new.md"
    with pytest.raises(RuntimeError), g.open("w") as out:
        out.write("partial")
        raise RuntimeError
    assert not g.exists()


def test_mkdir_of_an_existing_path_raises(skill: UPath) -> None:
    (skill / "SKILL.md").write_text("s")
    with pytest.raises(FileExistsError):
        skill.mkdir()
    with pytest.raises(FileExistsError):
        (skill / "SKILL.md").mkdir(parents=True, exist_ok=True)
    skill.mkdir(exist_ok=True)
    (skill / "empty").mkdir()  # implied: nothing to make, nothing made
    assert not (skill / "empty").exists()


def test_no_store_file_is_made_by_reading(tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        p = UPath("skillfs://skills/x", store="sqlite:///typo.db", agent_id="a", base=".")
        with pytest.raises(FileNotFoundError, match="no store at"):
            list(p.iterdir())
        assert not p.exists()
        assert not (tmp_path / "typo.db").exists()
    finally:
        os.chdir(cwd)
