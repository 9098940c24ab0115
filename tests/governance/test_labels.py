"""Labels and pins (docs/governance.md, "Labels and pins") on memory, SQLite and grpc:// (the
`store` fixture): a pinned worker keeps its version through publishes, follows its label
when it moves, loses a disabled skill at its next step; layer and skill pins; a pin beats a
rollout; retention and GC keep labelled versions; the audit; bad input writing nothing; a
server vouching for labels and its view RPCs taking pins; the CLI on SQLite and grpc://.
Every engine and topology: tests/engines/test_governed_manifests.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest

import skillfs
from skillfs import Pins, Rollout, WriteOptions
from skillfs.engines.base import CommitOp
from skillfs.errors import FailedPrecondition, InvalidArgument, NotFound
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.store.retention import HistoryPolicy
from support import grpc_servers
from support.grpc_servers import single
from tests.cli_helpers import as_json, error_line, ok, run
from tests.governance.test_rollout import AGENT, ALICE, MARKET, SHARED, files
from tests.helpers import skill_md


def seen(worker: skillfs.Skills) -> dict[str, tuple[str, int | None, str | None]]:
    """A worker's next step: skill -> (the body its files were written with, version, the
    label its pins hold it at), read through the snapshot."""
    snap = worker.snapshot()
    out = {}
    for s in snap.skills:
        text = snap.read_bytes(s.id, "references/r.md").decode()
        out[s.id] = (text.removeprefix("ref ").strip(), s.version, s.pinned)
    return out


def test_a_pinned_worker_keeps_its_version_follows_its_label_and_loses_a_disabled_skill(
    store: skillfs.Store, other: skillfs.Store
) -> None:
    v1 = store.publish(SHARED, "s", files("s", "one")).version
    store.publish(SHARED, "t", files("t", "tee"))
    pinned = skillfs.Skills(other, AGENT, "bob", pins="stable")  # another replica's worker
    free = skillfs.Skills(other, AGENT, "carol")
    assert seen(pinned) == {"s": ("one", v1, None), "t": ("tee", 1, None)}  # no label: head
    made = store.labels.set(SHARED, "s", "stable", options=WriteOptions(message="known good"))
    assert made.version == v1 + 1
    # the same files, now held by the label: the next step says so (a view of its own token)
    assert seen(pinned) == {"s": ("one", v1, "stable"), "t": ("tee", 1, None)}
    # publishes: the pinned worker keeps its version, the others get each at their next step
    for body in ("two", "three"):
        store.publish(SHARED, "s", files("s", body))
        assert seen(pinned)["s"] == ("one", v1, "stable")
        assert seen(free)["s"][0] == body
    head = store.manifest(SHARED, "s")
    assert head.labels["stable"].version == v1  # carried by every version
    # the label moves to the head: the pinned worker follows at its next step
    store.labels.set(SHARED, "s", "stable", head.version)
    assert seen(pinned)["s"] == ("three", head.version, "stable")
    # back to version 1, a version kept in history
    store.labels.set(SHARED, "s", "stable", v1)
    assert seen(pinned)["s"] == ("one", v1, "stable")
    # a disable wins over the pin, at the next step
    store.governance.disable(SHARED, "s", "leaks a key")
    assert "s" not in seen(pinned) and "s" not in seen(free)
    problems = pinned.snapshot().problems
    assert [(p.skill, p.disabled) for p in problems] == [("s", "leaks a key")]
    store.governance.enable(SHARED, "s")
    assert seen(pinned)["s"] == ("one", v1, "stable")
    # the label removed: the pinned worker gets the head
    store.labels.remove(SHARED, "s", "stable")
    assert seen(pinned)["s"] == ("three", store.manifest(SHARED, "s").version, None)
    actions = [(e.version, e.action) for e in store.governance.audit(SHARED, skill="s")]
    assert [a for _, a in actions][:4] == ["unlabel", "enable", "disable", "label"]
    labelled = store.governance.audit(SHARED, skill="s", limit=100)[-2]
    assert (labelled.action, labelled.message) == ("label", "known good")
    pinned.close()
    free.close()


def test_skill_and_layer_pins_and_a_pin_beats_a_rollout(store: skillfs.Store) -> None:
    for name in ("a", "b"):
        store.publish(SHARED, name, files(name, f"{name}1"))
        store.labels.set(SHARED, name, "stable")
        store.publish(SHARED, name, files(name, f"{name}2"))
    store.publish(MARKET, "m", files("m", "m1"))
    store.labels.set(MARKET, "m", "stable")
    store.publish(MARKET, "m", files("m", "m2"))
    layers = [skillfs.Market("team")]

    def bodies(pins: Pins | str | None, user: str = "bob") -> dict[str, str]:
        with skillfs.Skills(store, AGENT, user, layers, pins=pins) as worker:
            return {k: v[0] for k, v in seen(worker).items()}

    assert bodies(None) == {"a": "a2", "b": "b2", "m": "m2"}
    assert bodies("stable") == {"a": "a1", "b": "b1", "m": "m1"}
    assert bodies(Pins(skills={"a": "stable"})) == {"a": "a1", "b": "b2", "m": "m2"}
    assert bodies(Pins(layers={"market:team": "stable"})) == {"a": "a2", "b": "b2", "m": "m1"}
    # a skill's pin beats its layer's: `latest` holds `a` at its head under a layer pin
    both = Pins(layers={"*": "stable"}, skills={"a": "latest"})
    assert bodies(both) == {"a": "a2", "b": "b1", "m": "m1"}
    assert bodies(Pins(layers={"*": "no-such-label"})) == {"a": "a2", "b": "b2", "m": "m2"}
    # a canary for bob: bob's pinned worker keeps the labelled version, `latest` the head
    store.rollouts.stage(SHARED, "a", files("a", "canary"), Rollout(users=["bob"]))
    assert bodies(None)["a"] == "canary"
    assert bodies("stable")["a"] == "a1"
    assert bodies("latest")["a"] == "a2"
    store.rollouts.stage(SHARED, "new", files("new", "staged"), Rollout(users=["bob"]))
    assert "new" in bodies(None) and "new" not in bodies("latest")
    with pytest.raises(InvalidArgument, match="no store layer is labelled 'market:other'"):
        skillfs.Skills(store, AGENT, "bob", pins=Pins(layers={"market:other": "stable"}))
    with pytest.raises(InvalidArgument, match="invalid label"):
        skillfs.Skills(store, AGENT, "bob", pins="not a label")


def test_bad_input_writes_nothing(store: skillfs.Store) -> None:
    store.publish(SHARED, "s", files("s", "one"))
    store.delete(SHARED, "s")
    store.publish(SHARED, "s", files("s", "three"))  # version 3; version 2 is a deletion
    store.labels.set(SHARED, "s", "stable", 1)  # version 4
    cases = [
        (lambda: store.labels.set(SHARED, "nope", "stable"), NotFound, "nope"),
        (lambda: store.labels.set(SHARED, "s", "latest"), InvalidArgument, "reserved"),
        (lambda: store.labels.set(SHARED, "s", "bad label"), InvalidArgument, "invalid label"),
        (lambda: store.labels.set(SHARED, "s", "-x"), InvalidArgument, "invalid label"),
        (lambda: store.labels.set(SHARED, "s", "x", 9), NotFound, "has no version 9"),
        (lambda: store.labels.set(SHARED, "s", "x", 0), NotFound, "has no version 0"),
        (lambda: store.labels.set(SHARED, "s", "x", 2), FailedPrecondition, "a deletion"),
        (lambda: store.labels.set(SHARED, "s", "stable", 1), FailedPrecondition, "nothing"),
        (lambda: store.labels.remove(SHARED, "s", "beta"), NotFound, "no label 'beta'"),
        (lambda: store.labels.remove(SHARED, "s", "latest"), InvalidArgument, "reserved"),
        (
            lambda: store.labels.set(SHARED, "s", "x", options=WriteOptions(expected_version=3)),
            skillfs.errors.Conflict,
            "changed since you read it",
        ),
        (lambda: store.edits.rename(SHARED, "s", "t"), FailedPrecondition, "remove them"),
        (lambda: store.labels.set(SHARED, "_drafts/s", "x"), InvalidArgument, "not a skill"),
    ]
    for call, error, text in cases:
        with pytest.raises(error, match=text):
            call()
    m = store.manifest(SHARED, "s")
    assert m.version == 4 and list(m.labels) == ["stable"] and m.labels["stable"].version == 1


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_retention_and_gc_keep_labelled_versions(engine: str, tmp_path: Path) -> None:
    """A labelled version stays in history and its blobs stay through GC, whatever the
    policy, counted in the scope's quota; once the label is gone, all go (a grpc:// store's
    policy and quotas are its server's)."""
    now = [1_000_000.0]
    url = f"memory://{uuid.uuid4().hex}" if engine == "memory" else f"sqlite:///{tmp_path}/s.db"
    keep_two = HistoryPolicy(keep_versions=2, keep_days=1)
    store = skillfs.open_store(url, clock=lambda: now[0], history_policy=keep_two, gc_grace=0)
    store.publish(SHARED, "s", {**files("s", "v1"), "big.bin": bytes(range(256)) * 80})
    store.labels.set(SHARED, "s", "stable", 1)
    for n in range(2, 8):
        now[0] += 86400 * 2
        store.publish(SHARED, "s", files("s", f"v{n}"))
    store.gc()

    def used() -> int:  # the scope's quota counter, as GC re-counts it
        counted = store.engine.quota_used(SHARED.domain)
        assert counted is not None
        return counted[f"scope:{SHARED}"]

    labelled = used()
    kept = [v.version for v in store.versions(SHARED, "s")]
    assert 1 in kept and 2 not in kept and len(kept) == 4  # 8 (live), 7, 6 and labelled 1
    assert store.read(SHARED, "s", "references/r.md", version=1) == b"ref v1\n"
    with skillfs.Skills(store, AGENT, "bob", pins="stable") as worker:
        assert seen(worker)["s"] == ("v1", 1, "stable")
    with pytest.raises(NotFound, match="no longer kept"):
        store.labels.set(SHARED, "s", "beta", 3)
    store.labels.remove(SHARED, "s", "stable")
    for n in range(8, 11):  # until the versions that carried the label are dropped too
        now[0] += 86400 * 2
        store.publish(SHARED, "s", files("s", f"v{n}"))
    store.gc()
    assert 1 not in [v.version for v in store.versions(SHARED, "s")]
    assert labelled - used() > 20_480  # the labelled version's file counted while kept
    with pytest.raises(NotFound):
        store.read(SHARED, "s", "references/r.md", version=1)
    store.close()


def test_a_labelled_big_skill_keeps_its_table_in_chunks(store: skillfs.Store) -> None:
    """A labelled version of many files (docs/design.md §2, "File tables") is stored as a
    table of chunks in the manifest and read back whole."""
    big = {f"data/{i:04d}.txt": f"{i}\n".encode() for i in range(300)}
    store.publish(SHARED, "big", {**files("big", "one"), **big})
    store.labels.set(SHARED, "big", "stable")
    store.publish(SHARED, "big", files("big", "two"))
    held = store.manifest(SHARED, "big").labels["stable"]
    assert len(held.files) == 302 and held.table is None
    # memory and SQLite: the store's Tables over its engine chunks it (over grpc:// its
    # server's store does, which tests/store/test_file_tables.py checks of every table)
    inner = getattr(store.engine, "inner", None)
    if inner is not None:
        stored = inner.load_skills(SHARED, ["big"])["big"].labels["stable"]
        assert stored.files == {} and stored.table is not None and stored.table.count == 302
    with skillfs.Skills(store, AGENT, "bob", pins="stable") as worker:
        snap = worker.snapshot()
        assert snap.read_bytes("big", "data/0299.txt") == b"299\n"


# ----------------------------------------------------------------- grpc://


@pytest.mark.server
def test_grpc_server_vouches_for_labels_and_views_take_pins(tmp_path: Path) -> None:
    server = grpc_servers.in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        with skillfs.open_store(url, token=grpc_servers.ALICE) as alice:
            alice.publish(ALICE, "a", files("a", "one"))
            alice.publish(ALICE, "a", files("a", "two"))
            alice.labels.set(ALICE, "a", "stable", 1)
            m = alice.manifest(ALICE, "a")
            assert m.labels["stable"].actor == "alice"
            # a label forged to name files version 1 never held is refused, nothing written
            forged = m.labels["stable"].model_copy(update={"files": m.files, "version": 2})
            sent = m.model_copy(
                update={
                    "version": m.version + 1,
                    "commit_id": "forger",
                    "labels": {"stable": forged, "beta": m.labels["stable"]},
                }
            )
            with pytest.raises(NotFound, match="label 'stable' names version 2"):
                alice.engine.commit(ALICE.domain, [CommitOp(scope=ALICE, manifest=sent, expect=3)])
            assert alice.manifest(ALICE, "a").version == m.version
        meta = [("authorization", f"Bearer {grpc_servers.ALICE}")]
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            stub = pb_grpc.SkillReaderStub(ch)

            def view_of(*pins: str) -> list[tuple[str, int, str, str]]:
                view = pb.View(agent_id=AGENT, user_id="alice", pins=list(pins))
                snap = single(stub.Snapshot(pb.SnapshotRequest(view=view), metadata=meta))
                text = stub.LoadSkillThroughPath(
                    pb.LoadRequest(view=view, skill_id="a", path="references/r.md"), metadata=meta
                ).text
                return [(s.id, s.version, s.pinned, text.strip()) for s in snap.skills]

            assert view_of() == [("a", 3, "", "ref two")]
            assert view_of("stable") == [("a", 1, "stable", "ref one")]
            assert view_of("a=stable") == [("a", 1, "stable", "ref one")]
            assert view_of(f"{ALICE}=stable") == [("a", 1, "stable", "ref one")]
            with pytest.raises(grpc.RpcError) as err:
                view_of("bad label")
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        server.stop(0)


# ----------------------------------------------------------------- the CLI


@pytest.fixture(params=["sqlite", "grpc"])
def cli_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.stores import url_for

    return url_for(request, request.param, tmp_path)


def test_cli_label_set_ls_rm_and_prompt_pins(cli_url: str) -> None:
    with skillfs.open_store(cli_url) as store:
        for body in ("one", "two"):
            text = skill_md("s", body=body, description=f"the {body}")
            store.publish(SHARED, "s", {"SKILL.md": text})
    said = ok(cli_url, "label", "set", "s", "stable", "--version", "1", "-s", "shared:support-bot",
              "-m", "known good").stdout  # fmt: skip
    assert "stable now names version 1" in said and "now version 3" in said
    got = as_json(cli_url, "label", "ls", "s", "-s", "shared:support-bot")
    assert got["latest"] == 3 and [(x["label"], x["version"]) for x in got["labels"]] == [
        ("stable", 1)
    ]
    listed = as_json(cli_url, "ls", "-s", "shared:support-bot")
    assert [(r["skill"], r["labels"]) for r in listed] == [("s", {"stable": 1})]
    rows = as_json(cli_url, "history", "s", "-s", "shared:support-bot")
    assert [(r["version"], r["labelled"]) for r in rows] == [(3, []), (2, []), (1, ["stable"])]
    audit = as_json(cli_url, "audit", "--agent", AGENT)
    assert (audit[0]["action"], audit[0]["message"]) == ("label", "known good")
    pinned = as_json(cli_url, "prompt", "-a", AGENT, "-u", "bob", "--pin", "stable")
    assert [(s["description"], s["version"], s["pinned"]) for s in pinned["skills"]] == [
        ("the one", 1, "stable")
    ]
    free = as_json(cli_url, "prompt", "-a", AGENT, "-u", "bob")
    assert [(s["description"], s["pinned"]) for s in free["skills"]] == [("the two", None)]
    assert "pinned s at stable" in ok(cli_url, "prompt", "-a", AGENT, "--pin", "s=stable").stderr
    line = error_line(run(cli_url, "label", "set", "s", "latest", "-s", "shared:support-bot"))
    assert "'latest' is reserved" in line
    line = error_line(run(cli_url, "label", "rm", "s", "beta", "-s", "shared:support-bot"))
    assert "no label 'beta'" in line
    assert "--pin" in error_line(run(cli_url, "prompt", "-a", AGENT, "--pin", "=x"), code=2)
    ok(cli_url, "label", "rm", "s", "stable", "-s", "shared:support-bot")
    assert as_json(cli_url, "label", "ls", "s", "-s", "shared:support-bot")["labels"] == []


# ----------------------------------------------------------------- MCP


def test_mcp_views_take_pins() -> None:
    """An MCP session's view takes pins: from the query string (`pin`, repeatable) or the
    X-Skillfs-Pin header over HTTP, fixed for stdio (`skillfs mcp --pin`)."""
    import anyio
    from mcp import Client

    from skillfs.auth import Tokens
    from skillfs.mcp import ViewKey, Views, build_server
    from skillfs.mcp.http import view_for
    from tests.mcp_helpers import sdk_list_skills, tokens_text

    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "s", {"SKILL.md": skill_md("s", description="The first.")})
    store.labels.set(SHARED, "s", "stable")
    store.publish(SHARED, "s", {"SKILL.md": skill_md("s", description="The second.")})

    async def described(pins: Pins) -> list[str]:
        key = ViewKey(AGENT, "alice", (), "", pins)
        async with Client(build_server(Views(store, lambda ctx: key))) as c:
            page = await sdk_list_skills(c.session)
            return [s["frontmatter"]["description"] for s in page["skills"]]

    async def main() -> None:
        assert await described(Pins()) == ["The second."]
        assert await described(Pins.parse(["stable"])) == ["The first."]
        assert await described(Pins.parse(["s=latest", "stable"])) == ["The second."]

    anyio.run(main)
    alice = Tokens(text=tokens_text()).authenticate(f"Bearer {grpc_servers.ALICE}")
    assert view_for(alice, {}, "pin=stable&pin=s%3Dlatest").pins == Pins(
        layers={"*": "stable"}, skills={"s": "latest"}
    )
    assert view_for(alice, {"x-skillfs-pin": "market:team=stable"}, "").pins == Pins(
        layers={"market:team": "stable"}
    )
    assert view_for(alice, {}, "").pins == Pins()
    with pytest.raises(InvalidArgument, match="invalid label"):
        view_for(alice, {}, "pin=not%20a%20label")
