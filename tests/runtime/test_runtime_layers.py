"""Layers (docs/design.md §1): precedence, whole-skill shadowing, hidden directories, unusable
skills, LocalDir change detection and the Git layer following its remote."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import skillfs
from skillfs import GitRepo, LocalDir, Market, Scope, Skills
from skillfs.errors import InvalidArgument, StoreUnavailable
from skillfs.runtime import local_dir
from tests.runtime_helpers import GitRemote, md, memory_store, write_skill

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
TEAM = Scope.market("team")


def described(snap: skillfs.Snapshot) -> dict[str, str]:
    return {s.id: s.description for s in snap.skills}


def layer_skills(root: Path, names: list[str], origin: str) -> None:
    for n in names:
        write_skill(root, n, {"SKILL.md": md(n, f"from {origin}"), f"{origin}.txt": b"x"})


def test_precedence_across_all_four_layers(tmp_path: Path) -> None:
    """Global dir < marketplaces (in order, later wins) < agent-shared < per-user."""
    store = memory_store()
    layer_skills(tmp_path / "global", ["a", "b", "c", "d", "e", "f"], "global")
    remote = GitRemote(tmp_path)
    layer_skills(remote.work / "skills", ["c", "d", "e", "f"], "git")
    remote.commit("skills")
    for n in ["b", "c", "d", "e", "f"]:
        store.publish(TEAM, n, {"SKILL.md": md(n, "from market")})
    for n in ["e", "f"]:
        store.publish(SHARED, n, {"SKILL.md": md(n, "from shared")})
    store.publish(ALICE, "f", {"SKILL.md": md("f", "from user")})

    git = GitRepo(str(remote.bare), name="team-git", cache_dir=tmp_path / "cache")
    skills = Skills(store, "bot", "alice", [LocalDir(tmp_path / "global"), Market("team"), git])
    snap = skills.snapshot()
    assert described(snap) == {
        "a": "from global",
        "b": "from market",
        "c": "from git",  # git registered after the market: later wins
        "d": "from git",
        "e": "from shared",
        "f": "from user",
    }
    f = snap.skill("f")
    assert f.source == "user:bot/alice" and f.scope == ALICE and f.version == 1
    assert f.shadows == ("local:global", "market:team", "git:team-git", "shared:bot")
    assert snap.skill("c").source == "git:team-git" and snap.skill("c").scope is None
    assert snap.skill("a").source == "local:global" and snap.skill("a").version is None
    # whole-skill shadowing: no file of a lower layer leaks into the winner
    assert sorted(snap.skill("c").files) == ["SKILL.md", "git.txt"]
    assert "Skill: f (source: user:bot/alice, version 1)" in snap.load("f", "SKILL.md")

    # registration order decides between marketplaces
    swapped = Skills(store, "bot", "alice", [LocalDir(tmp_path / "global"), git, Market("team")])
    assert described(swapped.snapshot())["c"] == "from market"


def test_shadowing_and_unshadowing() -> None:
    store = memory_store()
    store.publish(SHARED, "reviewer", {"SKILL.md": md("reviewer", "shared one"), "a.md": b"A"})
    skills = Skills(store, "bot", "alice")
    assert skills.snapshot().skill("reviewer").source == "shared:bot"

    v = store.publish(ALICE, "reviewer", {"SKILL.md": md("reviewer", "alice's own")}).version
    snap = skills.snapshot()
    assert snap.skill("reviewer").description == "alice's own"
    assert list(snap.skill("reviewer").files) == ["SKILL.md"]  # the shared a.md does not leak

    store.delete(ALICE, "reviewer", expected_version=v)
    snap = skills.snapshot()
    assert snap.skill("reviewer").description == "shared one"
    assert sorted(snap.skill("reviewer").files) == ["SKILL.md", "a.md"]

    # an unusable override (references written before SKILL.md) hides nothing
    store.publish(ALICE, "reviewer", {"references/notes.md": b"draft"})
    snap = skills.snapshot()
    assert snap.skill("reviewer").source == "shared:bot"
    [problem] = snap.problems
    assert (problem.skill, problem.source) == ("reviewer", "user:bot/alice")
    assert any(f.rule == "skill-md-missing" for f in problem.findings)


def test_hidden_directories_and_unusable_skills_are_left_out(tmp_path: Path) -> None:
    store = memory_store()
    store.publish(SHARED, "_drafts/new-skill", {"SKILL.md": md("new-skill")})
    store.publish(SHARED, ".archive/old", {"SKILL.md": md("old")})
    store.publish(SHARED, "no-description", {"SKILL.md": b"---\nname: no-description\n---\nx\n"})
    store.publish(SHARED, "ok", {"SKILL.md": md("ok")})
    write_skill(tmp_path, "_drafts", {"SKILL.md": md("_drafts")})
    write_skill(tmp_path, ".hidden", {"SKILL.md": md("hidden")})
    write_skill(tmp_path, "local-ok", {"SKILL.md": md("local-ok"), ".DS_Store": b"junk"})
    (tmp_path / "README.md").write_text("not a skill")
    snap = Skills(store, "bot", "alice", [LocalDir(tmp_path)]).snapshot()
    assert [s.id for s in snap.skills] == ["local-ok", "ok"]
    assert list(snap.skill("local-ok").files) == ["SKILL.md"]
    assert [(p.skill, p.source) for p in snap.problems] == [("no-description", "shared:bot")]
    assert "description" in " ".join(f.message for f in snap.problems[0].findings)


def test_off_spec_but_usable_skill_is_shown_with_its_findings() -> None:
    store = memory_store()
    store.publish(SHARED, "Bad_Name", {"SKILL.md": md("Bad_Name")})
    snap = Skills(store, "bot", "alice").snapshot()
    assert [s.id for s in snap.skills] == ["Bad_Name"]
    assert snap.skill("Bad_Name").findings  # the spec violation, for operators


def test_local_dir_sees_edits_after_its_interval(tmp_path: Path) -> None:
    write_skill(tmp_path, "s", {"SKILL.md": md("s", "one"), "scripts/run.sh": b"#!/bin/sh\n"})
    os.chmod(tmp_path / "s" / "scripts" / "run.sh", 0o755)
    layer = LocalDir(tmp_path, check_interval=3600)
    skills = Skills(memory_store(), "bot", "alice", [layer])
    first = skills.snapshot()
    assert first.skill("s").files["scripts/run.sh"].mode == 0o755
    assert first.skill("s").files["SKILL.md"].mode == 0o644

    (tmp_path / "s" / "SKILL.md").write_bytes(md("s", "two"))
    write_skill(tmp_path, "t", {"SKILL.md": md("t")})
    assert skills.snapshot() is first  # not checked again within the interval
    layer.check_interval = 0
    snap = skills.snapshot()
    assert described(snap) == {"s": "two", "t": "Does things. Use when testing."}
    assert "one" in first.load("s")  # the old snapshot still reads what it saw (C4)

    unchanged = skills.snapshot()
    assert unchanged is snap  # a stat walk that finds nothing changed keeps the snapshot
    (tmp_path / "t" / "SKILL.md").unlink()
    (tmp_path / "t").rmdir()
    assert [s.id for s in skills.snapshot().skills] == ["s"]


def test_local_dir_rereads_only_changed_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_skill(tmp_path, "s", {"SKILL.md": md("s"), "big.md": b"b" * 1000})
    layer = LocalDir(tmp_path, check_interval=0)
    before = layer.state()
    (tmp_path / "s" / "new.md").write_bytes(b"n")
    read: list[str] = []
    real = local_dir.read_regular

    def spy(path: Path) -> tuple[bytes, os.stat_result]:
        read.append(path.relative_to(tmp_path).as_posix())
        return real(path)

    monkeypatch.setattr(local_dir, "read_regular", spy)
    after = layer.state()
    assert read == ["s/new.md"]  # the unchanged files are not read again
    assert after is not before
    assert after.manifests["s"].files["big.md"] == before.manifests["s"].files["big.md"]
    assert layer.state() is after  # nothing changed: same object


def test_git_layer_picks_up_a_new_commit(tmp_path: Path) -> None:
    remote = GitRemote(tmp_path)
    write_skill(remote.work / "skills", "deploy", {"SKILL.md": md("deploy", "v1")})
    write_skill(remote.work / "skills", "lint", {"SKILL.md": md("lint"), "run.py": b"print()"})
    os.chmod(remote.work / "skills" / "lint" / "run.py", 0o755)
    (remote.work / "README.md").write_text("a repo with a skills/ folder")
    first_commit = remote.commit("one")

    git = GitRepo(str(remote.bare), cache_dir=tmp_path / "cache", check_interval=3600)
    skills = Skills(memory_store(), "bot", "alice", [git])
    first = skills.snapshot()
    assert described(first) == {"deploy": "v1", "lint": "Does things. Use when testing."}
    assert git.head == first_commit
    assert first.skill("lint").files["run.py"].mode == 0o755

    (remote.work / "skills" / "deploy" / "SKILL.md").write_bytes(md("deploy", "v2"))
    write_skill(remote.work / "skills", "new", {"SKILL.md": md("new")})
    second_commit = remote.commit("two")
    assert skills.snapshot() is first  # HEAD not checked again within the interval
    git.check_interval = 0
    snap = skills.snapshot()
    assert git.head == second_commit
    assert described(snap)["deploy"] == "v2" and "new" in described(snap)
    assert "v1" in first.load("deploy")  # C4: the old snapshot reads the old commit
    assert skills.snapshot() is snap  # HEAD checked, unchanged: nothing fetched or rebuilt

    # a second GitRepo on the same cache directory reuses the clone
    again = GitRepo(str(remote.bare), cache_dir=tmp_path / "cache")
    assert set(again.state().manifests) == {"deploy", "lint", "new"}


def test_git_repo_without_skills_folder_uses_its_top_level(tmp_path: Path) -> None:
    remote = GitRemote(tmp_path)
    write_skill(remote.work, "top", {"SKILL.md": md("top")})
    (remote.work / "LICENSE").write_text("MIT")
    remote.commit("one")
    snap = Skills(
        memory_store(), "bot", "alice", [GitRepo(str(remote.bare), cache_dir=tmp_path / "c")]
    ).snapshot()
    assert [s.id for s in snap.skills] == ["top"]


def test_git_layer_keeps_serving_its_clone_when_the_remote_is_gone(tmp_path: Path) -> None:
    remote = GitRemote(tmp_path)
    write_skill(remote.work, "top", {"SKILL.md": md("top")})
    remote.commit("one")
    git = GitRepo(str(remote.bare), cache_dir=tmp_path / "c", check_interval=0)
    assert set(git.state().manifests) == {"top"}
    remote.bare.rename(tmp_path / "moved.git")
    assert set(git.state().manifests) == {"top"}
    with pytest.raises(StoreUnavailable, match="git"):
        GitRepo(str(tmp_path / "nowhere.git"), cache_dir=tmp_path / "c").state()


def test_layers_must_have_distinct_names(tmp_path: Path) -> None:
    (tmp_path / "a" / "skills").mkdir(parents=True)
    (tmp_path / "b" / "skills").mkdir(parents=True)
    with pytest.raises(InvalidArgument, match="name="):
        Skills(
            memory_store(),
            "bot",
            "alice",
            [LocalDir(tmp_path / "a" / "skills"), LocalDir(tmp_path / "b" / "skills")],
        )
    Skills(
        memory_store(),
        "bot",
        "alice",
        [LocalDir(tmp_path / "a" / "skills"), LocalDir(tmp_path / "b" / "skills", name="b")],
    )
    with pytest.raises(InvalidArgument):
        Skills(memory_store(), "bot", "_reserved")


def test_store_layers_follow_edits_in_every_scope() -> None:
    store = memory_store()
    skills = Skills(store, "bot", "alice", [Market("team")])
    assert skills.snapshot().skills == ()
    for scope, n in [(TEAM, "m"), (SHARED, "s"), (ALICE, "u")]:
        store.publish(scope, n, {"SKILL.md": md(n)})
        assert n in described(skills.snapshot())


def test_git_layer_follows_a_named_branch(tmp_path: Path) -> None:
    remote = GitRemote(tmp_path)
    write_skill(remote.work, "s", {"SKILL.md": md("s", "on main")})
    remote.commit("main")
    remote.git("push", "-q", "origin", "HEAD:release")
    git = GitRepo(str(remote.bare), ref="release", cache_dir=tmp_path / "c", check_interval=0)
    assert git.state().manifests["s"].frontmatter == {"name": "s", "description": "on main"}
    (remote.work / "s" / "SKILL.md").write_bytes(md("s", "on main, later"))
    remote.commit("main moves, release does not")
    assert git.state().manifests["s"].frontmatter == {"name": "s", "description": "on main"}
    remote.git("push", "-q", "origin", "HEAD:release")
    described = git.state().manifests["s"].frontmatter
    assert described == {"name": "s", "description": "on main, later"}


def test_local_dir_skips_symlinks_unless_asked_and_then_stays_inside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28: `references/notes.md -> ~/.ssh/id_rsa` was served to the model and
    materialized. Links are left out, named in one warning; `follow_symlinks=True` follows a
    linked skill directory and links to files inside the skills directory or the skill."""
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\n")
    root = tmp_path / "skills"
    write_skill(root, "s", {"SKILL.md": md("s"), "references/style.md": b"style\n"})
    (root / "s" / "references" / "notes.md").symlink_to(secret)
    (root / "s" / "references" / "alias.md").symlink_to("style.md")  # inside the skill
    (root / "s" / "home").symlink_to(secret.parent.parent)  # a directory: never entered
    elsewhere = tmp_path / "src"
    write_skill(elsewhere, "linked", {"SKILL.md": md("linked"), "real.md": b"real\n"})
    (elsewhere / "linked" / "same.md").symlink_to("real.md")
    (root / "linked").symlink_to(elsewhere / "linked")  # a skill linked into the directory

    store = memory_store()
    caplog.set_level(logging.WARNING, logger="skillfs.runtime")
    layer = LocalDir(root, check_interval=0)
    skills = Skills(store, "bot", "alice", [layer])
    snap = skills.snapshot()
    assert sorted(snap.skill("s").files) == ["SKILL.md", "references/style.md"]
    assert [s.id for s in snap.skills] == ["s"]
    [warning] = [r.getMessage() for r in caplog.records]
    for rel in ("linked", "s/home", "s/references/alias.md", "s/references/notes.md"):
        assert rel in warning
    assert f"s/references/notes.md: a symbolic link (to {secret})" in warning
    assert "follow_symlinks=True" in warning
    cache = tmp_path / "cache"
    snap.materialize(cache)
    assert not [
        p for p in cache.rglob("*") if b"PRIVATE KEY" in (p.read_bytes() if p.is_file() else b"")
    ]
    caplog.clear()
    skills.snapshot()
    assert not caplog.records  # said once, not at every check

    followed = Skills(store, "bot", "alice", [LocalDir(root, follow_symlinks=True)]).snapshot()
    assert [s.id for s in followed.skills] == ["linked", "s"]
    assert sorted(followed.skill("s").files) == [
        "SKILL.md",
        "references/alias.md",
        "references/style.md",
    ]
    assert followed.load("s", "references/alias.md") == "style\n"
    assert followed.load("linked", "same.md") == "real\n"  # inside the linked skill's own directory
    assert "outside the skills directory" in caplog.text
    assert "s/references/notes.md" in caplog.text and "s/home" in caplog.text
