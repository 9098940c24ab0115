"""One write can never make a scope unreadable: what goes into a manifest is checked before
the commit, and a stored manifest that cannot be read fails only its own skill."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import pytest

import skillfs
from skillfs import File, Scope
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument, InvalidPath, InvalidSkill
from skillfs.model import FileEntry, Manifest
from skillfs.spec.skill_md import MAX_DEPTH, inspect_skill
from skillfs.store.blobs import sha256
from skillfs.store.rules import storable
from tests.stores import url_for

ALICE = Scope.user("support-bot", "alice")
GOOD_MD = b"---\nname: good\ndescription: Does things.\n---\nbody\n"


def nested_md(levels: int) -> bytes:
    """A SKILL.md whose metadata nests `levels` mappings deep."""
    lines = "".join("  " * (i + 1) + f"k{i}:\n" for i in range(levels))
    return (
        b"---\nname: deep\ndescription: Nested.\nmetadata:\n"
        + lines.encode()
        + b"  " * (levels + 1)
        + b"v: x\n---\nbody\n"
    )


def deep_dict(levels: int) -> dict[str, object]:
    d: dict[str, object] = {"v": "x"}
    for _ in range(levels):
        d = {"k": d}
    return d


def test_deep_frontmatter_is_a_finding_and_the_scope_stays_readable(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    store.publish(ALICE, "good", {"SKILL.md": GOOD_MD})
    store.publish(ALICE, "deep", {"SKILL.md": nested_md(250)})
    loaded = other.manifests(ALICE)
    assert sorted(loaded) == ["deep", "good"]
    deep = loaded["deep"]
    assert deep.frontmatter is None and not deep.usable
    assert [f.rule for f in deep.errors] == ["yaml-depth"]
    assert other.read(ALICE, "deep", "SKILL.md") == nested_md(250)
    assert loaded["good"].usable


def test_frontmatter_at_the_depth_limit_is_kept() -> None:
    frontmatter, findings, _ = inspect_skill("deep", {"SKILL.md": nested_md(MAX_DEPTH - 3)})
    assert frontmatter is not None and not [f for f in findings if f.rule == "yaml-depth"]
    frontmatter, findings, _ = inspect_skill("deep", {"SKILL.md": nested_md(MAX_DEPTH)})
    assert frontmatter is None and [f.rule for f in findings] == ["yaml-depth"]


@pytest.mark.parametrize("mtime", [math.nan, math.inf, -math.inf, 1e308, -1e308])
def test_a_file_time_that_is_not_a_time_writes_nothing(store: skillfs.Store, mtime: float) -> None:
    store.publish(ALICE, "good", {"SKILL.md": GOOD_MD})
    before = store.revision(ALICE)
    with pytest.raises(InvalidArgument, match="is not a time"):
        store.publish(ALICE, "bad", {"SKILL.md": GOOD_MD, "a.txt": File(b"x", mtime=mtime)})
    assert store.revision(ALICE) == before and store.skills(ALICE) == ["good"]


def test_a_scope_built_directly_is_checked(store: skillfs.Store) -> None:
    with pytest.raises(InvalidPath, match="invalid user id"):
        Scope(kind="user", agent_id="support-bot", user_id="bob/skills/x")
    with pytest.raises(InvalidPath, match="has no market id"):
        Scope(kind="shared", agent_id="support-bot", market_id="team")
    forged = Scope.model_construct(kind="user", agent_id="support-bot", user_id="a/b")
    with pytest.raises(InvalidPath, match="invalid user id"):
        store.publish(forged, "good", {"SKILL.md": GOOD_MD})
    assert store.agents() == []


# ------------------------------------------------- a manifest stored before these checks


@pytest.fixture(params=["sqlite", "redis", "etcd"])
def raw_store(request: pytest.FixtureRequest, tmp_path: Path) -> skillfs.Store:
    """A store whose engine serializes manifests, to plant what an older version wrote."""
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    request.addfinalizer(s.close)
    return s


def _plant(store: skillfs.Store, skill: str, **broken: object) -> None:
    """Write a manifest straight through the engine, as skillfs did before its checks."""
    sha = sha256(GOOD_MD)
    store.engine.put_blob(sha, [GOOD_MD], 0.0)
    entry = FileEntry(sha256=sha, size=len(GOOD_MD), mode=0o644, mtime=1.0)
    files = {"SKILL.md": entry}
    if "mtime" in broken:
        files["a.txt"] = FileEntry(sha256=sha, size=len(GOOD_MD), mode=0o644, mtime=1.0)
        object.__setattr__(files["a.txt"], "mtime", broken.pop("mtime"))  # past validation
    m = Manifest(
        skill=skill,
        version=1,
        commit_id=uuid.uuid4().hex,
        committed_at=1.0,
        frontmatter={"name": skill, "description": "d"},
        files=files,
    )
    if "frontmatter" in broken:
        object.__setattr__(m, "frontmatter", broken["frontmatter"])
    store.engine.commit(ALICE.domain, [CommitOp.model_construct(scope=ALICE, manifest=m, expect=0)])


@pytest.mark.parametrize(
    "broken", [{"frontmatter": deep_dict(220)}, {"mtime": math.nan}], ids=["deep", "nan"]
)
def test_an_unreadable_stored_manifest_fails_only_its_skill_and_can_be_repaired(
    raw_store: skillfs.Store, broken: dict[str, object]
) -> None:
    store = raw_store
    store.publish(ALICE, "good", {"SKILL.md": GOOD_MD})
    _plant(store, "broken", **broken)
    loaded = store.manifests(ALICE)
    assert sorted(loaded) == ["broken", "good"]
    m = loaded["broken"]
    assert m.version == 1 and not m.usable
    assert [f.rule for f in m.errors] == ["manifest-unreadable"]
    assert "publish the skill again" in m.errors[0].message
    assert store.read(ALICE, "broken", "SKILL.md") == GOOD_MD
    assert [h.version for h in store.history(ALICE, "broken")] == [1]
    # the repair: publishing over it (with the version it shows) makes it whole again
    fixed = GOOD_MD.replace(b"name: good", b"name: broken")
    c = store.publish(ALICE, "broken", {"SKILL.md": fixed}, expected_version=m.version)
    assert c.version == 2
    assert store.manifest(ALICE, "broken").usable and not store.manifest(ALICE, "broken").errors
    store.delete(ALICE, "broken", expected_version=2)
    assert store.skills(ALICE) == ["good"]


@pytest.mark.server
def test_the_server_refuses_a_manifest_that_would_not_read_back(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A grpc:// client commits manifests it built itself: the server holds them to the
    same rules (a user-scope token's NaN time, say), with a clear error, writing nothing."""
    store = skillfs.open_store(url_for(request, "grpc", tmp_path))
    request.addfinalizer(store.close)
    store.publish(ALICE, "good", {"SKILL.md": GOOD_MD})
    before = store.revision(ALICE)
    with pytest.raises(InvalidArgument, match=r"not valid at files\.a\.txt\.mtime"):
        _plant(store, "bad", mtime=math.nan)  # JSON has no NaN: it arrives as null
    with pytest.raises(InvalidArgument, match="is not a time"):
        _plant(store, "bad", mtime=1e308)
    with pytest.raises(InvalidArgument, match="recursion limit exceeded"):
        _plant(store, "deep", frontmatter=deep_dict(220))
    assert store.revision(ALICE) == before and store.skills(ALICE) == ["good"]


def test_a_manifest_that_would_not_read_back_is_refused_before_the_commit() -> None:
    """The last net under the specific checks: whatever a future field holds."""
    m = Manifest(
        skill="deep",
        version=1,
        commit_id="c",
        committed_at=1.0,
        frontmatter=deep_dict(220),
        files={},
    )
    with pytest.raises(InvalidSkill, match="cannot be stored readably"):
        storable(ALICE, m)
