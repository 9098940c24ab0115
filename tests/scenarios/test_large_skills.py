"""Large skills on every engine (one topology of each): one of 2,000 files and one of 200 MiB
in 200 files, each published, read back, updated (one file changed) and deleted. The limits
these stay within are in docs/consistency.md, "Limits"."""

from __future__ import annotations

import pytest

import skillfs
from skillfs import FileEntry, Scope
from skillfs.errors import NotFound
from skillfs.store.blobs import sha256
from tests.helpers import skill_md

SHARED = Scope.shared("support-bot")
MiB = 1024 * 1024

pytestmark = pytest.mark.slow


def round_trip(store: skillfs.Store, skill: str, files: dict[str, bytes], spot: list[str]) -> None:
    """Publish, read back (file table and the `spot` files' bytes), change one file, delete."""
    files = {"SKILL.md": skill_md(skill), **files}
    store.publish(SHARED, skill, files)
    m = store.manifest(SHARED, skill)
    assert set(m.files) == set(files)
    for path in spot:
        entry = m.files[path]
        assert (entry.size, entry.sha256) == (len(files[path]), sha256(files[path]))
        assert store.read(SHARED, skill, path) == files[path]
    changed = spot[-1]
    # an edit of one file: the others are kept by reference, neither sent nor read again
    edit: dict[str, FileEntry | bytes] = {**m.files, changed: b"changed"}
    assert store.publish(SHARED, skill, edit, expected_version=1).version == 2
    m2 = store.manifest(SHARED, skill)
    assert m2.files[changed].size == len(b"changed") and len(m2.files) == len(files)
    assert store.read(SHARED, skill, changed) == b"changed"
    assert store.read(SHARED, skill, spot[0]) == files[spot[0]]
    store.delete(SHARED, skill, expected_version=2)
    with pytest.raises(NotFound):
        store.manifest(SHARED, skill)
    assert [h.version for h in store.history(SHARED, skill)] == [3, 2, 1]


def test_a_skill_of_2000_files(store: skillfs.Store) -> None:
    files = {f"references/p{i // 100:02d}/note-{i:04d}.md": b"note %d\n" % i for i in range(1999)}
    round_trip(store, "many-files", files, ["references/p00/note-0000.md",
                                            "references/p12/note-1234.md",
                                            "references/p19/note-1998.md"])  # fmt: skip


def test_a_skill_of_200_mib(store: skillfs.Store) -> None:
    block = bytes(range(256)) * (MiB // 256)
    files = {f"assets/blob-{i:03d}.bin": i.to_bytes(4, "big") + block[4:] for i in range(200)}
    round_trip(store, "large-bytes", files, ["assets/blob-000.bin", "assets/blob-137.bin"])
