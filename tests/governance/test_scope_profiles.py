"""Host profiles per scope (docs/validation.md, "Host profiles"): a scope's setting
`_settings/profiles` names the profiles a SKILL.md written there is judged under, whatever
the process that writes it — on memory, SQLite, Redis, etcd and grpc:// (where the server
judges). The Committer reads the setting with the commit's entries and the engine compares
it, so a setting changed between the commit's read and its compare makes it judge again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Scope, Store, WriteOptions
from skillfs.engines.base import CommitOp
from skillfs.errors import FailedPrecondition, InvalidArgument, InvalidSkill, PermissionDenied
from skillfs.model.ops import Move, Put
from tests.runtime_helpers import counting_store
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
ANA = WriteOptions(actor="ana", message="alice runs Claude Code")
#: A Claude Code skill: `disable-model-invocation` is an unknown field under `spec`.
DEPLOY = {
    "SKILL.md": b"---\nname: deploy\ndescription: Deploys.\ndisable-model-invocation: true\n"
    b"---\nDeploy to $ARGUMENTS.\n"
}


@pytest.fixture(params=["memory", "sqlite", "redis", "etcd", "grpc"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    yield s
    s.close()


def by(store: Store, actor: str) -> str:
    """The actor a commit records: the one given, the token's name over grpc://."""
    return "admin" if store.url.startswith("grpc://") else actor


def errors(store: Store, scope: Scope, skill: str = "deploy") -> list[str]:
    return [f.rule for f in store.manifest(scope, skill).errors]


def test_one_store_judges_each_scope_under_its_own_profiles(store: Store) -> None:
    assert store.host_profiles.of(ALICE).names == ("spec",)  # no setting: the store's own
    store.host_profiles.accept(ALICE, ["claude-code"], options=ANA)
    assert store.host_profiles.of(ALICE).names == ("spec", "claude-code")
    store.publish(SHARED, "deploy", DEPLOY)
    store.publish(ALICE, "deploy", DEPLOY)
    assert errors(store, SHARED) == ["unknown-field"] and errors(store, ALICE) == []
    # the admin surfaces' strict policy follows the scope: refused in spec, stored here
    with pytest.raises(InvalidSkill, match="disable-model-invocation"):
        store.publish(SHARED, "other", {"SKILL.md": DEPLOY["SKILL.md"]}, strict=True)
    store.rollouts.stage(ALICE, "deploy", DEPLOY, skillfs.Rollout(fraction=0.5), strict=True)
    store.drafts.propose(ALICE, "deploy", DEPLOY)
    assert store.manifest(ALICE, "_drafts/deploy").errors == []
    # a move is judged again in the scope it lands in
    store.commit([Move(scope=SHARED, source="deploy", target="ship", into=ALICE)])
    assert errors(store, ALICE, "ship") == []
    # the setting is no skill, nor in a worker's view
    assert store.skills(ALICE) == ["deploy", "ship"]
    with skillfs.Skills(store, AGENT, "alice") as sk:
        assert [s.id for s in sk.snapshot().skills] == ["deploy", "ship"]


def test_the_setting_is_a_version_the_audit_lists(store: Store) -> None:
    store.host_profiles.accept(ALICE, ["saa", "claude-code"], options=ANA)
    setting = store.host_profiles.setting(ALICE)
    assert (setting.own, setting.version, setting.actor, setting.message) == (
        True, 1, by(store, "ana"), "alice runs Claude Code"
    )  # fmt: skip
    assert setting.profiles.names == ("spec", "saa", "claude-code")
    with pytest.raises(FailedPrecondition, match="already accepts spec, saa, claude-code"):
        store.host_profiles.accept(ALICE, ["saa", "claude-code"])
    store.host_profiles.accept(ALICE, ["spec"], options=WriteOptions(actor="bob"))
    assert store.host_profiles.of(ALICE).names == ("spec",)
    store.host_profiles.clear(ALICE, options=WriteOptions(actor="ana", message="back"))
    cleared = store.host_profiles.setting(ALICE)
    assert (cleared.own, cleared.version, cleared.actor) == (False, 3, by(store, "ana"))
    with pytest.raises(FailedPrecondition, match="names no host profiles of its own"):
        store.host_profiles.clear(ALICE)
    actions = [(e.skill, e.action, e.actor) for e in store.governance.audit(ALICE)]
    assert actions == [
        ("_settings/profiles", "clear-profiles", by(store, "ana")),
        ("_settings/profiles", "set-profiles", by(store, "bob")),
        ("_settings/profiles", "set-profiles", by(store, "ana")),
    ]


def test_an_unknown_profile_is_refused_and_nothing_written(store: Store) -> None:
    rev = store.revision(AGENT)
    with pytest.raises(InvalidArgument, match=r"unknown host profile 'claud': choose from spec, "):
        store.host_profiles.accept(ALICE, ["claud"])
    with pytest.raises(InvalidArgument, match="a setting of the scope, not a skill"):
        store.publish(ALICE, "_settings/profiles", DEPLOY)
    assert store.revision(AGENT) == rev and not store.host_profiles.setting(ALICE).own


def _raced(store: Store, change: object) -> list[bool]:
    """Make the setting change land between the next Put's read and its engine commit."""
    real, raced = store.engine.commit, []

    def commit(domain: str, ops: list[CommitOp], checks: list[object], charges: object) -> object:
        if not raced and any(op.manifest.skill == "deploy" for op in ops):
            raced.append(True)
            store.engine.commit = real  # type: ignore[method-assign]
            change()  # type: ignore[operator]
        return real(domain, ops, checks, charges)  # type: ignore[arg-type]

    store.engine.commit = commit  # type: ignore[method-assign]
    return raced


def test_a_setting_changed_during_a_commit_makes_it_judge_again(store: Store) -> None:
    raced = _raced(store, lambda: store.host_profiles.accept(ALICE, ["claude-code"]))
    store.publish(ALICE, "deploy", DEPLOY)  # read under spec: unknown-field, then raced
    assert raced and errors(store, ALICE) == []  # judged again under claude-code
    assert store.manifest(ALICE, "deploy").version == 1


@pytest.mark.server
def test_a_setting_changed_during_a_servers_commit_makes_it_judge_again(tmp_path: Path) -> None:
    """The same race on a skillfs server, which judges a client's Commit on its own read: the
    setting changes between that read and the server's engine commit; the client is told to
    read again, and its next Commit is judged under the new setting."""
    from support.grpc_servers import ADMIN, running

    with running(f"memory://{tmp_path.name}", tmp_path, http=None) as server:
        client = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN)
        raced = _raced(
            server.store, lambda: server.store.host_profiles.accept(ALICE, ["claude-code"])
        )
        client.publish(ALICE, "deploy", DEPLOY)
        assert raced and errors(client, ALICE) == []
        assert client.manifest(ALICE, "deploy").version == 1
        client.close()


@pytest.mark.server
def test_only_an_admin_grant_changes_the_setting(tmp_path: Path) -> None:
    from tests.helpers import token_server
    from tests.server.test_server_propose import open_as

    ana, bob = "profiles-ana-token-0123456789abcdef", "profiles-bob-token-0123456789abcdef"
    tokens = [("ana", ana, ["*:admin"]), ("bob", bob, [f"agent:{AGENT}:write"])]
    with token_server(f"memory://{tmp_path.name}", tmp_path, tokens) as server:
        admin, writer = open_as(server, ana), open_as(server, bob)
        with pytest.raises(PermissionDenied, match="may not admin"):
            writer.host_profiles.accept(ALICE, ["claude-code"])
        admin.host_profiles.accept(ALICE, ["claude-code"], options=ANA)
        with pytest.raises(PermissionDenied, match="may not admin"):
            writer.host_profiles.clear(ALICE)
        setting = writer.host_profiles.setting(ALICE)  # read with a write grant
        assert (setting.actor, setting.profiles.names) == ("ana", ("spec", "claude-code"))
        writer.publish(ALICE, "deploy", DEPLOY)
        assert errors(writer, ALICE) == []
        admin.close()
        writer.close()


def test_a_strict_write_raced_by_a_stricter_setting_is_refused(store: Store) -> None:
    if store.url.startswith("grpc://"):
        pytest.skip("strict is the client's policy: the server records the findings it makes")
    store.host_profiles.accept(ALICE, ["claude-code"])
    raced = _raced(store, lambda: store.host_profiles.clear(ALICE))
    with pytest.raises(InvalidSkill, match="disable-model-invocation"):
        store.publish(ALICE, "deploy", DEPLOY, strict=True)
    assert raced and store.skills(ALICE) == []


def test_a_scope_without_the_setting_takes_the_stores_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKILLFS_PROFILES", "claude-code")
    store = skillfs.open_store(f"sqlite:///{tmp_path / 'skills.db'}")
    store.publish(SHARED, "deploy", DEPLOY)
    assert errors(store, SHARED) == []
    store.host_profiles.accept(ALICE, ["spec"])  # a scope's own wins over the store's
    store.publish(ALICE, "deploy", DEPLOY)
    assert errors(store, ALICE) == ["unknown-field"]


def test_an_ordinary_write_reads_the_setting_in_its_own_read() -> None:
    """The setting costs no round trip: it is one more key of the scope's one load, and the
    engine's one commit compares it."""
    store, counter = counting_store()
    store.publish(SHARED, "deploy", DEPLOY)
    counter.clear()
    store.commit([Put(SHARED, "deploy", DEPLOY), Put(ALICE, "deploy", DEPLOY)])
    names = counter.names()  # (and the kill switch's reads for a new skill in a user's scope)
    assert (names.count("load_skills"), names.count("commit")) == (2, 1)  # one load a scope
    loads = [c.args[1] for c in counter.calls if c.name == "load_skills"]
    assert all("_settings/profiles" in keys for keys in loads)
