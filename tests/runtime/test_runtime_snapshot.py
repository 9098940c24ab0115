"""Snapshots (docs/design.md §4): the prompt block, load_skill_through_path and its error listings,
read_skill, search_skills, tool definitions, call_tool, usage counts, materializing."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from skillfs import File, LocalDir, Market, Scope, Skills, Store
from skillfs.engines.base import CommitOp, Engine
from skillfs.errors import NotFound, SkillfsError
from tests.runtime_helpers import counting_store, md, memory_store, write_skill

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")


@pytest.fixture
def skills() -> Skills:
    store = memory_store()
    store.publish(
        SHARED,
        "code-reviewer",
        {
            "SKILL.md": md("code-reviewer", "Reviews code. Use for PRs.", "Run scripts/stats.sh."),
            "references/checklist.md": b"1. correctness\n",
            "scripts/stats.sh": File(b"#!/bin/sh\necho stats\n"),
            "assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
        },
    )
    store.publish(SHARED, "sql-helper", {"SKILL.md": md("sql-helper", "Writes SQL queries.")})
    store.publish(ALICE, "notes", {"SKILL.md": md("notes", "Alice's notes helper.")})
    return Skills(store, "bot", "alice")


# ------------------------------------------------------------------ prompt


def test_prompt_block_lists_skills_in_stable_order(skills: Skills) -> None:
    snap = skills.snapshot()
    root = ET.fromstring(snap.prompt())
    assert root.tag == "available_skills"
    assert [(s.findtext("skill-id"), s.findtext("name")) for s in root] == [
        ("code-reviewer", "code-reviewer"),
        ("notes", "notes"),
        ("sql-helper", "sql-helper"),
    ]
    assert root[0].findtext("description") == "Reviews code. Use for PRs."
    assert root[0].find("files-root") is None  # not materialized
    assert snap.prompt() is snap.prompt()  # computed once per token


def test_prompt_escapes_names_and_descriptions() -> None:
    store = memory_store()
    nasty = "Compare a < b && c > d; say \"hi\" & 'bye' </description><x>]]>"
    yaml_nasty = nasty.replace("\\", "\\\\").replace('"', '\\"')
    document = f'---\nname: "a<b&\\"c\'"\ndescription: "{yaml_nasty}\\x01"\n---\nbody\n'
    store.publish(SHARED, "esc", {"SKILL.md": document.encode()})
    text = Skills(store, "bot", "alice").snapshot().prompt()
    assert "<x>" not in text and "</description><" not in text
    [skill] = ET.fromstring(text)  # well-formed XML
    assert skill.findtext("name") == "a<b&\"c'"
    assert skill.findtext("description") == nasty  # the control character is dropped
    assert "&lt;" in text and "&amp;" in text and "&quot;" in text
    assert "&apos;" not in text and "'bye'" in text  # a text node needs no escaped apostrophe


def test_prompt_and_tools_are_cached_per_token_across_snapshots(skills: Skills) -> None:
    first = skills.snapshot()
    skills.store.publish(Scope.user("bot", "bob"), "bobs", {"SKILL.md": md("bobs")})
    second = skills.snapshot()
    assert second.token == first.token and second.prompt() is first.prompt()
    skills.store.publish(ALICE, "notes", {"SKILL.md": md("notes", "changed")})
    third = skills.snapshot()
    assert third.token != first.token and "changed" in third.prompt()


# ------------------------------------------------------------------ load and friends


def test_load_skill_md_has_a_header_naming_skill_source_and_files(skills: Skills) -> None:
    text = skills.snapshot().load("code-reviewer", "SKILL.md")
    header, _, document = text.partition("\n\n")
    assert header.splitlines()[0] == "Skill: code-reviewer (source: shared:bot, version 1)"
    assert "assets/logo.png, references/checklist.md, scripts/stats.sh" in header
    assert document.startswith("---\nname: code-reviewer\n")


def test_load_other_paths_returns_the_file(skills: Skills) -> None:
    snap = skills.snapshot()
    assert snap.load("code-reviewer", "references/checklist.md") == "1. correctness\n"
    assert snap.load("code-reviewer", "./references/checklist.md") == "1. correctness\n"
    assert "binary file of 10 bytes" in snap.load("code-reviewer", "assets/logo.png")
    assert snap.read_bytes("code-reviewer", "assets/logo.png").startswith(b"\x89PNG")


def test_wrong_skill_id_lists_every_available_id(skills: Skills) -> None:
    snap = skills.snapshot()
    with pytest.raises(NotFound) as err:
        snap.load("code-reviwer", "SKILL.md")
    assert isinstance(err.value, SkillfsError)
    message = str(err.value)
    assert "Did you mean 'code-reviewer'?" in message
    assert message.endswith("Available skill ids: code-reviewer, notes, sql-helper")
    text = snap.call_tool("load_skill_through_path", {"skill_id": "nope", "path": "SKILL.md"})
    assert text.startswith("Error: unknown skill id 'nope'")
    assert "code-reviewer, notes, sql-helper" in text
    with pytest.raises(NotFound, match=r"^unknown skill id 7\. Available skill ids: code-rev"):
        snap.load(7, "SKILL.md")  # type: ignore[arg-type]  # a model's JSON may hold a number


def test_wrong_path_lists_every_path_of_the_skill(skills: Skills) -> None:
    snap = skills.snapshot()
    expected = "assets/logo.png, references/checklist.md, scripts/stats.sh"
    for bad in ["references/checklst.md", "../sql-helper/SKILL.md", "/etc/passwd", ""]:
        with pytest.raises(NotFound) as err:
            snap.load("code-reviewer", bad)
        assert expected in str(err.value), bad
    text = snap.call_tool(
        "load_skill_through_path", {"skill_id": "code-reviewer", "path": "references/x.md"}
    )
    assert text.startswith("Error: skill 'code-reviewer' has no file 'references/x.md'")
    assert "SKILL.md, " + expected in text


def test_read_skill_returns_the_body_without_frontmatter(skills: Skills) -> None:
    body = skills.snapshot().read_skill("code-reviewer")
    assert body == "# code-reviewer\nRun scripts/stats.sh.\n"


def test_search_skills_over_name_description_and_paths(skills: Skills) -> None:
    snap = skills.snapshot()
    assert [s.id for s in snap.search_skills("sql")] == ["sql-helper"]
    assert [s.id for s in snap.search_skills("PRs reviews")] == ["code-reviewer"]
    assert [s.id for s in snap.search_skills("checklist")] == ["code-reviewer"]
    assert [s.id for s in snap.search_skills("notes")] == ["notes"]
    assert snap.search_skills("nothing-like-this") == []
    # name hits rank before description hits
    assert [s.id for s in snap.search_skills("e")][:1] == ["code-reviewer"]
    text = snap.call_tool("search_skills", json.dumps({"query": "zzz"}))
    assert "No skill matches 'zzz'" in text and "code-reviewer, notes, sql-helper" in text


def test_odd_tool_input_is_an_error_text_and_search_lines_are_one_per_skill() -> None:
    """Outside testing: a lone surrogate in a path raised UnicodeEncodeError and arguments
    of None a TypeError out of call_tool; a block description spread one search hit over
    several lines; the prompt kept a name's surrounding spaces (skills-ref strips them)."""
    store = memory_store()
    text = b"---\nname: ' demo '\ndescription: |\n  First line.\n  Second line.\n---\nBody\n"
    store.publish(SHARED, "demo", {"SKILL.md": text})
    snap = Skills(store, "bot", "u").snapshot()
    bad = snap.call_tool("load_skill_through_path", '{"skill_id": "demo", "path": "r/\\udce9.md"}')
    assert bad.startswith("Error: file path") and "not valid UTF-8 text" in bad
    assert snap.tool_outcome("read_skill", None) == (  # type: ignore[arg-type]
        "Error: invalid arguments for read_skill: arguments must be a JSON object",
        True,
    )
    assert snap.call_tool("search_skills", {"query": "first"}) == "demo: First line. Second line."
    assert "<name>demo</name>" in snap.prompt()


# ------------------------------------------------------------------ tools


def test_tool_definitions_in_both_shapes(skills: Skills) -> None:
    snap = skills.snapshot()
    openai = snap.tools()
    assert [t["function"]["name"] for t in openai] == [
        "load_skill_through_path",
        "read_skill",
        "search_skills",
    ]
    load = openai[0]["function"]["parameters"]
    assert load["required"] == ["skill_id", "path"]
    assert load["properties"]["skill_id"] == {
        "type": "string",
        "description": "The <skill-id> of a skill listed in <available_skills>.",
    }
    anthropic = snap.tools(style="anthropic")
    assert anthropic[0]["input_schema"] == load and "function" not in anthropic[0]
    enum = snap.tools(enum=True)[0]["function"]["parameters"]["properties"]["skill_id"]["enum"]
    assert enum == ["code-reviewer", "notes", "sql-helper"]
    # a plain-string schema does not change when a skill is added; the enum does
    skills.store.publish(SHARED, "zeta", {"SKILL.md": md("zeta")})
    later = skills.snapshot()
    assert later.tools() == openai and later.tools(enum=True) != snap.tools(enum=True)
    openai[0]["function"]["name"] = "mutated"  # callers get copies
    assert snap.tools()[0]["function"]["name"] == "load_skill_through_path"


def test_call_tool_runs_each_tool_and_reports_bad_calls_as_text(skills: Skills) -> None:
    snap = skills.snapshot()
    assert snap.call_tool(
        "load_skill_through_path", '{"skill_id": "sql-helper", "path": "SKILL.md"}'
    ).startswith("Skill: sql-helper")
    assert snap.call_tool("read_skill", {"skill_id": "notes"}) == "# notes\n"
    assert snap.call_tool("search_skills", {"query": "sql"}).startswith("sql-helper: ")
    assert snap.call_tool("rm_rf", {}).startswith("Error: unknown tool 'rm_rf'")
    assert "must be a string" in snap.call_tool("read_skill", {"skill_id": 3})
    assert "invalid arguments" in snap.call_tool("read_skill", "{not json")
    assert "invalid arguments" in snap.call_tool("read_skill", "[1]")


# ------------------------------------------------------------------ isolation (C4)


def test_snapshot_reads_as_of_its_revision_while_edits_land() -> None:
    store = memory_store()
    store.publish(SHARED, "s", {"SKILL.md": md("s", "v1", "body v1"), "r.md": b"ref v1"})
    skills = Skills(store, "bot", "alice")
    old = skills.snapshot()
    store.publish(SHARED, "s", {"SKILL.md": md("s", "v2", "body v2"), "r.md": b"ref v2"})
    store.publish(SHARED, "other", {"SKILL.md": md("other")})
    store.blobs.clear()  # cold cache: read by hash
    assert "body v1" in old.load("s") and old.load("s", "r.md") == "ref v1"
    assert [s.id for s in old.skills] == ["s"] and "v1" in old.prompt()
    new = skills.snapshot()
    assert "body v2" in new.load("s") and new.load("s", "r.md") == "ref v2"
    assert old.load("s", "r.md") == "ref v1"


# ------------------------------------------------------------------ usage


def test_usage_is_counted_off_the_hot_path_and_flushed_in_batches() -> None:
    store, counter = counting_store()
    store.publish(SHARED, "s", {"SKILL.md": md("s"), "r.md": b"r"})
    store.publish(SHARED, "t", {"SKILL.md": md("t")})
    alice, bob = Skills(store, "bot", "alice"), Skills(store, "bot", "bob")
    snap_a, snap_b = alice.snapshot(), bob.snapshot()
    snap_a.load("s"), snap_a.load("s", "r.md")  # warm the blob cache
    counter.clear()
    me = threading.get_ident()
    for _ in range(10):
        snap_a.load("s")
    snap_a.read_skill("t")
    snap_b.call_tool("load_skill_through_path", {"skill_id": "t", "path": "SKILL.md"})
    snap_b.call_tool("load_skill_through_path", {"skill_id": "zz", "path": "SKILL.md"})
    assert counter.names(me) == []  # loads of cached files never touch the store
    alice.flush_usage()  # both users of the agent share one recorder: one batch
    assert counter.names(me) == ["add_usage"]
    assert store.usage.counts("bot") == {("alice", "s"): 12, ("alice", "t"): 1, ("bob", "t"): 1}
    counter.clear()
    alice.flush_usage()
    assert counter.names(me) == []  # nothing pending: no call
    snap_a.load("t")
    alice.close()  # closing writes what is pending
    assert store.usage.counts("bot")[("alice", "t")] == 2


# ------------------------------------------------------------------ materialize


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            if not n.startswith(".skillfs"):
                out[p.relative_to(root).as_posix()] = (
                    p.read_bytes(),
                    stat.S_IMODE(p.stat().st_mode),
                )
    return out


def test_materialize_layout_modes_and_files_root(skills: Skills, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_skill(local, "loc", {"SKILL.md": md("loc"), "run.py": b"print(1)\n"})
    os.chmod(local / "loc" / "run.py", 0o755)
    skills = Skills(skills.store, "bot", "alice", [LocalDir(local)])
    snap = skills.snapshot().materialize(tmp_path / ".skills-cache")
    root = (tmp_path / ".skills-cache").resolve()
    files = tree(root)
    assert files["shared/code-reviewer/scripts/stats.sh"] == (b"#!/bin/sh\necho stats\n", 0o755)
    assert files["shared/code-reviewer/references/checklist.md"][1] == 0o644
    assert files["user/notes/SKILL.md"][0] == md("notes", "Alice's notes helper.")
    assert files["local-local/loc/run.py"] == (b"print(1)\n", 0o755)
    assert len(files) == 8
    assert snap.files_root == root
    [entry] = [s for s in ET.fromstring(snap.prompt()) if s.findtext("skill-id") == "notes"]
    assert entry.findtext("files-root") == str(root / "user" / "notes")
    assert f"Files root: {root / 'shared' / 'code-reviewer'}" in snap.load("code-reviewer")
    assert ET.fromstring(skills.snapshot().prompt())[0].find("files-root") is None


def test_materialize_shown_as_names_the_sandbox_path(skills: Skills, tmp_path: Path) -> None:
    """Files are written under the host directory; the model is told the container's mount."""
    host = tmp_path / "cache"
    snap = skills.snapshot().materialize(host, shown_as="/workspace/.skills-cache")
    written = (host / "user" / "notes" / "SKILL.md").read_bytes()
    assert written == md("notes", "Alice's notes helper.")
    assert snap.files_root == host.resolve() and str(snap.shown_root) == "/workspace/.skills-cache"
    [entry] = [s for s in ET.fromstring(snap.prompt()) if s.findtext("skill-id") == "notes"]
    assert entry.findtext("files-root") == "/workspace/.skills-cache/user/notes"
    assert str(tmp_path) not in snap.prompt() and str(tmp_path) not in snap.load("notes")
    assert "Files root: /workspace/.skills-cache/user/notes\n" in snap.load("notes")
    for bad in ("workspace/cache", "/workspace/../etc", "/a\nb"):
        with pytest.raises(SkillfsError, match="shown_as="):
            skills.snapshot().materialize(host, shown_as=bad)


def test_materialize_reads_every_store_layer_in_one_round_trip(tmp_path: Path) -> None:
    store, counter = counting_store()
    store = Store(cast(Engine, counter), blob_cache_bytes=0)  # nothing warm: all is read
    store.publish(SHARED, "s", {"SKILL.md": md("s"), "r.md": b"shared ref"})
    store.publish(ALICE, "a", {"SKILL.md": md("a"), "r.md": b"alice ref"})
    store.publish(Scope.market("team"), "m", {"SKILL.md": md("m")})
    snap = Skills(store, "bot", "alice", [Market("team")]).snapshot()
    counter.clear()
    me = threading.get_ident()
    snap.materialize(tmp_path / "cache")
    assert counter.names(me) == ["get_chunks"]  # market, shared and user files together
    files = tree(tmp_path / "cache")
    assert files["shared/s/r.md"][0] == b"shared ref" and files["user/a/r.md"][0] == b"alice ref"
    assert len(files) == 5


def test_materialize_is_incremental_and_removes_skills_that_left(
    skills: Skills, tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    skills.snapshot().materialize(root)
    checklist = root / "shared/code-reviewer/references/checklist.md"
    stats_sh = root / "shared/code-reviewer/scripts/stats.sh"
    inode, mtime = checklist.stat().st_ino, checklist.stat().st_mtime_ns
    store = skills.store
    store.publish(
        SHARED,
        "code-reviewer",
        {
            "SKILL.md": md("code-reviewer", "Reviews code. Use for PRs."),
            "references/checklist.md": b"1. correctness\n",  # same bytes
            "scripts/stats.sh": File(b"#!/bin/sh\necho v2\n"),
        },
    )
    store.publish(ALICE, "sql-helper", {"SKILL.md": md("sql-helper", "alice's sql")})
    store.delete(ALICE, "notes")
    skills.snapshot().materialize(root)
    assert checklist.stat().st_ino == inode and checklist.stat().st_mtime_ns == mtime
    assert stats_sh.read_bytes() == b"#!/bin/sh\necho v2\n"
    assert stat.S_IMODE(stats_sh.stat().st_mode) == 0o755
    assert not (root / "shared/code-reviewer/assets").exists()  # file left, dir pruned
    assert not (root / "user/notes").exists()  # skill left the snapshot
    assert not (root / "shared/sql-helper").exists()  # now shadowed by alice's copy
    assert (root / "user/sql-helper/SKILL.md").read_bytes() == md("sql-helper", "alice's sql")
    assert not [p for p in root.rglob("*.tmp")]  # no temporary files left behind

    # a file altered on disk is put back; an unchanged snapshot rewrites nothing
    stats_sh.write_bytes(b"tampered")
    snap = skills.snapshot()
    snap.materialize(root)
    assert stats_sh.read_bytes() == b"#!/bin/sh\necho v2\n"
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    snap.materialize(root)
    assert before == {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_materialize_ignores_state_entries_outside_its_root(skills: Skills, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    root.mkdir()
    (root / ".skillfs-state.json").write_text(
        json.dumps({"token": "x", "files": {"../victim.txt": ["0", 420]}})
    )
    skills.snapshot().materialize(root)
    assert victim.read_text() == "keep me"


def test_materialize_writes_permission_bits_only(skills: Skills, tmp_path: Path) -> None:
    """A manifest stored before modes were checked may carry setuid/setgid bits: the files on
    disk get the permission bits only."""
    store = skills.store
    m = store.manifest(SHARED, "code-reviewer")
    files = {
        p: e.model_copy(update={"mode": 0o6755}) if p == "scripts/stats.sh" else e
        for p, e in m.files.items()
    }
    legacy = m.model_copy(update={"version": m.version + 1, "commit_id": "legacy", "files": files})
    store.engine.commit(SHARED.domain, [CommitOp(scope=SHARED, manifest=legacy, expect=m.version)])
    root = tmp_path / "cache"
    skills.snapshot().materialize(root)
    stats_sh = root / "shared/code-reviewer/scripts/stats.sh"
    assert stat.S_IMODE(stats_sh.stat().st_mode) == 0o755


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask for one test (which may change it), the process's put back after."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_materialize_respects_the_umask_and_keeps_owner_only_files_owner_only(
    tmp_path: Path, umask_022: None
) -> None:
    """Issue 28: stored 0o777/0o666 were applied as they are whatever the umask, and a 0600
    LocalDir file became 0644. A file gets at most 0o755/0o644, narrowed by the umask, and an
    owner-only file stays owner-only."""
    store = memory_store()
    store.publish(
        SHARED,
        "m",
        {
            "SKILL.md": md("m"),
            "open.sh": File(b"#!/bin/sh\n", mode=0o777),
            "open.txt": File(b"text\n", mode=0o666),
            "group.txt": File(b"text\n", mode=0o640),
        },
    )
    local = tmp_path / "local"
    write_skill(local, "loc", {"SKILL.md": md("loc"), "token.txt": b"t", "mine.sh": b"#!/bin/sh\n"})
    os.chmod(local / "loc" / "token.txt", 0o600)
    os.chmod(local / "loc" / "mine.sh", 0o700)
    snap = Skills(store, "bot", "alice", [LocalDir(local)]).snapshot()
    assert snap.skill("loc").files["token.txt"].mode == 0o600

    snap.materialize(tmp_path / "default")
    files = tree(tmp_path / "default")
    assert files["shared/m/open.sh"][1] == 0o755
    assert files["shared/m/open.txt"][1] == 0o644
    assert files["shared/m/group.txt"][1] == 0o640
    assert files["local-local/loc/token.txt"][1] == 0o600
    assert files["local-local/loc/mine.sh"][1] == 0o700

    os.umask(0o077)
    snap.materialize(tmp_path / "private")
    modes = {rel: mode for rel, (_, mode) in tree(tmp_path / "private").items()}
    assert modes["shared/m/open.sh"] == 0o700 and modes["shared/m/open.txt"] == 0o600
    assert set(modes.values()) <= {0o600, 0o700}


def test_materialize_puts_back_a_file_edited_in_place_with_its_size(
    skills: Skills, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: a same-size edit in place survived the next `materialize()` (only size and
    mode were compared). The status after writing (size, mtime, ctime, inode) is recorded, and
    only a file whose status changed is hashed again."""
    root = tmp_path / "cache"
    snap = skills.snapshot()
    snap.materialize(root)
    checklist = root / "shared/code-reviewer/references/checklist.md"
    stats_sh = root / "shared/code-reviewer/scripts/stats.sh"
    before = stats_sh.stat()
    with open(stats_sh, "r+b") as fh:  # same size, same inode; the mtime put back
        fh.write(b"#!/bin/sh\nrm -rf ~\n"[: before.st_size].ljust(before.st_size, b"#"))
    os.utime(stats_sh, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert stats_sh.stat().st_size == before.st_size and stats_sh.stat().st_ino == before.st_ino
    os.utime(checklist)  # touched: its status changed, its bytes did not

    hashed: list[str] = []
    real = hashlib.sha256

    def spy(*args: bytes) -> hashlib._Hash:
        hashed.append("x")
        return real(*args)

    monkeypatch.setattr(hashlib, "sha256", spy)
    snap.materialize(root)
    assert stats_sh.read_bytes() == b"#!/bin/sh\necho stats\n"
    assert len(hashed) == 2  # the two files whose status changed; none of the others
    inode = checklist.stat().st_ino
    hashed.clear()
    snap.materialize(root)
    assert hashed == [] and checklist.stat().st_ino == inode  # kept, and its status recorded
