"""The fsspec filesystem beyond fsspec's own suite: routing, scopes and copy-on-write, atomic
publishes under concurrency, transactions, modes, bulk calls, bad paths, universal-pathlib."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from upath import UPath

import skillfs
from skillfs import Scope
from skillfs.errors import Conflict, InvalidPath, PermissionDenied
from skillfs.fs import SkillFileSystem
from support import grpc_servers
from tests.stores import url_for

AGENT = "bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
ROOT = Path(__file__).resolve().parents[2]
SKILL_MD = b"---\nname: demo\ndescription: A demo. Use when testing.\n---\n\n# Demo\n"

MakeFs = Callable[..., SkillFileSystem]


@pytest.fixture(params=["memory", "sqlite", "redis", "etcd"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, request.param, tmp_path)


@pytest.fixture
def url() -> str:
    return f"memory://fs-{uuid.uuid4().hex[:12]}"


def _maker(store_url: str, tmp_path: Path) -> MakeFs:
    def make(user: str | None = None, **options: Any) -> SkillFileSystem:
        options.setdefault("base", str(tmp_path / "ws"))
        return SkillFileSystem(
            store=options.pop("store", store_url),
            agent_id=AGENT,
            user_id=user,
            skip_instance_cache=True,
            **options,
        )

    return make


@pytest.fixture
def make(url: str, tmp_path: Path) -> MakeFs:
    """Filesystems on a fresh in-memory store, each its own instance."""
    return _maker(url, tmp_path)


@pytest.fixture
def make_any(any_url: str, tmp_path: Path) -> MakeFs:
    """Filesystems on a fresh namespace of each engine."""
    return _maker(any_url, tmp_path)


def seed(fs: SkillFileSystem, skill: str = "demo", files: dict[str, bytes] | None = None) -> None:
    """Publish a skill, its SKILL.md and `files`, in one publish."""
    extra = {f"skills/{skill}/{k}": v for k, v in (files or {}).items()}
    fs.pipe({f"skills/{skill}/SKILL.md": SKILL_MD, **extra})


# ----------------------------------------------------------------- routing and construction


def test_one_filesystem_is_the_workspace(make: MakeFs, tmp_path: Path) -> None:
    fs = make()
    (tmp_path / "ws" / "skills").mkdir(parents=True)  # shadowed by the store's skills/
    seed(fs, files={"ref": b"r"})
    fs.pipe("notes/todo.md", b"todo")
    assert (tmp_path / "ws" / "notes" / "todo.md").read_bytes() == b"todo"
    assert not (tmp_path / "ws" / "skills" / "demo").exists()
    assert fs.ls("", detail=False) == ["notes", "skills"]
    assert fs.ls("notes", detail=False) == ["notes/todo.md"]
    assert fs.find("") == ["notes/todo.md", "skills/demo/SKILL.md", "skills/demo/ref"]
    assert fs.glob("*/*") == ["notes/todo.md", "skills/demo"]
    assert fs.cat("skillfs://notes/todo.md") == b"todo"
    fs.mv("notes/todo.md", "skills/demo/todo.md")  # base to store and back
    fs.cp("skills/demo/todo.md", "done/")
    assert fs.cat("done/todo.md") == b"todo" and not fs.exists("notes/todo.md")
    fs.rm("*", recursive=True)  # a root glob reaches both sides
    assert fs.ls("", detail=False) == ["skills"] and fs.ls("skills") == []


def test_base_as_url_or_instance(url: str) -> None:
    mem = MemoryFileSystem(global_store=False, skip_instance_cache=True)
    by_url = fsspec.filesystem("skillfs", store=url, agent_id=AGENT, base="memory://ws1")
    by_instance = fsspec.filesystem("skillfs", store=url, agent_id=AGENT, base=mem)
    by_url.pipe("a/b.txt", b"1")
    by_instance.pipe("a/b.txt", b"2")
    assert fsspec.filesystem("memory").cat("/ws1/a/b.txt") == b"1"
    assert mem.cat("/a/b.txt") == b"2"
    assert by_instance.ls("a", detail=False) == ["a/b.txt"]


def test_entry_point_urls_and_defaults(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fsspec.get_filesystem_class("skillfs") is SkillFileSystem
    monkeypatch.setenv("SKILLFS_STORE", url)
    monkeypatch.setenv("SKILLFS_AGENT_ID", AGENT)
    monkeypatch.setenv("SKILLFS_USER_ID", "alice")
    monkeypatch.chdir(tmp_path)
    with fsspec.open("skillfs://skills/demo/SKILL.md", "wb") as f:
        f.write(SKILL_MD)
    fs = fsspec.filesystem("skillfs")
    assert fs.scope == ALICE and fs.store.read(ALICE, "demo", "SKILL.md") == SKILL_MD
    with fsspec.open("skillfs://notes.md", "w") as f:  # default base: the current directory
        f.write("n")
    assert (tmp_path / "notes.md").read_text() == "n"
    monkeypatch.setenv("SKILLFS_USER_ID", "bob")
    assert fsspec.filesystem("skillfs").scope == Scope.user(AGENT, "bob")  # not the cached one
    monkeypatch.delenv("SKILLFS_AGENT_ID")
    with pytest.raises(ValueError, match="SKILLFS_AGENT_ID"):
        fsspec.filesystem("skillfs", store=url)


def test_pickled_filesystem_reopens_the_store(tmp_path: Path) -> None:
    fs = SkillFileSystem(store=f"sqlite:///{tmp_path / 's.db'}", agent_id=AGENT, base=str(tmp_path))
    seed(fs)
    clone = pickle.loads(pickle.dumps(fs))
    assert clone.cat("skills/demo/SKILL.md") == SKILL_MD


# ----------------------------------------------------------------- info, reads, listings


def test_info_checksum_and_ukey_come_from_the_content(make: MakeFs) -> None:
    fs = make()
    seed(fs, files={"a": b"same", "b": b"same"})
    info = fs.info("skills/demo/a")
    assert info["type"] == "file" and info["size"] == 4
    assert info["sha256"] == hashlib.sha256(b"same").hexdigest()
    assert info["version"] == 1 and info["scope"] == "shared:bot"
    assert stat.S_ISREG(info["mode"]) and stat.S_IMODE(info["mode"]) == 0o644
    assert fs.modified("skills/demo/a").timestamp() == pytest.approx(info["mtime"])
    assert fs.ukey("skills/demo/a") == fs.ukey("skills/demo/b") == info["sha256"]
    assert fs.checksum("skills/demo/a") == fs.checksum("skills/demo/b")
    fs.pipe("skills/demo/b", b"other")
    assert fs.checksum("skills/demo/a") != fs.checksum("skills/demo/b")
    assert fs.info("skills/demo") == {
        "name": "skills/demo",
        "size": 0,
        "type": "directory",
        "version": 2,
        "scope": "shared:bot",
        "skill": True,
    }
    assert fs.info("skills")["type"] == "directory"
    assert fs.du("skills/demo") == len(SKILL_MD) + 4 + 5


def test_ranges_read_only_the_chunks_asked(url: str, tmp_path: Path) -> None:
    writer = skillfs.open_store(url)
    writer.engine.chunk_size = 8
    data = bytes(range(100))
    SkillFileSystem(store=writer, agent_id=AGENT, base=str(tmp_path)).pipe("skills/d/f", data)
    reader = skillfs.Store(writer.engine)  # another client: nothing cached yet
    fs = SkillFileSystem(store=reader, agent_id=AGENT, base=str(tmp_path))
    asked: list[tuple[str, int]] = []
    real = writer.engine.get_chunks

    def spy(keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        asked.extend(keys)
        return real(keys)

    writer.engine.get_chunks = spy  # type: ignore[method-assign]
    assert fs.cat_file("skills/d/f", 20, 30) == data[20:30]
    assert [i for _, i in asked] == [2, 3]
    asked.clear()
    assert fs.cat_ranges(["skills/d/f", "skills/d/f"], [0, 50], [4, 60]) == [data[:4], data[50:60]]
    assert [i for _, i in asked] == [0, 6, 7]
    asked.clear()
    assert fs.cat_file("skills/d/f", -4) == data[-4:] and [i for _, i in asked] == [12]
    assert fs.cat_file("skills/d/f", 200) == b"" and fs.cat_file("skills/d/f", 96, 200) == data[96:]
    with fs.open("skills/d/f", "rb", block_size=16, cache_type="none") as f:
        f.seek(90)
        assert f.read(3) == data[90:93]


def test_listings_are_fresh_unless_the_cache_is_asked_for(make: MakeFs) -> None:
    writer, fresh, cached = make(), make(), make(use_listings_cache=True)
    seed(writer)
    assert fresh.ls("skills/demo", detail=False) == cached.ls("skills/demo", detail=False)
    writer.pipe("skills/demo/new.md", b"n")
    assert "skills/demo/new.md" in fresh.ls("skills/demo", detail=False)
    assert "skills/demo/new.md" not in cached.ls("skills/demo", detail=False)
    assert not cached.exists("skills/demo/new.md")
    assert "skills/demo/new.md" in cached.ls("skills/demo", detail=False, refresh=True)
    writer.rm("skills/demo/new.md")
    cached.invalidate_cache()
    assert not cached.exists("skills/demo/new.md")


def test_directories_are_implied_by_files(make: MakeFs) -> None:
    fs = make()
    fs.makedirs("skills/empty/sub")
    fs.mkdir("skills/empty/other")
    assert not fs.exists("skills/empty") and fs.ls("skills") == []
    fs.pipe("skills/d/a/b/c.txt", b"c")
    assert fs.isdir("skills/d/a") and fs.isdir("skills/d/a/b")
    assert fs.find("skills", withdirs=True) == [
        "skills",
        "skills/d",
        "skills/d/a",
        "skills/d/a/b",
        "skills/d/a/b/c.txt",
    ]
    fs.rm("skills/d/a/b/c.txt")  # the skill's last file: the skill goes
    assert fs.ls("skills") == [] and not fs.store.skills(SHARED)


# ----------------------------------------------------------------- writes and modes


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        ("skills/notes.md", InvalidPath, "directly under skills/"),
        ("skills", InvalidPath, "directly under skills/"),
        ("skills/d/../x", InvalidPath, "'..'"),
        ("skills/d/a\\b", InvalidPath, "backslash"),
        ("skills/d/a\x00b", InvalidPath, "NUL"),
        ("skills/d/.", InvalidPath, "does not name a file"),
        ("skills/..", InvalidPath, "invalid skill directory"),
        ("skills/demo/SKILL.md/x", NotADirectoryError, "skills/demo/SKILL.md is a file"),
        ("skills/demo/refs", IsADirectoryError, "is a directory"),
    ],
)
def test_bad_paths_are_clear_errors(
    make: MakeFs, path: str, error: type[Exception], message: str
) -> None:
    fs = make()
    seed(fs, files={"refs/a.md": b"a"})
    with pytest.raises(error, match=re.escape(message)):
        fs.pipe(path, b"x")
    with pytest.raises(error, match=re.escape(message)):
        fs.open(path, "wb")
    assert fs.store.manifest(SHARED, "demo").version == 1


def test_reading_errors(make: MakeFs) -> None:
    fs = make()
    seed(fs, files={"refs/a.md": b"a"})
    with pytest.raises(FileNotFoundError):
        fs.cat("skills/demo/nope")
    with pytest.raises(FileNotFoundError):
        fs.cat("skills/nope/SKILL.md")
    with pytest.raises(IsADirectoryError):
        fs.cat_file("skills/demo/refs")
    with pytest.raises(IsADirectoryError):
        fs.open("skills/demo", "rb")
    with pytest.raises(ValueError, match="written whole"):
        fs.open("skills/demo/SKILL.md", "ab")


def test_exclusive_create_is_checked_at_commit(make: MakeFs, tmp_path: Path) -> None:
    fs, other = make(), make()
    seed(fs)
    with pytest.raises(FileExistsError):
        fs.open("skills/demo/SKILL.md", "xb")
    with pytest.raises(FileExistsError):
        fs.pipe_file("skills/demo/SKILL.md", b"x", mode="create")
    f = fs.open("skills/demo/new.md", "xb")  # nobody has it yet...
    f.write(b"mine")
    other.pipe("skills/demo/new.md", b"theirs")  # ...then someone creates it
    with pytest.raises(FileExistsError):
        f.close()
    assert fs.cat("skills/demo/new.md") == b"theirs"
    fs.pipe_file("skills/demo/other.md", b"o", mode="create")
    assert fs.cat("skills/demo/other.md") == b"o"
    local = tmp_path / "local.md"
    local.write_bytes(b"l")
    with pytest.raises(FileExistsError):
        fs.put_file(str(local), "skills/demo/other.md", mode="create")
    fs.put_file(str(local), "skills/demo/fresh.md", mode="create")
    assert fs.cat("skills/demo/fresh.md") == b"l" and fs.cat("skills/demo/other.md") == b"o"


def test_failed_with_block_writes_nothing(make: MakeFs) -> None:
    fs = make()
    seed(fs)
    with pytest.raises(RuntimeError), fs.open("skills/demo/SKILL.md", "wb") as f:
        f.write(b"half")
        raise RuntimeError
    assert fs.cat("skills/demo/SKILL.md") == SKILL_MD


def test_modes(make: MakeFs, tmp_path: Path) -> None:
    fs = make()
    fs.pipe(
        {
            "skills/m/SKILL.md": SKILL_MD,
            "skills/m/scripts/run.sh": b"echo\n",
            "skills/m/scripts/tool": b"#!/usr/bin/env python3\n",
            "skills/m/scripts/data": b"plain\n",
        }
    )

    def mode(path: str) -> int:
        return stat.S_IMODE(fs.info(path)["mode"])

    assert [mode(f"skills/m/scripts/{n}") for n in ("run.sh", "tool", "data")] == [
        0o755,
        0o755,
        0o644,
    ]
    assert mode("skills/m/SKILL.md") == 0o644
    fs.pipe("skills/m/scripts/tool", b"no shebang now\n")  # an overwrite keeps the mode
    fs.cp("skills/m/scripts/tool", "skills/other/tool")  # so does a copy
    assert mode("skills/m/scripts/tool") == mode("skills/other/tool") == 0o755
    local = tmp_path / "local"
    local.mkdir()
    (local / "odd").write_bytes(b"x")
    (local / "odd").chmod(0o750)
    fs.put(str(local / "odd"), "skills/m/odd")  # an imported file keeps its mode
    assert mode("skills/m/odd") == 0o750
    fs.get("skills/m/", str(tmp_path / "out") + "/", recursive=True)
    assert stat.S_IMODE((tmp_path / "out" / "odd").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "out" / "scripts" / "run.sh").stat().st_mode) == 0o755


# ----------------------------------------------------------------- publishes, moves, bulk


def test_mv_inside_a_skill_is_one_publish(make_any: MakeFs) -> None:
    fs = make_any()
    seed(fs, files={"refs/a.md": b"a", "refs/b.md": b"b"})
    fs.mv("skills/demo/refs/a.md", "skills/demo/docs/a.md")
    fs.mv("skills/demo/refs", "skills/demo/more", recursive=True)
    m = fs.store.manifest(SHARED, "demo")
    assert m.version == 3
    assert sorted(m.files) == ["SKILL.md", "docs/a.md", "more/b.md"]


def test_renaming_a_skill_is_one_commit(make_any: MakeFs) -> None:
    fs = make_any()
    seed(fs, "old", files={"refs/a.md": b"a"})
    fs.mv("skills/old", "skills/new", recursive=True)
    new = fs.store.manifest(SHARED, "new")
    tombstone = fs.store.history(SHARED, "old")[0]
    assert tombstone.deleted and tombstone.commit_id == new.commit_id
    assert sorted(new.files) == ["SKILL.md", "refs/a.md"] and new.version == 1
    assert fs.ls("skills", detail=False) == ["skills/new"]


def test_bulk_calls_publish_each_skill_once_and_read_in_batches(
    make: MakeFs, url: str, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    for skill in ("a", "b", "c"):
        for rel in ("SKILL.md", "refs/x.md", "refs/deep/y.md"):
            (tree / skill / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / skill / rel).write_bytes(f"{skill}/{rel}".encode())
    fs = make()
    fs.put(str(tree) + "/", "skills/", recursive=True)
    assert {s: fs.store.manifest(SHARED, s).version for s in "abc"} == {"a": 1, "b": 1, "c": 1}
    fs.cp("skills/a", "skills/d", recursive=True)
    assert fs.store.manifest(SHARED, "d").version == 1
    fs.pipe({f"skills/a/p{i}": b"p" for i in range(5)})
    assert fs.store.manifest(SHARED, "a").version == 2

    reader = make(store=skillfs.Store(skillfs.open_store(url).engine))  # an empty blob cache
    calls: list[int] = []
    real = reader.store.engine.get_chunks

    def spy(keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        calls.append(len(keys))
        return real(keys)

    reader.store.engine.get_chunks = spy  # type: ignore[method-assign]
    reader.get("skills/", str(tmp_path / "back") + "/", recursive=True)
    assert len(calls) == 1  # every blob in one batched round trip
    for skill in "bc":
        for rel in ("SKILL.md", "refs/x.md", "refs/deep/y.md"):
            assert (tmp_path / "back" / skill / rel).read_bytes() == f"{skill}/{rel}".encode()
    fs.rm(["skills/b", "skills/c"], recursive=True)
    assert fs.store.history(SHARED, "b")[0].deleted and fs.store.skills(SHARED) == ["a", "d"]


# ----------------------------------------------------------------- concurrent writers


def test_concurrent_threads_keep_every_file(make_any: MakeFs) -> None:
    shared_instance = make_any()
    seed(shared_instance)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        fs = shared_instance if n % 2 else make_any()  # one instance across threads, or own
        try:
            for i in range(4):
                fs.pipe(f"skills/demo/w{n}/f{i}", f"{n}.{i}".encode())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    m = shared_instance.store.manifest(SHARED, "demo")
    assert len(m.files) == 1 + 6 * 4 and m.version == 1 + 6 * 4
    assert shared_instance.cat("skills/demo/w5/f3") == b"5.3"


_PROCESS_WRITER = """
import sys
from skillfs.fs import SkillFileSystem
url, n, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fs = SkillFileSystem(store=url, agent_id="bot", user_id="alice", base=base)
for i in range(8):
    fs.pipe(f"skills/demo/p{n}/f{i}", f"{n}.{i}".encode())
"""


def test_concurrent_processes_keep_every_file_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    fs = SkillFileSystem(store=url, agent_id=AGENT, user_id="alice", base=str(tmp_path))
    seed(fs)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS_WRITER, url, str(n), str(tmp_path)], env=env
        )
        for n in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    m = fs.store.manifest(ALICE, "demo")
    assert len(m.files) == 1 + 4 * 8 and m.version == 1 + 4 * 8
    assert {fs.cat(f"skills/demo/p{n}/f7") for n in range(4)} == {b"0.7", b"1.7", b"2.7", b"3.7"}


def test_a_conflict_is_retried_on_the_newer_version(make: MakeFs) -> None:
    fs, other = make(), make()
    seed(fs)
    real = fs.store.commit
    raced: list[bool] = []

    def commit_after_a_rival(changes: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(True)
            other.pipe("skills/demo/theirs.md", b"t")  # lands between our read and commit
        return real(changes, **kwargs)

    fs.store.commit = commit_after_a_rival  # type: ignore[method-assign]
    fs.pipe("skills/demo/mine.md", b"m")
    assert sorted(fs.store.manifest(SHARED, "demo").files) == ["SKILL.md", "mine.md", "theirs.md"]


def test_a_conflict_that_never_ends_is_reported(make: MakeFs) -> None:
    fs = make()
    seed(fs)
    fs.store.retry_for = 0.05

    def always_conflict(changes: Any, **kwargs: Any) -> Any:
        raise Conflict("someone else", skill="demo", current_version=9)

    fs.store.commit = always_conflict  # type: ignore[method-assign]
    with pytest.raises(Conflict):
        fs.pipe("skills/demo/x", b"x")


# ----------------------------------------------------------------- scopes: overrides


def test_copy_on_write_override_and_its_removal(make: MakeFs) -> None:
    shared, alice, bob = make(), make("alice"), make("bob")
    seed(shared, files={"ref": b"shared ref"})
    assert alice.info("skills/demo/ref")["scope"] == "shared:bot"
    alice.pipe("skills/demo/mine.md", b"alice's")  # copy-on-write: one commit, whole skill
    own = alice.store.manifest(ALICE, "demo")
    assert own.version == 1 and sorted(own.files) == ["SKILL.md", "mine.md", "ref"]
    assert alice.info("skills/demo/ref")["scope"] == "user:bot/alice"
    assert sorted(shared.find("skills/demo")) == ["skills/demo/SKILL.md", "skills/demo/ref"]
    assert not bob.exists("skills/demo/mine.md")
    shared.pipe("skills/demo/ref", b"shared ref v2")  # shadowed: the override is whole-skill
    assert alice.cat("skills/demo/ref") == b"shared ref"
    alice.rm("skills/demo/ref")  # alice's own copy: allowed
    alice.rm("skills/demo", recursive=True)  # deleting the override...
    assert alice.cat("skills/demo/ref") == b"shared ref v2"  # ...brings the shared skill back
    assert alice.info("skills/demo")["scope"] == "shared:bot"
    assert alice.store.history(ALICE, "demo")[0].deleted


def test_shared_only_paths_cannot_be_removed_by_a_user(make: MakeFs) -> None:
    shared, alice = make(), make("alice")
    seed(shared, files={"ref": b"r"})
    seed(shared, "other")
    attempts: list[Callable[[], None]] = [
        lambda: alice.rm("skills/demo/ref"),
        lambda: alice.rm("skills/demo", recursive=True),
        lambda: alice.rm_file("skills/other/SKILL.md"),
        lambda: alice.mv("skills/other", "skills/renamed", recursive=True),
    ]
    for attempt in attempts:
        with pytest.raises(PermissionError, match="shared:bot"):
            attempt()
    assert isinstance(PermissionDenied("x"), PermissionError)
    assert shared.store.skills(SHARED) == ["demo", "other"] and not shared.store.skills(ALICE)
    alice.mv("skills/demo/ref", "skills/demo/moved")  # a move is a write: copy-on-write
    assert sorted(alice.find("skills/demo")) == ["skills/demo/SKILL.md", "skills/demo/moved"]
    assert sorted(shared.find("skills/demo")) == ["skills/demo/SKILL.md", "skills/demo/ref"]
    shared.rm("skills/other", recursive=True)  # the agent-shared filesystem may
    assert shared.store.skills(SHARED) == ["demo"]


# ----------------------------------------------------------------- transactions


def test_transaction_commits_everything_at_once(make_any: MakeFs, tmp_path: Path) -> None:
    fs, observer = make_any(), make_any()
    seed(fs, "a", files={"ref": b"r"})
    seed(fs, "gone")
    before = fs.store.revision(AGENT)
    with fs.transaction:
        fs.pipe("skills/b/SKILL.md", SKILL_MD)
        with fs.open("skills/b/notes.txt", "w") as f:
            f.write("n")
        fs.cp("skills/a/ref", "skills/b/ref")
        fs.mv("skills/a/ref", "skills/a/moved")
        fs.rm("skills/gone", recursive=True)
        fs.pipe("workspace.txt", b"base writes are not staged")
        assert fs.cat("skills/b/ref") == b"r" and not fs.exists("skills/gone")  # own view
        assert not observer.exists("skills/b/SKILL.md") and observer.exists("skills/gone")
        assert (tmp_path / "ws" / "workspace.txt").exists()
        assert fs.store.revision(AGENT) == before
    ids = {fs.store.manifest(SHARED, s).commit_id for s in ("a", "b")}
    ids.add(fs.store.history(SHARED, "gone")[0].commit_id)
    assert len(ids) == 1  # one store.commit
    assert sorted(observer.find("skills")) == [
        "skills/a/SKILL.md",
        "skills/a/moved",
        "skills/b/SKILL.md",
        "skills/b/notes.txt",
        "skills/b/ref",
    ]


def test_transaction_failing_half_way_commits_nothing(make_any: MakeFs) -> None:
    fs = make_any()
    seed(fs, "a")
    before = fs.store.revision(AGENT)
    with pytest.raises(RuntimeError), fs.transaction:
        fs.pipe("skills/b/SKILL.md", SKILL_MD)
        fs.rm("skills/a", recursive=True)
        raise RuntimeError("half-way")
    assert fs.store.revision(AGENT) == before and fs.store.skills(SHARED) == ["a"]
    assert not fs._intrans
    fs.pipe("skills/c/SKILL.md", SKILL_MD)  # later writes publish as usual
    assert fs.store.skills(SHARED) == ["a", "c"]


def test_transaction_failing_at_commit_commits_nothing(make: MakeFs) -> None:
    fs, other = make(), make()
    before = fs.store.revision(AGENT)
    with pytest.raises(FileExistsError), fs.transaction:
        fs.pipe("skills/a/SKILL.md", SKILL_MD)
        fs.pipe_file("skills/b/SKILL.md", SKILL_MD, mode="create")
        other.pipe("skills/b/SKILL.md", b"first")  # wins the exclusive create
    assert fs.store.skills(SHARED) == ["b"] and fs.cat("skills/b/SKILL.md") == b"first"
    assert fs.store.revision(AGENT) != before


def test_transaction_without_context_manager_and_no_nesting(make: MakeFs) -> None:
    fs = make()
    fs.start_transaction()
    fs.pipe({"skills/a/SKILL.md": SKILL_MD, "skills/b/SKILL.md": SKILL_MD})
    with pytest.raises(RuntimeError, match="do not nest"):
        fs.transaction.start()
    assert not fs.store.skills(SHARED)
    fs.end_transaction()
    a, b = (fs.store.manifest(SHARED, s) for s in "ab")
    assert a.commit_id == b.commit_id


def test_grpc_store_url_works_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        admin = skillfs.open_store(url, token=grpc_servers.ADMIN)
        shared = SkillFileSystem(store=admin, agent_id="support-bot", base=str(tmp_path))
        seed(shared, files={"ref": b"r"})
        monkeypatch.setenv("SKILLFS_TOKEN", grpc_servers.ALICE)  # a worker's token, scoped to alice
        alice = fsspec.filesystem(
            "skillfs", store=url, agent_id="support-bot", user_id="alice", base=str(tmp_path)
        )
        assert alice.cat("skills/demo/ref") == b"r"
        with pytest.raises(PermissionError):
            alice.rm("skills/demo/ref")
        with alice.transaction:
            alice.pipe("skills/demo/mine.md", b"m")
            alice.pipe("skills/own/SKILL.md", SKILL_MD)
        demo, own = (admin.manifest(Scope.user("support-bot", "alice"), s) for s in ("demo", "own"))
        assert demo.commit_id == own.commit_id and sorted(demo.files) == [
            "SKILL.md",
            "mine.md",
            "ref",
        ]
    finally:
        server.stop(0)


def test_a_changed_token_is_a_new_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsspec reuses an instance made with the same arguments: $SKILLFS_TOKEN is one of them,
    so a process that changes or drops its token never keeps the old one's rights."""
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        opts = {"store": f"grpc://127.0.0.1:{server.grpc_port}", "agent_id": "support-bot"}
        monkeypatch.setenv("SKILLFS_TOKEN", grpc_servers.ALICE)
        alice = fsspec.filesystem("skillfs", user_id="alice", **opts)
        alice.pipe("skills/own/SKILL.md", SKILL_MD)
        monkeypatch.setenv("SKILLFS_TOKEN", grpc_servers.BOB)
        as_bob = fsspec.filesystem("skillfs", user_id="alice", **opts)
        assert as_bob is not alice
        with pytest.raises(PermissionError):
            as_bob.pipe("skills/own/more.md", b"m")
        monkeypatch.delenv("SKILLFS_TOKEN")
        with pytest.raises(PermissionError):
            fsspec.filesystem("skillfs", user_id="alice", **opts).cat("skills/own/SKILL.md")
        explicit = fsspec.filesystem("skillfs", user_id="alice", token=grpc_servers.ALICE, **opts)
        assert explicit.cat("skills/own/SKILL.md") == SKILL_MD
    finally:
        server.stop(0)


# ----------------------------------------------------------------- universal-pathlib


def test_upath(make: MakeFs, url: str, tmp_path: Path) -> None:
    opts = {"store": url, "agent_id": AGENT, "user_id": "alice", "base": str(tmp_path)}
    skill = UPath("skillfs://skills/demo", **opts)
    (skill / "SKILL.md").write_bytes(SKILL_MD)
    (skill / "refs" / "a.md").write_text("alpha")
    assert (skill / "refs" / "a.md").read_text() == "alpha"
    assert sorted(p.name for p in skill.iterdir()) == ["SKILL.md", "refs"]
    assert sorted(p.path for p in skill.glob("**/*.md")) == [
        "skills/demo/SKILL.md",
        "skills/demo/refs/a.md",
    ]
    st = (skill / "refs" / "a.md").stat()
    assert st.st_size == 5 and stat.S_ISREG(st.st_mode) and st.st_mtime > 0
    assert skill.is_dir() and (skill / "SKILL.md").is_file() and not (skill / "nope").exists()
    assert [p.path for p in UPath("skillfs://skills", **opts).iterdir()] == ["skills/demo"]
    (skill / "refs" / "a.md").rename(skill / "refs" / "b.md")
    (skill / "refs" / "b.md").unlink()
    assert sorted(p.name for p in skill.iterdir()) == ["SKILL.md"]
    assert skillfs.open_store(url).skills(ALICE) == ["demo"]


@pytest.fixture(autouse=True)
def _no_instance_leaks() -> Iterator[None]:
    yield
    SkillFileSystem.clear_instance_cache()
