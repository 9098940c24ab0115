"""Side entries (docs/governance.md, "Drafts and review", "Archive"): drafts `_drafts/<name>`
and archived skills `.archive/<name>` as their own entries, and archive / restore (the `store`
fixture). That each entry keeps its own manifest and history on every engine and topology is
in tests/engines/test_side_entry_keys.py."""

from __future__ import annotations

import pytest

import skillfs
from skillfs import Remove, Scope
from skillfs.errors import Conflict, FailedPrecondition, InvalidArgument, InvalidPath, NotFound
from skillfs.model.names import archive_entry, check_entry, draft_entry
from tests.helpers import skill_files as files
from tests.helpers import skill_md, write_legacy
from tests.runtime_helpers import view

ALICE = Scope.user("support-bot", "alice")
SHARED = Scope.shared("support-bot")


def test_entry_names_are_checked() -> None:
    assert draft_entry("a") == "_drafts/a" and archive_entry("a") == ".archive/a"
    assert check_entry("_drafts/a") == "_drafts/a" and check_entry("a") == "a"
    for bad in ("_x", ".x", "a/b", "", "..", "x\x00"):
        with pytest.raises(InvalidPath):
            draft_entry(bad)
    for bad in ("a/b", "_drafts/_x", "_drafts/a/b", "_drafts/", "other/a", ".archive/.."):
        with pytest.raises(InvalidPath):
            check_entry(bad)


def test_archive_and_restore_are_one_commit_each(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.publish(SHARED, "a", files("a", "v2"))
    rev = store.revision("support-bot")
    done = store.archive.add(
        SHARED, "a", reason="unused for 90 days", options=skillfs.WriteOptions(actor="curator")
    )
    assert done.versions == {"a": 3, ".archive/a": 1}
    assert store.revision("support-bot") > rev
    # one commit: the revision moved by one, and the tombstone and the archive entry carry
    # its one commit id
    after = store.revision("support-bot")
    assert rev is not None and after is not None and after.counter == rev.counter + 1
    tomb = store.manifests(SHARED, deleted=True)["a"]
    assert tomb.commit_id == store.manifest(SHARED, ".archive/a").commit_id == done.commit_id
    assert "a" not in view(store, "alice") and store.skills(SHARED) == []
    archived = store.manifest(SHARED, ".archive/a")
    assert archived.message == "unused for 90 days" and archived.operation == "archive"
    assert store.read(SHARED, ".archive/a", "SKILL.md") == files("a", "v2")["SKILL.md"]
    with pytest.raises(NotFound, match="nothing to archive"):
        store.archive.add(SHARED, "a")
    back = store.archive.restore(SHARED, "a")
    assert back.versions == {".archive/a": 2, "a": 4}
    assert back.revision.counter == after.counter + 1
    restored = store.manifest(SHARED, "a").commit_id
    assert restored == store.manifests(SHARED, deleted=True)[".archive/a"].commit_id
    assert restored == back.commit_id
    assert "v2" in view(store, "alice")["a"]
    assert [e.action for e in store.governance.audit("support-bot", skill="a")][:2] == [
        "restore",
        "archive",
    ]
    assert store.manifest(SHARED, ".archive/a", version=1).files == archived.files


def test_archive_and_restore_refuse_and_write_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "a", files("a"))
    store.archive.add(SHARED, "a")
    store.publish(SHARED, "a", files("a", "new"))
    rev = store.revision("support-bot")
    with pytest.raises(Conflict, match="already holds an archived a"):
        store.archive.add(SHARED, "a")
    with pytest.raises(Conflict, match=r"is live \(version 3\): .* archive or delete it first"):
        store.archive.restore(SHARED, "a")
    with pytest.raises(NotFound, match="archived there: a"):
        store.archive.restore(SHARED, "zz")
    with pytest.raises(InvalidArgument):
        store.archive.add(SHARED, "_drafts")
    with pytest.raises(Conflict, match="changed since you read it"):
        store.archive.add(SHARED, "a", options=skillfs.WriteOptions(expected_version=1))
    assert store.revision("support-bot") == rev
    # what to do instead, where archive and restore do not apply (outside testing: a staged
    # skill was told to enable, a hiding entry to be archived first, which is refused)
    store.rollouts.stage(SHARED, "s", files("s"), skillfs.Rollout(users=["alice"]))
    with pytest.raises(FailedPrecondition, match="only staged, never live: abort its candidate"):
        store.archive.add(SHARED, "s")
    store.publish(ALICE, "h", files("h"))
    store.archive.add(ALICE, "h")
    store.publish(SHARED, "h", files("h"))
    store.governance.disable(ALICE, "h")  # alice hides the shared h
    with pytest.raises(Conflict, match=r"hides a skill from below .* enable it"):
        store.archive.restore(ALICE, "h")
    done = store.archive.add(SHARED, "a", replace=True)
    assert done.versions == {"a": 4, ".archive/a": 2}
    assert [m.version for m in store.history(SHARED, ".archive/a")] == [2, 1]


def test_a_legacy_side_manifest_splits_in_one_commit(store: skillfs.Store) -> None:
    legacy = {"x/SKILL.md": skill_md("x"), "x/r.md": b"r", "y/SKILL.md": skill_md("y")}
    write_legacy(store, "_drafts", legacy)
    write_legacy(store, ".archive", {"z/SKILL.md": b"z"})
    with pytest.raises(InvalidPath, match="one entry per skill"):
        store.publish(SHARED, "_drafts", legacy)  # no new legacy writes
    store.publish(SHARED, "_drafts/y", {"SKILL.md": skill_md("y")})  # a newer skillfs's draft
    with pytest.raises(Conflict, match="_drafts/y already exists beside the legacy manifest"):
        store.drafts.split_legacy(SHARED)  # (it said "you expected to not exist yet", no way out)
    store.drafts.reject(SHARED, "y")
    done = store.drafts.split_legacy(SHARED)
    assert done is not None
    assert set(done.versions) == {"_drafts/x", "_drafts/y", ".archive/z", "_drafts", ".archive"}
    assert sorted(store.manifest(SHARED, "_drafts/x").files) == ["SKILL.md", "r.md"]
    assert store.manifest(SHARED, ".archive/z").files.keys() == {"SKILL.md"}
    assert store.drafts.split_legacy(SHARED) is None
    store.commit([Remove(SHARED, "_drafts/x")])
    assert set(store.manifests(SHARED)) == {"_drafts/y", ".archive/z"}  # src: deleted


def test_archive_and_restore_carry_a_staged_candidate(store: skillfs.Store) -> None:
    """On memory, SQLite and grpc:// (outside testing: over grpc:// the server took the moved
    candidate for a new one and refused both moves), and an entry without files records no
    finding (the server recorded 'skill-md-missing' for a staged-only skill and a hiding
    entry)."""
    store.publish(SHARED, "pdf", files("pdf"))
    store.rollouts.stage(SHARED, "pdf", files("pdf", "canary"), skillfs.Rollout(users=["alice"]))
    done = store.archive.add(SHARED, "pdf", "old")
    assert done.versions == {"pdf": 3, ".archive/pdf": 1}
    assert store.manifest(SHARED, ".archive/pdf").candidate is not None
    store.archive.restore(SHARED, "pdf")
    back = store.manifest(SHARED, "pdf")
    assert back.candidate is not None and back.candidate.rollout.users == ("alice",)
    assert store.read(SHARED, "pdf", "SKILL.md") == files("pdf")["SKILL.md"]
    store.rollouts.stage(SHARED, "new", files("new"), skillfs.Rollout(users=["alice"]))
    store.governance.disable(ALICE, "pdf", reason="not for alice")
    for scope, name in ((SHARED, "new"), (ALICE, "pdf")):
        m = store.manifest(scope, name)
        assert not m.files and not m.findings and m.frontmatter is None
