"""Side entries' keys on every engine and topology (docs/governance.md, "Drafts and
review"): drafts `_drafts/<name>`, an archived skill `.archive/<name>` and a legacy `_drafts`
manifest each keep their own manifest, version and history, wherever an engine's key layout
puts them next to each other (on etcd the history prefix of `_drafts` covers the entries')."""

from __future__ import annotations

import skillfs
from skillfs import Scope
from tests.helpers import skill_files as files
from tests.helpers import skill_md, write_legacy
from tests.runtime_helpers import view

SHARED = Scope.shared("support-bot")


def test_side_entries_have_their_own_versions_and_history(store: skillfs.Store) -> None:
    """Two drafts and an archived skill of one scope: each its own manifest, version and
    history (on etcd the history prefix of a legacy `_drafts` manifest covers the entries':
    they must not mix), never listed as a skill nor in a worker's view."""
    write_legacy(store, "_drafts", {"old/SKILL.md": skill_md("old")})
    write_legacy(store, "_drafts", {"old/SKILL.md": skill_md("old", body="v2")})
    store.publish(SHARED, "_drafts/a", files("a"))
    store.publish(SHARED, "_drafts/a", files("a", "v2"))
    store.publish(SHARED, "_drafts/b", files("b"))
    store.publish(SHARED, ".archive/c", files("c"))
    store.publish(SHARED, "live", files("live"))
    assert store.manifest(SHARED, "_drafts/a").version == 2
    assert store.manifest(SHARED, "_drafts/b").version == 1
    assert [m.version for m in store.history(SHARED, "_drafts/a")] == [2, 1]
    assert [m.version for m in store.history(SHARED, "_drafts")] == [2, 1]
    assert [m.skill for m in store.history(SHARED, "_drafts")] == ["_drafts", "_drafts"]
    assert store.manifest(SHARED, "_drafts/a").frontmatter == {
        "name": "a",
        "description": "Does things. Use when testing.",
    }
    assert not store.manifest(SHARED, "_drafts/a").errors  # named as the skill it becomes
    assert store.skills(SHARED) == ["live"]
    entries = {"_drafts", "_drafts/a", "_drafts/b", ".archive/c", "live"}
    assert set(store.manifests(SHARED)) == entries
    assert list(view(store, "alice")) == ["live"]
    audit = store.governance.audit("support-bot", skill="_drafts/a")
    assert [e.action for e in audit] == ["propose", "propose"]
