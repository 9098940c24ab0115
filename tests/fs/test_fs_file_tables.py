"""fsspec over a skill whose file table is stored in chunks (docs/design.md §2, "File
tables"): every file listed and read, a write publishes the whole table again."""

from __future__ import annotations

import uuid
from pathlib import Path

import skillfs
from skillfs import Scope
from skillfs.fs import SkillFileSystem
from skillfs.store.tables import INLINE_MAX
from tests.helpers import skill_md

SHARED = Scope.shared("bot")
COUNT = INLINE_MAX + 100


def test_a_chunked_skill_lists_reads_and_takes_a_write(tmp_path: Path) -> None:
    url = f"memory://fs-{uuid.uuid4().hex[:12]}"
    store = skillfs.open_store(url)
    files = {f"references/n-{i:03d}.md": b"%d\n" % i for i in range(COUNT)}
    store.publish(SHARED, "wide", {"SKILL.md": skill_md("wide"), **files})
    fs = SkillFileSystem(store=url, agent_id="bot", base=str(tmp_path / "ws"),
                         skip_instance_cache=True)  # fmt: skip
    assert len(fs.ls("skills/wide/references", detail=False)) == COUNT
    assert fs.cat("skills/wide/references/n-299.md") == b"299\n"
    fs.pipe("skills/wide/references/new.md", b"new\n")
    m = store.manifest(SHARED, "wide")
    assert m.version == 2 and len(m.files) == COUNT + 2
    assert store.read(SHARED, "wide", "references/n-000.md", version=1) == b"0\n"
