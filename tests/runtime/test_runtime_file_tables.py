"""A skill whose file table is stored in chunks (docs/design.md §2, "File tables") reaches a
worker whole: its snapshot lists every file, materializes them, and follows a one-file edit
to the version after."""

from __future__ import annotations

from pathlib import Path

import skillfs
from skillfs import Scope
from skillfs.store.tables import INLINE_MAX
from tests.helpers import skill_md

SHARED = Scope.shared("support-bot")
COUNT = INLINE_MAX + 200


def test_a_chunked_skill_materializes_and_follows_an_edit(
    store: skillfs.Store, tmp_path: Path
) -> None:
    files = {f"references/n-{i:03d}.md": b"%d\n" % i for i in range(COUNT)}
    store.publish(SHARED, "wide", {"SKILL.md": skill_md("wide"), **files})
    with skillfs.Skills(store, "support-bot", "alice") as skills:
        snap = skills.snapshot().materialize(tmp_path / "cache")
        assert snap.read_bytes("wide", "references/n-321.md") == b"321\n"
        assert snap.files_root is not None
        root = Path(snap.files_root) / "shared" / "wide"  # <source>/<skill>
        assert len(list((root / "references").iterdir())) == COUNT
        m = store.manifest(SHARED, "wide")
        store.publish(SHARED, "wide", {**m.files, "references/n-007.md": b"seven\n"},
                      expected_version=1)  # fmt: skip
        again = skills.snapshot().materialize(tmp_path / "cache")
        assert again.read_bytes("wide", "references/n-007.md") == b"seven\n"
        assert (root / "references" / "n-007.md").read_bytes() == b"seven\n"
