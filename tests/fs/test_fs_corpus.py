"""Every skill directory of every collection in ../shared/corpus/ goes into the store with
`fs.put(recursive=True)` and comes back with `fs.get` byte for byte (and mode for mode)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from skillfs.fs import SkillFileSystem
from tests.stores import url_for

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"


def skill_dirs(collection: Path) -> list[Path]:
    return sorted(d for d in collection.iterdir() if (d / "SKILL.md").is_file())


def files_below(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("engine", ["memory", "sqlite", "redis", "etcd"])
def test_corpus_round_trip(request: pytest.FixtureRequest, tmp_path: Path, engine: str) -> None:
    assert CORPUS.is_dir(), f"the skill corpus is missing: expected it at {CORPUS}"
    collections = sorted(c for c in CORPUS.iterdir() if c.is_dir())
    assert collections, f"no collections in {CORPUS}"
    url = url_for(request, engine, tmp_path)
    checked = 0
    for collection in collections:
        skills = skill_dirs(collection)
        assert skills, f"{collection} holds no skill directory"
        writer, fs = (
            SkillFileSystem(
                store=url, agent_id=collection.name, base=str(tmp_path), skip_instance_cache=True
            )
            for _ in range(2)
        )
        for skill in skills:
            writer.put(str(skill), "skills/", recursive=True)
        assert fs.ls("skills", detail=False) == [f"skills/{s.name}" for s in skills]
        out = tmp_path / "out" / collection.name
        fs.get("skills/", f"{out}/", recursive=True)  # another client: no blob in its cache
        for skill in skills:
            assert fs.store.manifest(fs.scope, skill.name).version == 1  # one publish per skill
            want, got = files_below(skill), files_below(out / skill.name)
            assert sorted(got) == sorted(want), skill
            for rel, src in want.items():
                assert got[rel].read_bytes() == src.read_bytes(), f"{skill.name}/{rel}"
                assert stat.S_IMODE(got[rel].stat().st_mode) == stat.S_IMODE(src.stat().st_mode)
                checked += 1
    assert checked == sum(len(files_below(s)) for c in collections for s in skill_dirs(c))
