"""fsspec and side entries (docs/fsspec.md, docs/governance.md): writes under
`skills/_drafts/<name>/` land in that draft entry, `skills/_drafts/` lists the drafts as
directories, and one transaction writes several drafts in one commit — on each engine."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import InvalidPath, ReviewRequired
from skillfs.fs import SkillFileSystem
from tests.governance.test_side_entries import write_legacy
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
SKILL_MD = b"---\nname: pdf\ndescription: Reads PDFs. Use when testing.\n---\n\n# PDF\n"


@pytest.fixture(params=["memory", "sqlite", "redis", "etcd"])
def fs(request: pytest.FixtureRequest, tmp_path: Path) -> SkillFileSystem:
    return SkillFileSystem(
        store=url_for(request, request.param, tmp_path),
        agent_id=AGENT,
        base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )


def test_a_write_under_drafts_lands_in_that_draft(fs: SkillFileSystem) -> None:
    store: skillfs.Store = fs.store
    store.publish(SHARED, "pdf", {"SKILL.md": SKILL_MD})
    fs.pipe(
        {"skills/_drafts/pdf/SKILL.md": SKILL_MD + b"better\n", "skills/_drafts/pdf/r.md": b"r"}
    )
    m = store.manifest(SHARED, "_drafts/pdf")
    assert (m.version, sorted(m.files), m.base_version, m.errors) == (
        1,
        ["SKILL.md", "r.md"],
        1,
        [],
    )
    [draft] = store.drafts.list(AGENT)
    assert (draft.name, draft.version, draft.stale) == ("pdf", 1, False)
    fs.pipe("skills/_drafts/pdf/r.md", b"r2")
    assert store.manifest(SHARED, "_drafts/pdf").version == 2
    assert fs.cat("skills/_drafts/pdf/r.md") == b"r2"
    assert store.manifest(SHARED, "pdf").version == 1 and store.skills(SHARED) == ["pdf"]
    with pytest.raises(InvalidPath, match="is not a skill but holds skill directories"):
        fs.pipe("skills/_drafts/notes.md", b"x")
    with pytest.raises(InvalidPath):
        fs.pipe("skills/_drafts/_bad/SKILL.md", SKILL_MD)
    fs.rm("skills/_drafts/pdf", recursive=True)
    assert store.drafts.list(AGENT) == [] and store.history(SHARED, "_drafts/pdf")[0].deleted
    assert not fs.exists("skills/_drafts")


def test_drafts_are_listed_as_directories(fs: SkillFileSystem) -> None:
    fs.pipe(
        {
            "skills/live/SKILL.md": SKILL_MD,
            "skills/_drafts/a/SKILL.md": SKILL_MD,
            "skills/_drafts/b/SKILL.md": SKILL_MD,
            "skills/_drafts/b/refs/x.md": b"x",
            "skills/.archive/old/SKILL.md": SKILL_MD,
        }
    )
    listed = {i["name"]: i for i in fs.ls("skills")}
    assert {n: (i["type"], i["skill"]) for n, i in listed.items()} == {
        "skills/.archive": ("directory", False),
        "skills/_drafts": ("directory", False),
        "skills/live": ("directory", True),
    }
    assert fs.ls("skills/_drafts", detail=False) == ["skills/_drafts/a", "skills/_drafts/b"]
    assert fs.info("skills/_drafts/b")["type"] == "directory"
    assert fs.ls("skills/_drafts/b", detail=False) == ["skills/_drafts/b/SKILL.md",
                                                      "skills/_drafts/b/refs"]  # fmt: skip
    assert fs.find("skills/_drafts") == [
        "skills/_drafts/a/SKILL.md",
        "skills/_drafts/b/SKILL.md",
        "skills/_drafts/b/refs/x.md",
    ]
    assert fs.ls("skills/.archive", detail=False) == ["skills/.archive/old"]
    assert fs.store.skills(SHARED) == ["live"]


def test_a_transaction_writes_several_drafts_in_one_commit(fs: SkillFileSystem) -> None:
    store: skillfs.Store = fs.store
    with fs.transaction:
        fs.pipe("skills/_drafts/a/SKILL.md", SKILL_MD)
        fs.pipe("skills/_drafts/b/SKILL.md", SKILL_MD)
        fs.pipe("skills/live/SKILL.md", SKILL_MD)
    ids = {store.manifest(SHARED, s).commit_id for s in ("_drafts/a", "_drafts/b", "live")}
    assert len(ids) == 1
    assert [d.name for d in store.drafts.list(SHARED)] == ["a", "b"]


def test_a_legacy_drafts_manifest_is_read_beside_the_entries(fs: SkillFileSystem) -> None:
    store: skillfs.Store = fs.store
    write_legacy(store, "_drafts", {"old/SKILL.md": SKILL_MD})
    fs.pipe("skills/_drafts/new/SKILL.md", SKILL_MD)
    assert fs.find("skills/_drafts") == [
        "skills/_drafts/new/SKILL.md",
        "skills/_drafts/old/SKILL.md",
    ]
    assert fs.cat("skills/_drafts/old/SKILL.md") == SKILL_MD


def test_under_the_two_person_rule_a_write_is_refused_and_a_draft_is_not(
    fs: SkillFileSystem,
) -> None:
    """docs/governance.md, "The two-person rule": fsspec's writes end in the Committer, which
    refuses a live one (ReviewRequired, nothing written) and takes the draft."""
    store: skillfs.Store = fs.store
    store.publish(SHARED, "pdf", {"SKILL.md": SKILL_MD})
    store.review.require(SHARED, options=skillfs.WriteOptions(actor="ana"))
    before = store.revision(AGENT)
    with pytest.raises(ReviewRequired, match="requires review"):
        fs.pipe("skills/pdf/notes.md", b"direct")
    with pytest.raises(ReviewRequired):
        fs.pipe("skills/new/SKILL.md", SKILL_MD.replace(b"pdf", b"new"))
    assert store.revision(AGENT) == before
    fs.pipe("skills/_drafts/pdf/SKILL.md", SKILL_MD + b"reviewed\n")
    store.drafts.approve(SHARED, "pdf", options=skillfs.WriteOptions(actor="ana"))
    assert fs.cat("skills/pdf/SKILL.md").endswith(b"reviewed\n")
