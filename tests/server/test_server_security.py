"""Tokens, grants and blob proofs: what a token may see and do through the server, and that
every refused request gets the right status and writes nothing."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs import auth as auth_module
from skillfs.auth import (
    Grant,
    Level,
    TokenConfig,
    Tokens,
    Unauthenticated,
    tokens_document,
)
from skillfs.errors import InvalidArgument, InvalidPath, PermissionDenied
from skillfs.model import Manifest, Scope
from skillfs.remote.engine import GrpcEngine
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.server.app import SkillfsServer
from skillfs.store.retention import HistoryPolicy
from support.grpc_servers import ADMIN, ALICE, READER, running, single
from tests.helpers import skill_md

AGENT = "support-bot"
A = Scope.user(AGENT, "alice")
B = Scope.user(AGENT, "bob")
SHARED = Scope.shared(AGENT)
SECRET = b"bob's secret notes: the launch code is 0000\n"


# The watch tests tell skills apart by their description.
md = functools.partial(skill_md, description="Does {name}. Use when testing.", end="")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(f"memory://{uuid.uuid4().hex}", tmp_path) as srv:
        yield srv


@pytest.fixture
def url(server: SkillfsServer) -> str:
    return f"grpc://127.0.0.1:{server.grpc_port}"


@pytest.fixture
def seeded(url: str) -> skillfs.Store:
    admin = skillfs.open_store(url, token=ADMIN)
    admin.publish(B, "notes", {"SKILL.md": md("notes"), "secret.md": SECRET})
    admin.publish(A, "mine", {"SKILL.md": md("mine"), "a.md": b"alice's file\n"})
    admin.publish(SHARED, "common", {"SKILL.md": md("common")})
    return admin


@pytest.fixture
def stubs(
    server: SkillfsServer,
) -> Iterator[tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub]]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        yield pb_grpc.SkillReaderStub(ch), pb_grpc.SkillAdminStub(ch)


def auth(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def code_of(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        if callable(call):
            result = call()
            if isinstance(result, Iterator):
                list(result)
    return err.value.code()


def blobs(server: SkillfsServer) -> set[str]:
    return set(server.store.engine.blob_shas())


# ------------------------------------------------------------------ grants


def test_grant_grammar() -> None:
    g = Grant.parse("agent:support-bot/user:*:read")
    assert g.covers(A) and g.covers(B) and not g.covers(SHARED)
    assert not g.covers(Scope.user("other", "alice")) and g.level == Level.read
    assert Grant.parse("agent:support-bot/shared:write").covers(SHARED)
    assert Grant.parse("agent:*:admin").covers(Scope.user("x", "y"))
    assert not Grant.parse("agent:*:admin").covers(Scope.market("m"))
    assert Grant.parse("market:team:read").covers(Scope.market("team"))
    assert Grant.parse("*:admin").covers(Scope.market("team"))
    for bad in ["*", "agent:a", "agent:a:owner", "agent:a/users:b:read", "agent:../x:read",
                "market:a/b:read", "user:alice:read", "agent:a/user::read"]:  # fmt: skip
        with pytest.raises(InvalidPath):
            Grant.parse(bad)


def test_a_refusal_names_the_grant_to_ask_for() -> None:
    """A token that reads nothing of a market (or agent) is told which grant would let it:
    the runtime of a worker with markets=["anthropic"] read only "ask for a grant"."""
    token = "w" * 20
    worker = Tokens(text=tokens_document([("worker", token, ["agent:bot:read"])], "k"))
    principal = worker.authenticate(f"Bearer {token}")
    with pytest.raises(PermissionDenied, match="grant such as 'market:anthropic:read'"):
        principal.require_domain("markets/anthropic")
    with pytest.raises(PermissionDenied, match="grant such as 'agent:other:read'"):
        principal.require_domain("agents/other")


def test_tokens_config_rules(tmp_path: Path) -> None:
    with pytest.raises(InvalidPath, match="exactly one"):
        TokenConfig.parse('{"tokens": [{"name": "x", "grants": ["*:read"]}]}')
    with pytest.raises(InvalidPath, match="shorter"):
        TokenConfig.parse('{"tokens": [{"name": "x", "token": "short", "grants": ["*:read"]}]}')
    with pytest.raises(InvalidPath, match="grants"):
        TokenConfig.parse('{"tokens": [{"name": "x", "token": "0123456789abcdefg"}]}')
    with pytest.raises(InvalidPath, match="no tokens"):
        Tokens(None, "")


def test_revoked_token_stops_working_without_restart(url: str, server: SkillfsServer) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    assert alice.skills(A) == []
    path = server.tokens.path
    assert path is not None
    doc = json.loads(path.read_text())
    doc["tokens"] = [t for t in doc["tokens"] if t["name"] != "alice"]
    path.write_text(json.dumps(doc))
    server.tokens._checked = 0.0  # skip the 2 s re-check interval
    with pytest.raises(PermissionDenied, match="unknown or revoked token"):
        alice.skills(A)


def _tokens_file(tmp_path: Path, names: list[str]) -> tuple[Path, dict[str, str]]:
    secrets = {n: f"{n}-token-{'0123456789abcdef'}" for n in ("alice", "other")}
    path = tmp_path / "tokens.json"
    path.write_text(tokens_document([(n, secrets[n], ["*:read"]) for n in names], "k"))
    return path, secrets


def test_a_lookup_racing_a_reload_cannot_keep_a_revoked_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup that began under the old config and ends after another request loaded the new
    one must not leave its answer behind for later requests."""
    path, secret = _tokens_file(tmp_path, ["alice", "other"])
    tokens = Tokens(path)
    real_hash = auth_module.hash_token
    between = threading.Event()
    go_on = threading.Event()

    def slow_hash(token: str) -> str:
        if token == secret["alice"] and threading.current_thread().name == "slow":
            between.set()
            go_on.wait(10)
        return real_hash(token)

    monkeypatch.setattr(auth_module, "hash_token", slow_hash)
    slow = threading.Thread(
        target=lambda: tokens.authenticate(f"Bearer {secret['alice']}"), name="slow"
    )
    slow.start()
    assert between.wait(10)
    path.write_text(tokens_document([("other", secret["other"], ["*:read"])], "k") + "\n")
    tokens._checked = 0.0
    assert tokens.authenticate(f"Bearer {secret['other']}").name == "other"  # loads the new one
    go_on.set()
    slow.join(10)
    tokens._checked = 0.0  # re-checked: unchanged
    with pytest.raises(Unauthenticated, match="unknown or revoked"):
        tokens.authenticate(f"Bearer {secret['alice']}")


def test_tokens_file_changes_are_seen_even_with_the_same_size_and_mtime(tmp_path: Path) -> None:
    path, secret = _tokens_file(tmp_path, ["alice", "other"])
    assert Tokens(str(path)).authenticate(f"Bearer {secret['alice']}").name == "alice"  # a str too
    tokens = Tokens(path)
    assert tokens.authenticate(f"Bearer {secret['alice']}").name == "alice"
    before = path.stat()
    doc = json.loads(path.read_text())
    doc["tokens"][0]["sha256"] = hashlib.sha256(b"someone else entirely!").hexdigest()
    path.write_text(json.dumps(doc, indent=2))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # a copy that keeps mtimes
    assert path.stat().st_size == before.st_size
    tokens._checked = 0.0
    with pytest.raises(Unauthenticated, match="unknown or revoked"):
        tokens.authenticate(f"Bearer {secret['alice']}")


def test_a_deleted_or_broken_tokens_file_fails_closed(tmp_path: Path) -> None:
    path, secret = _tokens_file(tmp_path, ["alice"])
    good = path.read_text()
    tokens = Tokens(path)
    assert tokens.authenticate(f"Bearer {secret['alice']}").name == "alice"
    for breakage in (path.unlink, lambda: path.write_text("tokens: [unclosed")):
        breakage()
        tokens._checked = 0.0
        with pytest.raises(Unauthenticated, match="cannot read its tokens config"):
            tokens.authenticate(f"Bearer {secret['alice']}")
        assert tokens.config.principals == {}  # the console refuses its sessions too
        path.write_text(good)
        tokens._checked = 0.0
        assert tokens.authenticate(f"Bearer {secret['alice']}").name == "alice"


# ------------------------------------------------------------------ one user cannot see another's


def test_alice_cannot_read_bobs_scope(url: str, seeded: skillfs.Store) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    assert alice.skills(A) == ["mine"] and alice.skills(SHARED) == ["common"]
    for attempt in (
        lambda: alice.skills(B),
        lambda: alice.manifest(B, "notes"),
        lambda: alice.history(B, "notes"),
        lambda: alice.read(B, "notes", "secret.md"),
    ):
        with pytest.raises(PermissionDenied, match="may not read user:support-bot/bob"):
            attempt()
    # listings show only what the token may read
    assert alice.agents() == [AGENT]
    assert {str(s) for s in alice.scopes(AGENT)} == {str(A), str(SHARED)}
    # and alice may not write the shared scope she reads
    with pytest.raises(PermissionDenied, match="may not write shared:support-bot"):
        alice.publish(SHARED, "mine", {"SKILL.md": md("mine")})


def test_access_answers_from_the_grants_and_writes_nothing(
    url: str,
    server: SkillfsServer,
    seeded: skillfs.Store,
    stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub],
) -> None:
    seeded.publish(A, "mine", {"SKILL.md": md("mine")})  # version 1 goes to history
    # a policy that keeps no history: any retention applied on the way would show
    server.store.history_policy = HistoryPolicy(keep_versions=0, keep_days=0)
    before = (server.store.revision(AGENT), server.store.history(A, "mine"), blobs(server))
    alice = skillfs.open_store(url, token=ALICE)
    answers = {scope: alice.access(scope) for scope in (A, SHARED, B)}
    levels = {scope: (a.read, a.write, a.admin) for scope, a in answers.items()}
    assert levels == {A: (True, True, False), SHARED: (True, False, False), B: (False,) * 3}
    with pytest.raises(PermissionDenied) as err:
        alice.access(SHARED).require("write")
    assert str(err.value) == (
        "token 'alice' may not write shared:support-bot: ask an operator for a grant such as "
        "'agent:support-bot/shared:write'"
    )
    with pytest.raises(PermissionDenied, match="'agent:support-bot/user:bob:read'"):
        alice.access(B).require("read")
    reader, _ = stubs
    reply = reader.Access(pb.AccessRequest(scope=str(B)), metadata=auth(ADMIN))
    assert (reply.read, reply.write, reply.admin, reply.token) == (True, True, True, "admin")
    assert reply.resource == "agent:support-bot/user:bob"
    assert code_of(lambda: reader.Access(pb.AccessRequest(scope=str(A)))) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    bad = pb.AccessRequest(scope="nonsense")
    assert code_of(lambda: reader.Access(bad, metadata=auth(ALICE))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (server.store.revision(AGENT), server.store.history(A, "mine"), blobs(server)) == before
    assert [m.version for m in before[1]] == [2, 1]  # the live version, then history
    # what the CLI asked before, DropHistory of no versions, applied retention
    alice.engine.drop_history(A, "mine", [])
    assert [m.version for m in server.store.history(A, "mine")] == [2]
    # a store opened directly has no tokens: everything
    local = skillfs.open_store(f"memory://{uuid.uuid4().hex}").access(B)
    assert (local.read, local.write, local.admin) == (True, True, True)


def test_blobs_by_hash_reveal_nothing(
    url: str, seeded: skillfs.Store, stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub]
) -> None:
    reader, admin = stubs
    secret = hashlib.sha256(SECRET).hexdigest()
    absent = hashlib.sha256(b"nobody stored this").hexdigest()
    mine = seeded.manifest(A, "mine")
    meta = auth(ALICE)

    def read(sha: str, source: pb.Source | None) -> grpc.RpcError:
        req = pb.ReadFileRequest(ranges=[pb.BlobRange(sha256=sha, source=source)])
        with pytest.raises(grpc.RpcError) as err:
            list(reader.ReadFile(req, metadata=meta))
        return err.value

    # naming bob's manifest: refused outright
    bobs = pb.Source(scope=str(B), skill="notes", version=1)
    assert read(secret, bobs).code() == grpc.StatusCode.PERMISSION_DENIED
    # naming her own manifest: the same NOT_FOUND for bob's blob as for one that does not exist
    own = pb.Source(scope=str(A), skill="mine", version=mine.version)
    e1, e2 = read(secret, own), read(absent, own)
    assert e1.code() == e2.code() == grpc.StatusCode.NOT_FOUND
    assert e1.details().replace(secret, "X") == e2.details().replace(absent, "X")
    # naming no manifest: only '*:read' tokens may
    assert read(secret, None).code() == grpc.StatusCode.PERMISSION_DENIED
    got = list(
        reader.ReadFile(
            pb.ReadFileRequest(ranges=[pb.BlobRange(sha256=secret)]), metadata=auth(READER)
        )
    )
    assert b"".join(c.data for c in got) == SECRET
    # touching: never reported present without a proof, forged receipts included
    for proof in (
        pb.BlobProof(sha256=secret),
        pb.BlobProof(sha256=secret, size=len(SECRET), receipt=b"x" * 32),
        pb.BlobProof(sha256=secret, source=own),
        pb.BlobProof(sha256=secret, source=bobs),
    ):
        reply = admin.TouchBlobs(pb.TouchBlobsRequest(blobs=[proof]), metadata=meta)
        assert list(reply.present) == []
    # while her own blob, proven by her manifest, is present and gets a receipt
    a_sha = mine.files["a.md"].sha256
    reply = admin.TouchBlobs(
        pb.TouchBlobsRequest(blobs=[pb.BlobProof(sha256=a_sha, source=own)]), metadata=meta
    )
    assert [p.sha256 for p in reply.present] == [a_sha] and reply.present[0].receipt


def test_commit_cannot_reference_a_blob_it_neither_uploaded_nor_may_read(
    url: str, seeded: skillfs.Store, server: SkillfsServer
) -> None:
    secret = hashlib.sha256(SECRET).hexdigest()
    stolen = Manifest.model_validate(
        {
            "skill": "stolen",
            "version": 1,
            "commit_id": "c1",
            "committed_at": 0.0,
            "files": {
                "SKILL.md": seeded.manifest(A, "mine").files["SKILL.md"].model_dump(),
                "loot.md": {"sha256": secret, "size": len(SECRET), "mode": 0o644, "mtime": 0.0},
            },
        }
    )
    before = seeded.revision(AGENT)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        admin = pb_grpc.SkillAdminStub(ch)
        own = pb.Source(scope=str(A), skill="mine", version=1)
        req = pb.CommitRequest(
            domain=f"agents/{AGENT}",
            ops=[pb.CommitOp(scope=str(A), manifest_json=stolen.model_dump_json().encode())],
            proofs=[
                pb.BlobProof(sha256=stolen.files["SKILL.md"].sha256, source=own),
                pb.BlobProof(sha256=secret, size=len(SECRET), receipt=b"forged" * 6),
            ],
        )
        with pytest.raises(grpc.RpcError) as err:
            admin.Commit(iter([req]), metadata=auth(ALICE))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "neither uploaded nor read" in err.value.details()
    assert seeded.revision(AGENT) == before
    # holding the bytes is proof enough: uploading them earns the receipt (nothing leaks)
    alice = skillfs.open_store(url, token=ALICE)
    alice.publish(A, "copied", {"SKILL.md": md("copied"), "loot.md": SECRET})
    assert alice.read(A, "copied", "loot.md") == SECRET


def test_commit_refuses_blobs_the_store_no_longer_holds(
    url: str, seeded: skillfs.Store, server: SkillfsServer
) -> None:
    """Commit touches every blob it names (GC's grace starts again) and refuses one that is
    gone, even for a caller that proves it may reference it, or needs no proof."""
    alice = skillfs.open_store(url, token=ALICE)
    alice.publish(A, "s", {"SKILL.md": md("s"), "f.md": b"a file GC will sweep\n"})
    v1 = alice.manifest(A, "s")
    f = v1.files["f.md"]
    assert server.store.engine.delete_blob_if_idle(f.sha256, cutoff=1e12)  # swept
    ghost = hashlib.sha256(b"never uploaded").hexdigest()
    before = seeded.revision(AGENT)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        admin = pb_grpc.SkillAdminStub(ch)
        for token, files in (
            (ALICE, dict(v1.files)),  # proven by a readable source: v1 lists it
            (ADMIN, {**v1.files, "f.md": f.model_copy(update={"sha256": ghost})}),  # no proof
        ):
            v2 = v1.model_copy(update={"version": 2, "commit_id": "c2", "files": files})
            req = pb.CommitRequest(
                domain=f"agents/{AGENT}",
                ops=[pb.CommitOp(scope=str(A), manifest_json=v2.model_dump_json().encode(),
                                 expect=1)],
                proofs=[pb.BlobProof(sha256=e.sha256, source=pb.Source(
                    scope=str(A), skill="s", version=1)) for e in v1.files.values()],
            )  # fmt: skip
            with pytest.raises(grpc.RpcError) as err:
                admin.Commit(iter([req]), metadata=auth(token))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
            assert "f.md names blob" in (err.value.details() or "")
            assert "upload it again" in (err.value.details() or "")
    assert seeded.revision(AGENT) == before
    # the Store sends the bytes it has; the commit goes through
    assert alice.publish(A, "s", {"SKILL.md": md("s"), "f.md": b"a file GC will sweep\n"})
    assert alice.read(A, "s", "f.md") == b"a file GC will sweep\n"


def test_a_new_receipt_key_does_not_break_edits_that_keep_files_by_reference(
    url: str, server: SkillfsServer
) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    alice.publish(A, "s", {"SKILL.md": md("s"), "ref.md": b"reference\n"})
    engine = alice.engine
    assert isinstance(engine, GrpcEngine)
    orphan = b"uploaded, never committed\n"
    orphan_sha = hashlib.sha256(orphan).hexdigest()
    engine.put_blob(orphan_sha, [orphan], 0.0)  # proven by its receipt alone
    # the operator sets a new receipt key (without one, any edit of the tokens file does)
    path = server.tokens.path
    assert path is not None
    doc = json.loads(path.read_text())
    doc["receipt_key"] = "rotated"
    path.write_text(json.dumps(doc))
    server.tokens._checked = 0.0
    m = alice.manifest(A, "s")
    ref = m.files["ref.md"]
    # the kept file is proven by the version it was read from (its receipt no longer holds;
    # the version it replaces holds the file, so the commit does not touch it again)
    r = alice.publish(A, "s", {"SKILL.md": md("s") + b"v2\n", "ref.md": ref}, m.version)
    assert r.version == 2 and alice.read(A, "s", "ref.md") == b"reference\n"
    # a stale receipt that proves nothing is forgotten; the bytes are uploaded again
    assert engine.touch_blobs([orphan_sha], 0.0) == set()
    assert engine._receipts.get(orphan_sha) is None
    alice.publish(A, "t", {"SKILL.md": md("t"), "o.md": orphan})
    assert alice.read(A, "t", "o.md") == orphan
    # either proof must hold by itself: a forged receipt next to an unreadable source is none
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        touch = pb_grpc.SkillAdminStub(ch).TouchBlobs
        theirs = pb.Source(scope=str(B), skill="notes", version=1)
        bad = pb.BlobProof(sha256=ref.sha256, size=ref.size, receipt=b"x" * 32, source=theirs)
        assert not touch(pb.TouchBlobsRequest(blobs=[bad]), metadata=auth(ALICE)).present


# ------------------------------------------------------------------ admin API


def test_user_token_cannot_use_the_admin_api(url: str, seeded: skillfs.Store) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    with pytest.raises(PermissionDenied, match="not an admin of agent"):
        alice.usage.counts(AGENT)
    with pytest.raises(PermissionDenied, match=r"\*:admin"):
        alice.gc()
    with pytest.raises(PermissionDenied, match=r"\*:admin"):
        alice.engine.delete_blob_if_idle("0" * 64, 1e12)
    with grpc.insecure_channel(url.removeprefix("grpc://")) as ch:
        admin_rpc = pb_grpc.SkillAdminStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            admin_rpc.Gc(pb.GcRequest(), metadata=auth(ALICE))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        report = admin_rpc.Gc(pb.GcRequest(grace=3600), metadata=auth(ADMIN))
        assert report.blobs_seen >= 5 and report.blobs_deleted == 0  # all referenced, or young
    reader = skillfs.open_store(url, token=READER)  # reads everything, writes nothing
    with pytest.raises(PermissionDenied, match="may write nowhere"):
        reader.publish(A, "x", {"SKILL.md": md("x")})
    with pytest.raises(PermissionDenied):
        reader.gc()


def test_watch_shows_only_readable_scopes(url: str, seeded: skillfs.Store) -> None:
    alice = skillfs.open_store(url, token=ALICE)
    since = alice.revision(AGENT)
    seeded.publish(B, "notes", {"SKILL.md": md("notes"), "secret.md": b"v2"})
    seeded.publish(A, "mine", {"SKILL.md": md("mine")})
    changes = next(iter(alice.changes.follow(AGENT, since=since, timeout=5)))
    assert (changes.scope, changes.skill, changes.version) == (A, "mine", 2)


def _set_grants(server: SkillfsServer, name: str, grants: list[str] | None) -> None:
    """Give token `name` these grants in the server's tokens file (None: revoke it)."""
    path = server.tokens.path
    assert path is not None
    doc = json.loads(path.read_text())
    doc["tokens"] = [t for t in doc["tokens"] if t["name"] != name or grants is not None]
    for t in doc["tokens"]:
        if t["name"] == name:
            t["grants"] = grants
    path.write_text(json.dumps(doc))
    server.tokens._checked = 0.0  # skip the 2 s re-check interval


def test_an_open_watch_follows_narrowed_grants_and_ends_when_revoked(
    server: SkillfsServer,
    seeded: skillfs.Store,
    stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub],
) -> None:
    reader, _ = stubs
    since = seeded.revision(AGENT)
    assert since is not None
    request = pb.WatchRequest(
        domain=f"agents/{AGENT}",
        since=pb.Revision(epoch=since.epoch, counter=since.counter),
        with_manifests=True,
    )
    stream = reader.Watch(request, metadata=auth(ALICE), timeout=30)
    got: queue.Queue[pb.WatchEvent | grpc.RpcError] = queue.Queue()

    def drain() -> None:
        try:
            for event in stream:
                got.put(event)
        except grpc.RpcError as exc:
            got.put(exc)

    threading.Thread(target=drain, daemon=True).start()

    def next_shown() -> tuple[list[tuple[str, str, int]], list[str]] | grpc.RpcError:
        """The next event with changes in it (skipping revision-only ones), or the error."""
        while True:
            item = got.get(timeout=15)
            if isinstance(item, grpc.RpcError):
                return item
            if item.changes:
                return [(c.scope, c.skill, c.version) for c in item.changes], [
                    json.loads(m.manifest_json)["frontmatter"]["description"]
                    for m in item.manifests
                ]

    seeded.publish(A, "mine", {"SKILL.md": md("mine")})
    assert next_shown() == ([(str(A), "mine", 2)], ["Does mine. Use when testing."])
    # alice may now read the shared scope only: her own scope's changes are not shown any more
    _set_grants(server, "alice", ["agent:support-bot/shared:read"])
    seeded.publish(A, "mine", {"SKILL.md": md("mine").replace(b"Does", b"SECRET")})
    seeded.publish(SHARED, "common", {"SKILL.md": md("common")})
    assert next_shown() == ([(str(SHARED), "common", 2)], ["Does common. Use when testing."])
    # revoked: the stream ends, and the change after the revocation is never sent
    _set_grants(server, "alice", None)
    seeded.publish(SHARED, "common", {"SKILL.md": md("common").replace(b"Does", b"SECRET")})
    end = next_shown()
    assert isinstance(end, grpc.RpcError), end
    assert end.code() == grpc.StatusCode.UNAUTHENTICATED


def test_an_idle_watch_ends_when_its_token_is_revoked(
    server: SkillfsServer,
    seeded: skillfs.Store,
    stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub],
) -> None:
    """With nothing published, the server's one check of the tokens config wakes the streams
    when it changes: a revoked token's open Watch ends (UNAUTHENTICATED) within seconds."""
    reader, _ = stubs
    stream = reader.Watch(pb.WatchRequest(domain=f"agents/{AGENT}"), metadata=auth(ALICE))
    ended: queue.Queue[grpc.RpcError | None] = queue.Queue()

    def drain() -> None:
        try:
            for _ in stream:
                pass
            ended.put(None)
        except grpc.RpcError as exc:
            ended.put(exc)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 10
    while server.backend.watches.open < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.backend.watches.open == 1
    _set_grants(server, "alice", None)
    end = ended.get(timeout=10)
    assert isinstance(end, grpc.RpcError), end
    assert end.code() == grpc.StatusCode.UNAUTHENTICATED


# ------------------------------------------------------------------ bad requests write nothing


def test_no_token_or_a_wrong_one(
    url: str, server: SkillfsServer, stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub]
) -> None:
    reader, admin = stubs
    req = pb.GetManifestsRequest(scope=str(A), whole_scope=True)
    for meta in ([], auth("not-a-token-0123456789"), [("authorization", f"Basic {ADMIN}")]):
        with pytest.raises(grpc.RpcError) as err:
            single(reader.GetManifests(req, metadata=meta))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        admin.UploadBlob(iter([pb.UploadBlobRequest(data=b"x")]), metadata=[])
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    nobody = skillfs.open_store(url, token="")
    with pytest.raises(PermissionDenied, match=r"no token: .*the CLI's --token TOKEN"):
        nobody.publish(A, "x", {"SKILL.md": md("x")})
    wrong = skillfs.open_store(url, token="wrong-token-0123456789")
    with pytest.raises(PermissionDenied, match="unknown or revoked"):
        wrong.publish(A, "x", {"SKILL.md": md("x")})
    assert blobs(server) == set() and server.store.revision(AGENT) is None


@pytest.mark.parametrize(
    "scope, skill",
    [("user:support-bot/../bob", "x"), ("user:support-bot/alice", "../bob"),
     ("shared:..", "x"), ("user:support-bot/alice", "a/b"), ("nonsense", "x")],
)  # fmt: skip
def test_path_traversal_in_names(
    scope: str,
    skill: str,
    server: SkillfsServer,
    stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub],
) -> None:
    reader, admin = stubs
    meta = auth(ADMIN)
    calls = [
        lambda: single(reader.GetManifests(
            pb.GetManifestsRequest(scope=scope, skills=[skill]), metadata=meta)),
        lambda: single(reader.History(pb.HistoryRequest(scope=scope, skill=skill), metadata=meta)),
        lambda: admin.Delete(pb.DeleteRequest(scope=scope, skill=skill), metadata=meta),
        lambda: admin.Publish(
            iter([pb.PublishRequest(header=pb.PublishHeader(scope=scope, skill=skill, force=True)),
                  pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=md("x")))]),
            metadata=meta,
        ),
    ]  # fmt: skip
    for call in calls:
        assert code_of(call) == grpc.StatusCode.INVALID_ARGUMENT
    assert server.store.agents() == [] and blobs(server) == set()


@pytest.mark.parametrize(
    "path", ["../../etc/passwd", "/etc/passwd", "a/../../b", "a\\..\\b", "a//b"]
)
def test_path_traversal_in_files(
    path: str, server: SkillfsServer, stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub]
) -> None:
    _, admin = stubs
    publish = [
        pb.PublishRequest(header=pb.PublishHeader(scope=str(A), skill="x", force=True)),
        pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=md("x"))),
        pb.PublishRequest(file=pb.PublishFile(path=path, data=b"pwned")),
    ]
    assert code_of(lambda: admin.Publish(iter(publish), metadata=auth(ADMIN))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    sha = hashlib.sha256(b"").hexdigest()
    m = {"skill": "x", "version": 1, "commit_id": "c", "committed_at": 0.0,
         "files": {path: {"sha256": sha, "size": 0, "mode": 420, "mtime": 0.0}}}  # fmt: skip
    commit = pb.CommitRequest(
        domain=f"agents/{AGENT}",
        ops=[pb.CommitOp(scope=str(A), manifest_json=json.dumps(m).encode())],
    )
    assert code_of(lambda: admin.Commit(iter([commit]), metadata=auth(ADMIN))) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert server.store.revision(AGENT) is None and blobs(server) == set()


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o1777, 0o100644, -1])
def test_only_permission_bits_are_stored(
    mode: int,
    url: str,
    server: SkillfsServer,
    stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub],
) -> None:
    """No setuid, setgid, sticky bit or file type on any publish path: the shared Store (every
    engine, fsspec, CLI, console), the grpc:// engine, and the server's Publish and Commit."""
    files: dict[str, bytes | skillfs.File] = {
        "SKILL.md": md("x"),
        "run.sh": skillfs.File(b"#!/bin/sh\n", mode=mode),
    }
    why = f"mode {oct(mode)} of x/run.sh: only permission bits 0o777 are stored"
    with pytest.raises(InvalidArgument, match=why):
        server.store.publish(A, "x", files)  # the server's own store (memory://)
    with pytest.raises(InvalidArgument, match=why):
        skillfs.open_store(url, token=ALICE).publish(A, "x", files)
    _, admin = stubs
    if mode >= 0:  # a uint32 on the wire
        publish = [
            pb.PublishRequest(header=pb.PublishHeader(scope=str(A), skill="x", force=True)),
            pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=md("x"))),
            pb.PublishRequest(file=pb.PublishFile(path="run.sh", data=b"#!/bin/sh\n", mode=mode)),
        ]
        with pytest.raises(grpc.RpcError) as err:
            admin.Publish(iter(publish), metadata=auth(ADMIN))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "only permission bits 0o777" in (err.value.details() or "")
    sha = hashlib.sha256(b"").hexdigest()
    m = {"skill": "x", "version": 1, "commit_id": "c", "committed_at": 0.0,
         "files": {"run.sh": {"sha256": sha, "size": 0, "mode": mode, "mtime": 0.0}}}  # fmt: skip
    commit = pb.CommitRequest(
        domain=f"agents/{AGENT}",
        ops=[pb.CommitOp(scope=str(A), manifest_json=json.dumps(m).encode())],
    )
    with pytest.raises(grpc.RpcError) as err:
        admin.Commit(iter([commit]), metadata=auth(ADMIN))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "only permission bits 0o777" in (err.value.details() or "")
    assert server.store.revision(AGENT) is None and blobs(server) == set()
    skillfs.open_store(url, token=ALICE).publish(
        A, "x", {**files, "run.sh": skillfs.File(b"#!/bin/sh\n", mode=0o750)}
    )


def test_oversize_messages_and_files(
    server: SkillfsServer, stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub]
) -> None:
    _, admin = stubs
    meta = auth(ADMIN)
    big = b"x" * (17 * 1024 * 1024)  # over the server's 16 MiB message limit
    sha = hashlib.sha256(big).hexdigest()
    messages = [
        pb.UploadBlobRequest(header=pb.UploadBlobHeader(sha256=sha, size=len(big))),
        pb.UploadBlobRequest(data=big),
    ]
    assert code_of(lambda: admin.UploadBlob(iter(messages), metadata=meta)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    limit = server.store.limits.max_file_size
    header = pb.UploadBlobHeader(sha256=sha, size=limit + 1)
    assert (
        code_of(
            lambda: admin.UploadBlob(iter([pb.UploadBlobRequest(header=header)]), metadata=meta)
        )
        == grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    entry = {"sha256": sha, "size": limit + 1, "mode": 420, "mtime": 0.0}
    m = {"skill": "x", "version": 1, "commit_id": "c", "committed_at": 0.0, "files": {"b": entry}}
    commit = pb.CommitRequest(
        domain=f"agents/{AGENT}",
        ops=[pb.CommitOp(scope=str(A), manifest_json=json.dumps(m).encode())],
    )
    assert (
        code_of(lambda: admin.Commit(iter([commit]), metadata=meta))
        == grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    assert server.store.revision(AGENT) is None and blobs(server) == set()


def test_malformed_requests(
    server: SkillfsServer, stubs: tuple[pb_grpc.SkillReaderStub, pb_grpc.SkillAdminStub]
) -> None:
    reader, admin = stubs
    meta = auth(ADMIN)
    data = b"some bytes"
    sha = hashlib.sha256(data).hexdigest()
    cases = {
        "bytes that are not a protobuf message": lambda: server_raw(server, b"\xff\xff\xff"),
        "a manifest that is not JSON": lambda: admin.Commit(iter([
            pb.CommitRequest(domain=f"agents/{AGENT}",
                             ops=[pb.CommitOp(scope=str(A), manifest_json=b"{nope")])]),
            metadata=meta),
        "a version that is not expect + 1": lambda: admin.Commit(iter([
            pb.CommitRequest(domain=f"agents/{AGENT}", ops=[pb.CommitOp(
                scope=str(A), expect=3, manifest_json=json.dumps(
                    {"skill": "x", "version": 9, "commit_id": "c", "committed_at": 0,
                     "files": {}}).encode())])]),
            metadata=meta),
        "a scope outside the commit's domain": lambda: admin.Commit(iter([
            pb.CommitRequest(domain="agents/other", ops=[pb.CommitOp(
                scope=str(A), manifest_json=json.dumps(
                    {"skill": "x", "version": 1, "commit_id": "c", "committed_at": 0,
                     "files": {}}).encode())])]),
            metadata=meta),
        "an empty commit": lambda: admin.Commit(iter([pb.CommitRequest(domain=f"agents/{AGENT}")]),
                                                metadata=meta),
        "a bad domain": lambda: reader.Revisions(pb.RevisionsRequest(domains=["agents"]),
                                                 metadata=meta),
        "a bad hash": lambda: reader.ReadFile(
            pb.ReadFileRequest(ranges=[pb.BlobRange(sha256="../../etc/passwd")]), metadata=meta),
        "a negative range": lambda: reader.ReadFile(
            pb.ReadFileRequest(ranges=[pb.BlobRange(sha256=sha, offset=-1)]), metadata=meta),
        "an upload without header": lambda: admin.UploadBlob(
            iter([pb.UploadBlobRequest(data=data)]), metadata=meta),
        "an upload whose bytes do not hash": lambda: admin.UploadBlob(
            iter([pb.UploadBlobRequest(header=pb.UploadBlobHeader(sha256=sha, size=len(data))),
                  pb.UploadBlobRequest(data=b"other bytes")]), metadata=meta),
        "a publish without header": lambda: admin.Publish(
            iter([pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=data))]),
            metadata=meta),
        "a view without user": lambda: single(reader.Snapshot(
            pb.SnapshotRequest(view=pb.View(agent_id=AGENT)), metadata=meta)),
    }  # fmt: skip
    for what, call in cases.items():
        assert code_of(call) == grpc.StatusCode.INVALID_ARGUMENT, what
    # a skill that breaks the spec is refused by Publish unless forced (docs/design.md §7)
    bad = [
        pb.PublishRequest(header=pb.PublishHeader(scope=str(A), skill="x")),
        pb.PublishRequest(file=pb.PublishFile(path="SKILL.md", data=b"no frontmatter")),
    ]
    with pytest.raises(grpc.RpcError) as err:
        admin.Publish(iter(bad), metadata=meta)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "force" in err.value.details()
    assert server.store.revision(AGENT) is None and blobs(server) == set()


def server_raw(server: SkillfsServer, payload: bytes) -> object:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        call = ch.unary_unary("/skillfs.v1.SkillAdmin/Commit")
        return call(payload, metadata=auth(ADMIN))
