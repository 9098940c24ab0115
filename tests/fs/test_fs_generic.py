"""fsspec's generic machinery on `skillfs://`: rsync both ways, DirFileSystem, the caching
chains, compression, and writes that raise, on the memory, SQLite and Redis engines.

Where fsspec itself decides (its OpenFile and cache layers close a file whatever the `with`
block did; filecache keeps what it fetched), the ideal is asserted and marked
`xfail(strict=True)` with the paragraph of docs/fsspec.md that says so."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import fsspec
import fsspec.generic
import pytest
from fsspec.implementations.dirfs import DirFileSystem
from upath import UPath

from skillfs.fs import SkillFileSystem
from tests.stores import url_for

SKILL_MD = b"---\nname: alpha\ndescription: A skill. Use when testing.\n---\n\n# Alpha\n"


@pytest.fixture(params=["memory", "sqlite", "redis"])
def opts(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """skillfs's options for one fresh store on each engine."""
    (tmp_path / "base").mkdir()
    return {
        "store": url_for(request, request.param, tmp_path),
        "agent_id": "generic",
        "base": str(tmp_path / "base"),
    }


@pytest.fixture
def fs(opts: dict[str, Any]) -> SkillFileSystem:
    return SkillFileSystem(**opts)


def rsync(src: str, dst: str, opts: dict[str, Any], **kwargs: Any) -> dict[str, str]:
    """fsspec's rsync with skillfs's options, raising any copy error (its default ignores them:
    docs/fsspec.md "fsspec's generic operations")."""
    inst = {"default_method": "options", "storage_options": {"skillfs": opts}}
    out: dict[str, str] = fsspec.generic.rsync(
        src, dst, inst_kwargs=inst, on_error="raise", **kwargs
    )
    return out


def local_skills(root: Path) -> Path:
    for rel, data in {
        "alpha/SKILL.md": SKILL_MD,
        "alpha/references/notes.md": b"notes\n",
        "beta/SKILL.md": SKILL_MD.replace(b"alpha", b"beta"),
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def local_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# ----------------------------------------------------------------- rsync


def test_rsync_into_the_store_and_back(
    fs: SkillFileSystem, opts: dict[str, Any], tmp_path: Path
) -> None:
    src = local_skills(tmp_path / "src")
    (src / "alpha" / "empty").mkdir()  # store directories are implied: not reproduced
    assert len(rsync(str(src), "skillfs://skills", opts)) == 3
    assert fs.find("skills") == [
        "skills/alpha/SKILL.md",
        "skills/alpha/references/notes.md",
        "skills/beta/SKILL.md",
    ]
    assert not fs.exists("skills/alpha/empty")
    assert rsync(str(src), "skillfs://skills", opts) == {}  # nothing changed: nothing copied
    fs.pipe("skills/alpha/stale.md", b"old")
    rsync(str(src), "skillfs://skills", opts, delete_missing=True)
    assert not fs.exists("skills/alpha/stale.md")
    out = tmp_path / "out"
    out.mkdir()
    rsync("skillfs://skills", str(out), opts)
    assert local_files(out) == local_files(src)
    assert (out / "alpha/references/notes.md").read_bytes() == b"notes\n"


def test_rsync_between_skills_and_into_one(
    fs: SkillFileSystem, opts: dict[str, Any], tmp_path: Path
) -> None:
    src = local_skills(tmp_path / "src")
    rsync(str(src / "alpha"), "skillfs://skills/gamma", opts)
    rsync("skillfs://skills/gamma", "skillfs://skills/delta", opts)
    assert fs.cat("skills/delta/references/notes.md") == b"notes\n"
    assert fs.ls("skills", detail=False) == ["skills/delta", "skills/gamma"]


def test_rsync_of_a_file_directly_under_skills_fails(opts: dict[str, Any], tmp_path: Path) -> None:
    src = local_skills(tmp_path / "src")
    (src / "stray.md").write_bytes(b"x")
    with pytest.raises(ValueError, match="directly under skills/"):
        rsync(str(src), "skillfs://skills", opts)


# ----------------------------------------------------------------- DirFileSystem


def test_dirfs_rooted_at_a_skill_or_at_skills(fs: SkillFileSystem, opts: dict[str, Any]) -> None:
    skill = DirFileSystem(path="skills/x", fs=fs)
    skill.pipe("SKILL.md", SKILL_MD)
    with skill.open("refs/a.md", "wb") as f:
        f.write(b"a")
    assert skill.find("") == ["SKILL.md", "refs/a.md"]
    skill.mv("refs/a.md", "refs/b.md")
    assert skill.cat("refs/b.md") == b"a" and skill.info("refs")["name"] == "refs"
    skills = DirFileSystem(path="skills", fs=fs)
    skills.cp("x", "y", recursive=True)
    assert skills.ls("", detail=False) == ["x", "y"]
    skill.rm("refs", recursive=True)
    assert fs.find("skills/x") == ["skills/x/SKILL.md"]
    by_name = fsspec.filesystem(
        "dir", path="skills/y", target_protocol="skillfs", target_options=opts
    )
    assert by_name.cat("refs/b.md") == b"a"


# ----------------------------------------------------------------- caching chains


def test_caching_chains_read_and_write(
    fs: SkillFileSystem, opts: dict[str, Any], tmp_path: Path
) -> None:
    fs.pipe("skills/x/SKILL.md", SKILL_MD)
    for i, cache in enumerate(["simplecache", "filecache"]):
        layer = {"cache_storage": str(tmp_path / f"cache{i}")}
        url = f"{cache}::skillfs://skills/x/SKILL.md"
        with fsspec.open(url, "rb", skillfs=opts, **{cache: layer}) as f:
            assert f.read() == SKILL_MD
        with fsspec.open(f"{cache}::skillfs://skills/x/{cache}.md", "wb", skillfs=opts) as f:
            f.write(b"via " + cache.encode())
        assert fs.cat(f"skills/x/{cache}.md") == b"via " + cache.encode()
    blocks = fsspec.filesystem("blockcache", target_protocol="skillfs", target_options=opts)
    with blocks.open("skills/x/SKILL.md", "rb") as f:
        f.seek(4)
        assert f.read(4) == SKILL_MD[4:8]
    cached = fsspec.filesystem(
        "filecache",
        target_protocol="skillfs",
        target_options=opts,
        cache_storage=str(tmp_path / "checked"),
        check_files=True,
    )
    assert cached.cat("skills/x/SKILL.md") == SKILL_MD
    fs.pipe("skills/x/SKILL.md", b"v2")
    assert cached.cat("skills/x/SKILL.md") == b"v2"  # check_files compares the checksum
    path = UPath("simplecache::skillfs://skills/x/SKILL.md", skillfs=opts)
    assert path.read_bytes() == b"v2"


@pytest.mark.xfail(
    strict=True,
    reason="docs/fsspec.md, 'fsspec's generic operations': filecache keeps what it fetched "
    "unless check_files=True",
)
def test_filecache_sees_another_writers_update(
    fs: SkillFileSystem, opts: dict[str, Any], tmp_path: Path
) -> None:
    fs.pipe("skills/x/SKILL.md", b"v1")
    url = "filecache::skillfs://skills/x/SKILL.md"
    layer = {"cache_storage": str(tmp_path / "cache")}
    with fsspec.open(url, "rb", skillfs=opts, filecache=layer) as f:
        assert f.read() == b"v1"
    fs.pipe("skills/x/SKILL.md", b"v2")
    with fsspec.open(url, "rb", skillfs=opts, filecache=layer) as f:
        assert f.read() == b"v2"


# ----------------------------------------------------------------- compression


@pytest.mark.parametrize("suffix", ["gz", "bz2", "xz", "zst"])
def test_compressed_round_trips(fs: SkillFileSystem, opts: dict[str, Any], suffix: str) -> None:
    path = f"skills/x/data.txt.{suffix}"
    with fs.open(path, "wt", compression="infer") as f:
        f.write("text\n")
    with fs.open(path, "rt", compression="infer") as f:
        assert f.read() == "text\n"
    with fsspec.open(f"skillfs://{path}", "wb", compression="infer", **opts) as f:
        f.write(b"bytes")
    with fsspec.open(f"skillfs://{path}", "rb", compression="infer", **opts) as f:
        assert f.read() == b"bytes"
    assert fs.cat(path) != b"bytes"  # stored compressed


# ----------------------------------------------------------------- writes that raise


WRITES = [
    ("wb", None),
    ("xb", None),
    ("w", None),
    ("wt", None),
    ("wb", "gzip"),
    ("wt", "bz2"),
    ("wb", "xz"),
    ("wb", "zip"),
    ("wt", "zstd"),
]


@pytest.mark.parametrize(("mode", "compression"), WRITES)
def test_a_write_that_raises_publishes_nothing(
    fs: SkillFileSystem, mode: str, compression: str | None
) -> None:
    fs.pipe("skills/x/SKILL.md", SKILL_MD)
    data: Any = b"partial" if "b" in mode else "partial"
    for path in ("skills/x/new.md", "skills/x/SKILL.md"):
        if mode == "xb" and path.endswith("SKILL.md"):
            continue
        with pytest.raises(RuntimeError), fs.open(path, mode, compression=compression) as f:
            f.write(data)
            raise RuntimeError
    assert fs.find("skills/x") == ["skills/x/SKILL.md"]
    assert fs.cat("skills/x/SKILL.md") == SKILL_MD
    with fs.open("skills/x/new.md", mode, compression=compression) as f:
        f.write(data)  # a clean exit publishes, at once
    assert fs.exists("skills/x/new.md")


def test_a_closed_compressed_write_is_published_at_close(fs: SkillFileSystem) -> None:
    f = fs.open("skills/x/a.gz", "wb", compression="gzip")
    f.write(b"zipped")
    f.close()
    with fs.open("skills/x/a.gz", "rb", compression="gzip") as g:
        assert g.read() == b"zipped"


@pytest.mark.xfail(
    strict=True,
    reason="docs/fsspec.md, 'Writing': fsspec.open's OpenFile closes the file without "
    "telling it about the exception",
)
def test_fsspec_open_that_raises_publishes_nothing(
    fs: SkillFileSystem, opts: dict[str, Any]
) -> None:
    with pytest.raises(RuntimeError), fsspec.open("skillfs://skills/x/a.md", "wb", **opts) as f:
        f.write(b"partial")
        raise RuntimeError
    assert not fs.exists("skills/x/a.md")


@pytest.mark.xfail(
    strict=True,
    reason="docs/fsspec.md, 'Writing': simplecache:: and filecache:: write a local file and "
    "upload it on close whatever the with block did",
)
def test_simplecache_write_that_raises_publishes_nothing(
    fs: SkillFileSystem, opts: dict[str, Any]
) -> None:
    url = "simplecache::skillfs://skills/x/a.md"
    with pytest.raises(RuntimeError), fsspec.open(url, "wb", skillfs=opts) as f:
        f.write(b"partial")
        raise RuntimeError
    assert not fs.exists("skills/x/a.md")


# ----------------------------------------------------------------- memory://


def test_anonymous_memory_store_is_one_per_process(tmp_path: Path) -> None:
    """fsspec makes one instance per thread, and rsync copies on its IO thread: they all see
    one `memory://` store."""
    opts = {"store": "memory://", "agent_id": f"anon-{uuid.uuid4().hex[:8]}", "base": str(tmp_path)}
    src = local_skills(tmp_path / "src")
    rsync(str(src), "skillfs://skills", opts)
    assert SkillFileSystem(**opts, skip_instance_cache=True).find("skills") == [
        "skills/alpha/SKILL.md",
        "skills/alpha/references/notes.md",
        "skills/beta/SKILL.md",
    ]
    assert os.listdir(tmp_path) == ["src"]
