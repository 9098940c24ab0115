"""Issue 28 §3: a commit id names one write (its scope, skill and sorted (path, sha256,
mode) rows, or a removal); an empty file set is not a live skill; fsspec's removal of a
skill's last file deletes the skill in one commit."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from skillfs import Scope
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument
from skillfs.fs import SkillFileSystem
from skillfs.model import Put
from tests.helpers import skill_md

ALICE = Scope.user("bot", "alice")


def files(n: int) -> dict[str, bytes]:
    return {"SKILL.md": skill_md("s"), "n.md": f"{n}\n".encode()}


def test_a_commit_id_reused_with_the_same_write_is_the_write_it_committed(
    store: skillfs.Store,
) -> None:
    assert store.publish(ALICE, "s", files(1), commit_id="c1").versions == {"s": 1}
    assert store.publish(ALICE, "s", files(1), commit_id="c1").versions == {"s": 1}
    store.publish(ALICE, "s", files(2))  # another writer on top
    again = store.publish(ALICE, "s", files(1), commit_id="c1")  # no expected version
    assert again.versions == {"s": 1}
    stale = store.publish(ALICE, "s", files(1), expected_version=0, commit_id="c1")
    assert stale.versions == {"s": 1}
    assert store.manifest(ALICE, "s").version == 2
    assert [m.commit_id for m in store.history(ALICE, "s")].count("c1") == 1


def test_a_commit_id_reused_with_another_payload_is_refused_naming_its_version(
    store: skillfs.Store,
) -> None:
    store.publish(ALICE, "s", files(1), commit_id="c1")
    says = r"commit id 'c1' already committed version 1 of user:bot/alice/s with another payload"
    with pytest.raises(InvalidArgument, match=says):  # it is the live version
        store.publish(ALICE, "s", files(9), commit_id="c1")
    with pytest.raises(InvalidArgument, match=says):  # a delete is another write
        store.delete(ALICE, "s", commit_id="c1")
    store.publish(ALICE, "s", files(2))  # another writer on top: c1 is in history now
    with pytest.raises(InvalidArgument, match=says):
        store.publish(ALICE, "s", files(9), commit_id="c1")
    with pytest.raises(InvalidArgument, match=says):  # not "success" for a stale expectation
        store.publish(ALICE, "s", files(9), expected_version=0, commit_id="c1")
    with pytest.raises(InvalidArgument, match=says):
        store.delete(ALICE, "s", commit_id="c1")
    assert store.manifest(ALICE, "s").version == 2
    assert [m.commit_id for m in store.history(ALICE, "s")].count("c1") == 1
    store.delete(ALICE, "s", commit_id="d1")
    assert store.delete(ALICE, "s", commit_id="d1").versions == {"s": 3}  # a retried delete
    with pytest.raises(InvalidArgument, match="commit id 'd1' already committed version 3"):
        store.publish(ALICE, "s", files(1), commit_id="d1")


def test_an_empty_file_set_is_not_a_live_skill(store: skillfs.Store, store_url: str) -> None:
    says = "a skill needs at least one file; to delete it, delete it"
    with pytest.raises(InvalidArgument, match=says):
        store.publish(ALICE, "s", {})
    with pytest.raises(InvalidArgument, match=says):
        store.commit([Put(scope=ALICE, skill="s", files={})])
    with pytest.raises(InvalidArgument, match=says):
        store.drafts.propose(ALICE, "s", {})
    assert store.publish(ALICE, "notes", {"notes.md": b"no SKILL.md\n"}).versions == {"notes": 1}
    if store_url.startswith("grpc"):  # a raw Commit of a live version with no files
        m = store.manifest(ALICE, "notes")
        empty = m.model_copy(update={"version": 2, "files": {}, "commit_id": "raw"})
        with pytest.raises(InvalidArgument, match=says):
            store.engine.commit(ALICE.domain, [CommitOp(scope=ALICE, manifest=empty, expect=1)])
    assert store.manifest(ALICE, "notes").version == 1


def test_fsspec_removing_a_skills_last_file_deletes_it_in_one_commit(
    store: skillfs.Store, store_url: str, tmp_path: Path
) -> None:
    store.publish(ALICE, "s", {"SKILL.md": skill_md("s"), "r.md": b"r\n"})
    fs = SkillFileSystem(
        store=store_url, agent_id="bot", user_id="alice", base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip
    with fs.transaction:
        fs.rm("skills/s/r.md")
        fs.rm("skills/s/SKILL.md")
    assert "s" not in store.skills(ALICE)
    gone = store.entries(ALICE)["s"]
    assert gone.deleted and gone.version == 2  # one commit: the deletion after version 1
    fs.pipe_file("skills/t/only.md", b"t\n")
    fs.rm("skills/t/only.md")  # outside a transaction too
    assert "t" not in store.skills(ALICE) and store.entries(ALICE)["t"].deleted
