"""A scope's name register (`skillfs.store.name_register`, docs/validation.md, "Names that look
alike"): the entry whose version moves with every commit that creates a name in the scope, so
that writers creating look-alikes at one instant cannot both land
(test_lookalike_names.py::test_look_alikes_created_at_one_instant_do_not_both_land). Here: it
moves only with a creation, shows nowhere, no command writes it, its history stays short, GC
keeps it and quotas do not count it."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from skillfs import Remove, Scope, Store
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument, PermissionDenied
from skillfs.fs import SkillFileSystem
from skillfs.model import Manifest
from skillfs.store.name_register import KEPT_VERSIONS, NAMES
from tests.runtime_helpers import md
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)


def skill(name: str, body: str = "") -> dict[str, bytes]:
    return {"SKILL.md": md(name, f"Does {name} things.", body)}


def register(store: Store, scope: Scope = SHARED) -> int:
    """The register's version (0: never written)."""
    return store.manifests(scope, [NAMES]).get(NAMES, Manifest.empty(NAMES)).version


def test_the_register_moves_only_with_a_commit_that_creates_a_name(store: Store) -> None:
    store.publish(SHARED, "pdf", skill("pdf"))
    assert register(store) == 1
    store.publish(SHARED, "pdf", skill("pdf", "v2"))  # an edit creates nothing
    store.governance.disable(SHARED, "pdf", reason="broken")
    store.governance.enable(SHARED, "pdf")
    assert register(store) == 1
    store.drafts.propose(SHARED, "docs", skill("docs"))  # a draft takes its name
    assert register(store) == 2
    store.commit([skillfs.Put(SHARED, "a", skill("a")), skillfs.Put(SHARED, "b", skill("b"))])
    assert register(store) == 3  # one version per commit, however many names it creates
    store.delete(SHARED, "pdf")
    assert register(store) == 3
    store.publish(SHARED, "pdf", skill("pdf"))  # a deleted name made live again is created
    assert register(store) == 4
    assert register(store, Scope.user(AGENT, "alice")) == 0  # each scope has its own


def test_the_register_shows_nowhere(store: Store, tmp_path: Path) -> None:
    since = store.publish(SHARED, "api", skill("api")).revision
    store.publish(SHARED, "pdf", skill("pdf"))
    store.drafts.propose(SHARED, "docs", skill("docs"))
    assert sorted(store.entries(SHARED)) == ["_drafts/docs", "api", "pdf"]
    assert sorted(store.manifests(SHARED)) == ["_drafts/docs", "api", "pdf"]
    assert store.skills(SHARED) == ["api", "pdf"]
    assert {e.skill for e in store.governance.audit(AGENT)} == {"_drafts/docs", "api", "pdf"}
    changes = store.changes.follow(AGENT, since, timeout=0.3)
    assert [c.skill for c in changes] == ["pdf", "_drafts/docs"]
    fs = SkillFileSystem(store=store, agent_id=AGENT, base=str(tmp_path / "ws"))
    found = ["skills/_drafts/docs/SKILL.md", "skills/api/SKILL.md", "skills/pdf/SKILL.md"]
    assert fs.find("skills") == found
    with skillfs.Skills(store, AGENT, "alice") as sk:
        snap = sk.snapshot()
        assert [s.id for s in snap.skills] == ["api", "pdf"] and not snap.problems
    with pytest.raises(skillfs.errors.NotFound, match=r"skills there: api, pdf$"):
        store.manifest(SHARED, "nothing")


def test_the_cli_lists_no_register(tmp_path: Path) -> None:
    from tests.cli_helpers import as_json, ok

    url = f"sqlite:///{tmp_path / 'skills.db'}"
    with skillfs.open_store(url) as store:
        store.publish(SHARED, "pdf", skill("pdf"))
    assert [row["skill"] for row in as_json(url, "ls", "--scope", str(SHARED))] == ["pdf"]
    assert "names" not in ok(url, "ls", "--scope", str(SHARED)).stdout
    assert "no look-alike" in ok(url, "check-names").stdout


def test_no_command_writes_the_register(store: Store) -> None:
    store.publish(SHARED, "pdf", skill("pdf"))
    before = store.revision(AGENT)
    for command in (skillfs.Put(SHARED, NAMES, skill("names")), Remove(SHARED, NAMES)):
        with pytest.raises(InvalidArgument, match=r"register of names.*leave it out"):
            store.commit([command])
    assert store.revision(AGENT) == before and register(store) == 1


@pytest.mark.server
def test_a_raw_commit_naming_the_register_is_refused(tmp_path: Path) -> None:
    """A `grpc://` client's `Commit` is judged by the server: its admin may not write the
    register either (a moved register would let a twin through), nor may anyone else."""
    from support.grpc_servers import ADMIN, ALICE, in_process

    server = in_process(f"memory://register-{tmp_path.name}", tmp_path, http=None)
    try:
        server.store.publish(SHARED, "pdf", skill("pdf"))
        held = server.store.manifests(SHARED, [NAMES])[NAMES]
        forged = held.model_copy(update={"version": held.version + 1})
        op = CommitOp(scope=SHARED, manifest=forged, expect=held.version)
        for token, error in ((ADMIN, InvalidArgument), (ALICE, PermissionDenied)):
            url = f"grpc://127.0.0.1:{server.grpc_port}"
            with skillfs.open_store(url, token=token) as c, pytest.raises(error):
                c.engine.commit(SHARED.domain, [op])
        assert register(server.store) == held.version
    finally:
        server.stop(0)


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_the_registers_history_stays_short_gc_keeps_it_and_quotas_skip_it(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    url = url_for(request, engine, tmp_path)
    with skillfs.open_store(url, limits=skillfs.Limits(scope_quota=10**9)) as store:
        for i in range(3 * KEPT_VERSIONS + 5):
            store.publish(SHARED, f"s{i}", skill(f"s{i}"))
        held = store.versions(SHARED, NAMES)  # the live version first
        assert held[0].version == 3 * KEPT_VERSIONS + 5
        assert len(held) <= 2 * KEPT_VERSIONS + 1
        used = store.engine.quota_used(SHARED.domain)
        assert used is not None
        store.gc(grace=0)
        assert len(store.versions(SHARED, NAMES)) == KEPT_VERSIONS + 1
        assert register(store) == 3 * KEPT_VERSIONS + 5  # GC keeps it
        # what the commits charged is what GC counts: the register in neither
        assert store.engine.quota_used(SHARED.domain) == used
