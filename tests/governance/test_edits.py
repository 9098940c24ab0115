"""`store.edits`, the operations every surface calls (docs/governance.md, "Edits"): rename
with SKILL.md's name, a user's override, one file edited under a conflict policy, an import
under a policy, delete and rollback, each with one WriteOptions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Origin, Scope, Store
from skillfs.engines.memory import MemoryEngine
from skillfs.errors import (
    Conflict,
    EditConflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from skillfs.governance.edits import ConflictPolicy, ImportPolicy
from skillfs.model.ops import WriteOptions
from tests.runtime_helpers import md
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
NOTES = b"line one\nline two\nline three\n"


@pytest.fixture(params=["memory", "sqlite", "etcd", "grpc"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    yield s
    s.close()


def skill(name: str, notes: bytes = NOTES) -> dict[str, bytes]:
    return {"SKILL.md": md(name, f"Does {name} things."), "notes.md": notes}


def read(store: Store, scope: Scope, name: str, path: str = "notes.md") -> bytes:
    return store.read(scope, name, path)


def test_rename_follows_the_name_and_reads_its_source_in_the_commit(store: Store) -> None:
    store.publish(SHARED, "old", skill("old"))
    done = store.edits.rename(SHARED, "old", "new", options=WriteOptions(message="clearer"))
    assert store.skills(SHARED) == ["new"]
    assert b"name: new" in read(store, SHARED, "new", "SKILL.md")
    assert (
        store.manifest(SHARED, "new").message
        == "clearer"
        == store.history(SHARED, "old")[0].message
    )
    assert done.versions == {"new": 1, "old": 2}
    with pytest.raises(NotFound, match="'old' does not exist"):  # a second rename: nothing
        store.edits.rename(SHARED, "old", "other")
    with pytest.raises(Conflict):  # the version the caller saw is gone
        store.edits.rename(SHARED, "new", "third", options=WriteOptions(expected_version=7))
    assert store.skills(SHARED) == ["new"]


def test_a_rename_onto_a_taken_name_says_so_and_writes_nothing(store: Store) -> None:
    store.publish(SHARED, "old", skill("old"))
    store.publish(SHARED, "taken", skill("taken"))
    with pytest.raises(Conflict, match=r"already holds a skill \(version 1\).*nothing was written"):
        store.edits.rename(SHARED, "old", "taken")
    assert store.skills(SHARED) == ["old", "taken"]
    assert [m.version for m in store.history(SHARED, "old")] == [1]
    store.edits.delete(SHARED, "taken")  # a deleted name is free again
    assert store.edits.rename(SHARED, "old", "taken").versions == {"taken": 3, "old": 2}


def test_remove_files_of_a_skill_in_one_commit(store: Store) -> None:
    files = {**skill("s"), "refs/a.md": b"a", "refs/b.md": b"b", "x.md": b"x"}
    v = store.publish(SHARED, "s", files).versions["s"]
    seen = WriteOptions(expected_version=v, message="tidy")
    done = store.edits.remove_files(SHARED, "s", ["refs", "x.md"], options=seen)
    m = store.manifest(SHARED, "s")
    assert sorted(m.files) == ["SKILL.md", "notes.md"] and m.message == "tidy"
    assert done.versions == {"s": v + 1}
    with pytest.raises(NotFound, match=r"has no file or directory 'nope'; files: SKILL\.md"):
        store.edits.remove_files(SHARED, "s", ["nope"])
    with pytest.raises(Conflict):  # the version the caller read is gone
        store.edits.remove_files(SHARED, "s", ["notes.md"], options=seen)
    with pytest.raises(InvalidArgument, match="a skill needs at least one file"):
        store.edits.remove_files(SHARED, "s", ["SKILL.md", "notes.md"])
    assert sorted(store.manifest(SHARED, "s").files) == ["SKILL.md", "notes.md"]


def test_override_copies_by_reference_and_keeps_the_kill_switch(store: Store) -> None:
    v = store.publish(SHARED, "guide", skill("guide")).versions["guide"]
    store.edits.override(ALICE, "guide", options=WriteOptions(expected_version=v))
    copy = store.manifest(ALICE, "guide")
    assert copy.origin == Origin(scope=str(SHARED), skill="guide", version=v)
    assert copy.files == store.manifest(SHARED, "guide").files
    with pytest.raises(Conflict):  # one exists now
        store.edits.override(ALICE, "guide")
    store.governance.disable(SHARED, "guide", reason="wrong")
    bob = Scope.user(AGENT, "bob")
    with pytest.raises(FailedPrecondition, match="disabled in shared:support-bot"):
        store.edits.override(bob, "guide")
    for not_a_user in (SHARED, Scope.market("tools")):  # bad input, not a wrong state
        with pytest.raises(InvalidArgument, match="user's scope"):
            store.edits.override(not_a_user, "guide")


def test_edit_file_keeps_other_writers_changes_by_policy(store: Store) -> None:
    v = store.publish(SHARED, "s", skill("s")).versions["s"]
    theirs = NOTES.replace(b"line three", b"line THREE")
    store.publish(SHARED, "s", {**skill("s", theirs), "extra.md": b"theirs"})
    mine = NOTES.replace(b"line one", b"line ONE")
    seen = WriteOptions(expected_version=v, message="first line")
    with pytest.raises(Conflict, match="changed since you read it"):
        store.edits.edit_file(SHARED, "s", "notes.md", mine, base=NOTES, options=seen)
    store.edits.edit_file(
        SHARED, "s", "notes.md", mine, base=NOTES, on_conflict=ConflictPolicy.MERGE, options=seen
    )
    assert read(store, SHARED, "s") == b"line ONE\nline two\nline THREE\n"
    assert read(store, SHARED, "s", "extra.md") == b"theirs"  # their other file is kept
    assert store.manifest(SHARED, "s").message == "first line"
    # both changed the same line: nothing written, the markers to resolve
    now = store.manifest(SHARED, "s").version
    clash = b"line ONE!\nline two\nline THREE\n"
    store.publish(SHARED, "s", {**skill("s", b"line 1\nline two\nline THREE\n")})
    merged_before = b"line ONE\nline two\nline THREE\n"  # what this editor read
    with pytest.raises(EditConflict) as caught:
        store.edits.edit_file(
            SHARED, "s", "notes.md", clash, base=merged_before,
            on_conflict=ConflictPolicy.MERGE, options=WriteOptions(expected_version=now),
        )  # fmt: skip
    assert b"<<<<<<<" in caught.value.merged and b">>>>>>>" in caught.value.merged
    assert read(store, SHARED, "s") == b"line 1\nline two\nline THREE\n"
    store.edits.edit_file(
        SHARED, "s", "notes.md", clash, base=NOTES, on_conflict=ConflictPolicy.RETRY,
        options=WriteOptions(expected_version=now),
    )  # fmt: skip
    assert read(store, SHARED, "s") == clash


def test_edit_file_of_a_shared_skill_makes_the_users_copy(store: Store) -> None:
    v = store.publish(SHARED, "s", skill("s")).versions["s"]
    store.edits.edit_file(
        ALICE, "s", "notes.md", b"mine\n", base=NOTES, options=WriteOptions(expected_version=0)
    )
    copy = store.manifest(ALICE, "s")
    assert copy.origin == Origin(scope=str(SHARED), skill="s", version=v)
    assert read(store, ALICE, "s") == b"mine\n" and read(store, SHARED, "s") == NOTES
    store.edits.edit_file(ALICE, "s", "notes.md", None, base=b"mine\n")  # a file removed
    assert sorted(store.manifest(ALICE, "s").files) == ["SKILL.md"]


def test_import_updates_its_own_skills_and_refuses_another_writers(store: Store) -> None:
    """A re-import of a source updates what it wrote and nobody changed since, and refuses
    (writing nothing) a skill another operator changed, naming them (issue 30)."""
    src = "git:team-skills"
    first = store.edits.import_skills(SHARED, {"a": skill("a"), "b": skill("b")}, source=src)
    assert [(i.skill, i.status) for i in first.skills] == [("a", "created"), ("b", "created")]
    mark = store.manifest(SHARED, "a").imported
    assert mark is not None and mark.source == src
    again = store.edits.import_skills(SHARED, {"a": skill("a"), "b": skill("b")}, source=src)
    assert {i.status for i in again.skills} == {"unchanged"} and not again.commits
    store.publish(SHARED, "b", skill("b", b"operator b's fix\n"), actor="operator-b")
    newer = {"a": skill("a", b"v2\n"), "b": skill("b", b"v2\n"), "c": skill("c")}
    before = store.revision(AGENT)
    dry = store.edits.import_skills(SHARED, newer, source=src, dry_run=True)
    b = store.manifest(SHARED, "b").actor  # over grpc:// the token's name
    assert [(i.skill, i.status, i.version, i.actor) for i in dry.skills] == [
        ("a", "updated", 1, store.manifest(SHARED, "a").actor),
        ("b", "refused", 2, b),
        ("c", "created", None, ""),
    ]
    with pytest.raises(FailedPrecondition, match=rf"b \(version 2 by {b}\).*nothing was"):
        store.edits.import_skills(SHARED, newer, source=src)
    assert store.revision(AGENT) == before  # neither the dry run nor the refusal wrote
    assert read(store, SHARED, "b") == b"operator b's fix\n" and "c" not in store.skills(SHARED)
    # another source did not write `a` as it is: refused too
    with pytest.raises(FailedPrecondition, match=r"from zip:a.zip would overwrite 1 skill"):
        store.edits.import_skills(SHARED, {"a": skill("a", b"zip\n")}, source="zip:a.zip")
    kept = store.edits.import_skills(SHARED, newer, source=src, policy=ImportPolicy.KEEP)
    assert {i.skill: i.status for i in kept.skills} == {
        "a": "updated", "b": "kept", "c": "created"
    }  # fmt: skip
    assert read(store, SHARED, "a") == b"v2\n" and read(store, SHARED, "b") != b"v2\n"
    # a disable keeps the files the import wrote: the next import still updates them
    store.governance.disable(SHARED, "a", "checking")
    newest = {"a": skill("a", b"v3\n")}
    assert store.edits.import_skills(SHARED, newest, source=src).skills[0].status == "updated"
    replaced = store.edits.import_skills(
        SHARED, newer, source=src, policy=ImportPolicy.REPLACE,
        options=WriteOptions(message="from the repo"),
    )  # fmt: skip
    assert {i.skill: i.status for i in replaced.skills}["b"] == "updated"
    assert read(store, SHARED, "b") == b"v2\n"
    assert store.manifest(SHARED, "b").message == "from the repo"


@pytest.mark.parametrize("engine", ["memory", "redis"])
def test_import_batches_by_the_stores_limit(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """An import with no `batch` commits the store's limit of skills at once (`Store.max_ops`,
    the engine's less the scope's name register), never the engine's: a batch of the
    engine's size would be refused as too large (Redis: 64)."""
    monkeypatch.setattr(MemoryEngine, "max_ops", 4)
    with skillfs.open_store(url_for(request, engine, tmp_path)) as store:
        limit = store.max_ops
        assert limit is not None and store.engine.max_ops == limit + 1
        skills = {f"s{i}": skill(f"s{i}") for i in range(limit + 2)}
        done = store.edits.import_skills(SHARED, skills, source="git:many")
        assert [len(c.versions) for c in done.commits] == [limit, 2]
        assert sorted(store.skills(SHARED)) == sorted(skills)


def test_delete_and_rollback_take_their_options(store: Store) -> None:
    store.publish(SHARED, "s", skill("s"))
    store.edits.delete(SHARED, "s", options=WriteOptions(message="obsolete", actor="ops"))
    back = store.edits.rollback(SHARED, "s", 1, options=WriteOptions(message="still needed"))
    assert back.versions == {"s": 3}
    audit = store.governance.audit(SHARED, skill="s")
    assert [(e.action, e.message) for e in audit] == [
        ("publish", "still needed"), ("delete", "obsolete"), ("publish", "")
    ]  # fmt: skip
