"""Governed manifests on every engine and topology: what governance writes into a manifest (a
staged candidate and its rule, a kill switch and its reason, a user's hiding entry, a draft
and the version it was proposed against, an archive and its operation, actor and message)
is stored and read back whole by another client, in history too, and a versioned commit on
top of each is checked like any other.

The governance logic itself runs in tests/store on memory, SQLite and grpc://. This is the
part each engine does its own way: Redis's commit script reads a manifest's head, etcd
keeps history under key prefixes, a skillfs server checks every commit again."""

from __future__ import annotations

from typing import Any

import pytest

import skillfs
from skillfs import Rollout, Scope
from skillfs.errors import Conflict
from tests.helpers import skill_files

SHARED = Scope.shared("support-bot")
ALICE = Scope.user("support-bot", "alice")
RULE = Rollout(environments=["prod"], users=["alice"], fraction=0.25)


def dumped(manifests: dict[str, Any]) -> dict[str, Any]:
    return {name: m.model_dump(mode="json") for name, m in manifests.items()}


def test_governed_manifests_round_trip_and_take_versioned_commits(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    store.publish(SHARED, "live", skill_files("live"), message="first")
    store.rollouts.stage(
        SHARED,
        "live",
        skill_files("live", "canary"),
        RULE,
        options=skillfs.WriteOptions(message="canary"),
    )
    store.publish(SHARED, "off", skill_files("off"))
    store.governance.disable(SHARED, "off", reason="broken on prod")
    store.governance.disable(ALICE, "live", reason="not for alice")  # a hiding entry: no files
    store.drafts.propose(
        SHARED, "new", skill_files("new"), options=skillfs.WriteOptions(message="please review")
    )
    store.publish(SHARED, "old", skill_files("old"))
    store.archive.add(SHARED, "old", "unused")

    # another client reads every entry whole, and every version of each
    for scope in (SHARED, ALICE):
        assert dumped(other.manifests(scope)) == dumped(store.manifests(scope))
    assert set(other.manifests(SHARED)) == {"live", "off", "_drafts/new", ".archive/old"}
    for name in ("live", "off", "_drafts/new", ".archive/old", "old"):
        theirs = [m.model_dump(mode="json") for m in other.history(SHARED, name)]
        assert theirs == [m.model_dump(mode="json") for m in store.history(SHARED, name)]
    live = other.manifest(SHARED, "live")
    assert live.version == 2 and live.message == "canary"
    assert live.candidate is not None and live.candidate.rollout == RULE
    assert live.candidate.files.keys() == {"SKILL.md", "references/r.md"}
    off = other.manifest(SHARED, "off")
    assert off.disabled and off.disabled_reason == "broken on prod" and off.files
    hiding = other.manifest(ALICE, "live")
    assert hiding.disabled and not hiding.files and hiding.disabled_reason == "not for alice"
    draft = other.manifest(SHARED, "_drafts/new")
    assert draft.base_version == 0 and draft.message == "please review"
    archived = other.manifest(SHARED, ".archive/old")
    assert archived.operation == "archive" and archived.files.keys() == {
        "SKILL.md",
        "references/r.md",
    }

    # versioned commits over each of them: a stale version is refused, the current one taken
    wider = Rollout(environments=["prod"], users=["alice"], fraction=0.5)
    assert (
        other.rollouts.widen(
            SHARED, "live", wider, options=skillfs.WriteOptions(expected_version=2)
        ).version
        == 3
    )
    with pytest.raises(Conflict):
        store.rollouts.promote(SHARED, "live", options=skillfs.WriteOptions(expected_version=2))
    assert (
        store.rollouts.promote(
            SHARED, "live", options=skillfs.WriteOptions(expected_version=3)
        ).version
        == 4
    )
    assert other.manifest(SHARED, "live").candidate is None
    with pytest.raises(Conflict):
        other.governance.enable(
            SHARED, "off", options=skillfs.WriteOptions(expected_version=off.version - 1)
        )
    assert (
        other.governance.enable(
            SHARED, "off", options=skillfs.WriteOptions(expected_version=off.version)
        ).version
        == off.version + 1
    )
    assert not store.manifest(SHARED, "off").disabled
    store.drafts.approve(
        SHARED, "new", options=skillfs.WriteOptions(expected_version=draft.version)
    )
    assert other.manifest(SHARED, "new").files.keys() == draft.files.keys()
    assert "_drafts/new" not in other.manifests(SHARED)
    store.archive.restore(SHARED, "old")
    assert other.manifest(SHARED, "old").files.keys() == archived.files.keys()


def test_labels_round_trip_and_pinned_workers_follow_them(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    """A pinned worker of another client keeps its version through a publish, follows its
    label when it moves and loses a disabled skill, each at its next step (docs/governance.md,
    "Labels and pins")."""
    store.publish(SHARED, "s", skill_files("s", "one"))
    store.labels.set(SHARED, "s", "stable", options=skillfs.WriteOptions(message="good"))
    store.publish(SHARED, "s", skill_files("s", "two"))
    m = other.manifest(SHARED, "s")
    v1 = other.manifest(SHARED, "s", version=1)
    assert (m.version, m.labels["stable"].version, m.labels["stable"].files) == (3, 1, v1.files)

    def body(worker: skillfs.Skills) -> list[tuple[int | None, bytes]]:
        snap = worker.snapshot()
        return [(s.version, snap.read_bytes(s.id, "SKILL.md")[-4:]) for s in snap.skills]

    with skillfs.Skills(other, "support-bot", "bob", pins="stable") as pinned:
        assert body(pinned) == [(1, b"one\n")]
        store.publish(SHARED, "s", skill_files("s", "three"))
        assert body(pinned) == [(1, b"one\n")]
        store.labels.set(SHARED, "s", "stable", 4)
        assert body(pinned) == [(4, b"ree\n")]
        store.governance.disable(SHARED, "s", "broken")
        assert body(pinned) == []
    assert [v.labels for v in other.versions(SHARED, "s")][:2] == [{"stable": 4}, {"stable": 4}]
