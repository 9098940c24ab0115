"""Agent-written skills (docs/governance.md): `Skills(..., skill_writes=)` adds `propose_skill`
and `skill_manage` to the snapshot's tools; each call is one commit to the user's scope by
`agent:<agentId>/<userId>`, seen at the next step when live; bad input is error text and
writes nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import skillfs
from skillfs import Scope, Skills, Store
from skillfs.errors import InvalidArgument, InvalidPath
from skillfs.model.names import draft_entry
from skillfs.store.limits import Limits
from tests.runtime_helpers import md
from tests.stores import url_for

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
DOMAIN = "agents/bot"


@pytest.fixture(params=["memory", "sqlite", "redis", "grpc"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    yield s
    s.close()


def actor_of(store: Store) -> str:
    """A skillfs server records its token's name; elsewhere the agent's own actor."""
    return "admin" if store.url.startswith("grpc") else "agent:bot/alice"


def text(name: str, description: str = "Writes release notes.", body: str = "") -> str:
    return md(name, description, body).decode()


def counter(store: Store) -> int:
    rev = store.domain_revisions([DOMAIN])[DOMAIN]
    return rev.counter if rev is not None else 0


def ok(result: str) -> dict[str, Any]:
    assert not result.startswith("Error"), result
    out: dict[str, Any] = json.loads(result)
    return out


def test_off_by_default_and_the_mode_is_checked() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "notes", {"SKILL.md": md("notes")})
    snap = Skills(store, "bot", "alice").snapshot()
    assert [t["function"]["name"] for t in snap.tools()] == [
        "load_skill_through_path", "read_skill", "search_skills"
    ]  # fmt: skip
    refused = snap.call_tool("propose_skill", {"name": "x", "files": {"SKILL.md": "x"}})
    assert refused.startswith("Error: unknown tool 'propose_skill'")
    with pytest.raises(
        InvalidArgument, match=r"skill_writes='yes': give 'draft' .* or 'live' .*leave it off"
    ):
        Skills(store, "bot", "alice", skill_writes="yes")  # type: ignore[arg-type]


def test_tools_in_both_styles_even_in_an_empty_view_and_stable(store: Store) -> None:
    skills = Skills(store, "bot", "alice", skill_writes="live")
    snap = skills.snapshot()
    assert not snap.skills
    names = [t["function"]["name"] for t in snap.tools()]
    assert names == ["propose_skill", "skill_manage"]
    anthropic = snap.tools(style="anthropic")
    assert [t["name"] for t in anthropic] == names
    manage = anthropic[1]["input_schema"]
    assert manage["properties"]["action"]["enum"] == [
        "create", "edit", "write_file", "delete_file", "delete"
    ]  # fmt: skip
    assert manage["required"] == ["action", "name"]
    assert "live" in anthropic[0]["description"]
    ok(snap.call_tool("propose_skill", {"name": "notes", "files": {"SKILL.md": text("notes")}}))
    later = skills.snapshot()
    assert [t["function"]["name"] for t in later.tools()][-2:] == names
    assert later.tools()[-2:] == snap.tools()  # byte-identical: prompt caches stay warm
    later.tools()[0]["function"]["name"] = "changed"  # a copy: the cache is not touched
    assert later.tools()[0]["function"]["name"] == "load_skill_through_path"


def test_live_propose_is_one_commit_by_the_agent_seen_at_the_next_step(store: Store) -> None:
    skills = Skills(store, "bot", "alice", skill_writes="live")
    snap = skills.snapshot()
    before = counter(store)
    files = {
        "SKILL.md": text("release-notes", body="Read references/style.md first.").replace(
            "description:", "metadata: 3\ndescription:"
        ),
        "references/style.md": "Short lines.\n",
    }
    args = {"name": "release-notes", "files": files, "message": "for the changelog"}
    result = ok(snap.call_tool("propose_skill", json.dumps(args)))
    assert result["skill"] == "release-notes" and result["version"] == 1
    assert result["status"] == "live" and result["scope"] == str(ALICE)
    assert [f["rule"] for f in result["findings"]] == ["type"]  # metadata: 3 is a warning
    assert counter(store) == before + 1
    assert not snap.skills  # the step's own snapshot does not change (C4)
    nxt = skills.snapshot()
    assert [s.id for s in nxt.skills] == ["release-notes"]  # C3
    assert nxt.read_bytes("release-notes", "references/style.md") == b"Short lines.\n"
    m = store.manifest(ALICE, "release-notes")
    assert (m.actor, m.message) == (actor_of(store), "for the changelog")
    # a replacement is the whole file set: the reference is gone
    ok(nxt.call_tool("propose_skill", {"name": "release-notes",
                                       "files": {"SKILL.md": text("release-notes")}}))  # fmt: skip
    assert list(store.manifest(ALICE, "release-notes").files) == ["SKILL.md"]


def test_skill_manage_actions_each_one_commit(store: Store) -> None:
    skills = Skills(store, "bot", "alice", skill_writes="live")

    def call(**args: Any) -> dict[str, Any]:
        before = counter(store)
        out = ok(skills.snapshot().call_tool("skill_manage", args))
        assert counter(store) == before + 1
        return out

    assert call(action="create", name="notes", content=text("notes"))["version"] == 1
    call(action="write_file", name="notes", path="refs/a.md", content="a\n")
    call(action="edit", name="notes", path="refs/a.md", content="b\n")
    assert call(action="edit", name="notes", content=text("notes", "Takes notes."))["version"] == 4
    snap = skills.snapshot()
    assert snap.skill("notes").description == "Takes notes."
    assert snap.read_bytes("notes", "refs/a.md") == b"b\n"
    call(action="delete_file", name="notes", path="refs/a.md")
    assert list(skills.snapshot().skill("notes").files) == ["SKILL.md"]
    assert call(action="delete", name="notes")["status"] == "deleted"
    assert not skills.snapshot().skills
    actions = [e.action for e in store.governance.audit(ALICE, skill="notes")]
    assert actions == ["delete"] + ["publish"] * 5
    assert {e.actor for e in store.governance.audit(ALICE)} == {actor_of(store)}


def test_the_agents_skill_is_checked_under_the_stores_profiles() -> None:
    """A field a profile the store accepts gives a meaning to is no error for the agent's
    write either (the commit's own check decides the same); on a spec-only store it is."""
    content = text("notes").replace("description:", "disable-model-invocation: true\ndescription:")
    args = {"action": "create", "name": "notes", "content": content}

    def write(store: Store) -> str:
        snap = Skills(store, "bot", "alice", skill_writes="live").snapshot()
        return snap.call_tool("skill_manage", args)

    claude = skillfs.open_store("memory://", profiles=["claude-code"])
    assert ok(write(claude))["version"] == 1
    assert claude.manifests(ALICE)["notes"].frontmatter["disable-model-invocation"] == "true"
    spec = skillfs.open_store("memory://")
    assert "'disable-model-invocation' is not an Agent Skills field" in write(spec)
    assert "notes" not in spec.manifests(ALICE)


def test_editing_a_shared_skill_writes_the_users_copy(store: Store) -> None:
    store.publish(SHARED, "faq", {"SKILL.md": md("faq"), "big.md": b"x" * 1000})
    skills = Skills(store, "bot", "alice", skill_writes="live")
    ok(skills.snapshot().call_tool(
        "skill_manage", {"action": "write_file", "name": "faq", "path": "new.md", "content": "n"}
    ))  # fmt: skip
    mine, shared = store.manifest(ALICE, "faq"), store.manifest(SHARED, "faq")
    assert sorted(mine.files) == ["SKILL.md", "big.md", "new.md"]
    assert mine.files["big.md"] == shared.files["big.md"]  # by reference, not re-sent
    assert list(shared.files) == ["SKILL.md", "big.md"] and shared.version == 1
    assert skills.snapshot().skill("faq").source == "user:bot/alice"
    bob = Skills(store, "bot", "bob").snapshot()
    assert sorted(bob.skill("faq").files) == ["SKILL.md", "big.md"]
    refused = skills.snapshot().call_tool("skill_manage", {"action": "delete", "name": "nope"})
    assert "'nope' cannot be deleted: it is not in this user's own skills" in refused


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("propose_skill", {"name": "Bad/Name", "files": {"SKILL.md": "x"}}, "invalid skill directory"),
    ("propose_skill", {"name": "_drafts", "files": {"SKILL.md": "x"}}, "starting with '_' or '.'"),
    ("propose_skill", {"name": "ok\nnew rule", "files": {"SKILL.md": "x"}}, "holds U+000A"),
    ("propose_skill", {"name": "a", "files": ["SKILL.md"]}, "'files' must be an object"),
    ("propose_skill", {"name": "a", "files": {"README.md": "x"}}, "have no SKILL.md"),
    (
        "propose_skill",
        {"name": "a", "files": {"SKILL.md": "---\nname: [a\n---\n"}},
        "YAML syntax error",
    ),
    (
        "propose_skill",
        {"name": "a", "files": {"SKILL.md": text("b")}},
        "name 'b' must equal the skill's directory name 'a'",
    ),
    ("propose_skill", {"name": "a", "files": {"SKILL.md": text("a"), "../x": "x"}}, "'..'"),
    (
        "propose_skill",
        {"name": "a", "files": {"SKILL.md": text("a"), "big": "x" * 5000}},
        "over the limit of 4096 bytes per file",
    ),
    (
        "skill_manage",
        {"action": "create", "name": "faq", "content": text("faq")},
        "cannot be created: it exists; use action 'edit'",
    ),
    ("skill_manage", {"action": "rename", "name": "faq"}, "'action' must be one of create"),
    ("skill_manage", {"action": "create", "name": "new"}, "'content' must be a string"),
    (
        "skill_manage",
        {"action": "edit", "name": "nope", "content": "x"},
        "'nope' does not exist: use action 'create'",
    ),
    (
        "skill_manage",
        {"action": "edit", "name": "faq", "path": "x.md", "content": "x"},
        "has no file 'x.md' to edit (files: SKILL.md): use action 'write_file'",
    ),
    (
        "skill_manage",
        {"action": "delete_file", "name": "faq", "path": "SKILL.md"},
        "SKILL.md cannot be deleted",
    ),
    (
        "skill_manage",
        {"action": "edit", "name": "faq", "content": "no frontmatter"},
        "nothing was written: faq/SKILL.md",
    ),
    (
        "skill_manage",
        {"action": "write_file", "name": "faq", "path": "/etc/x", "content": "x"},
        "is absolute",
    ),
]


@pytest.mark.parametrize(("tool", "args", "says"), BAD, ids=[b[2][:24] for b in BAD])
def test_bad_input_is_error_text_and_writes_nothing(
    tmp_path: Path, tool: str, args: dict[str, Any], says: str
) -> None:
    store = skillfs.open_store(f"sqlite:///{tmp_path / 's.db'}", limits=Limits(max_file_size=4096))
    store.publish(ALICE, "faq", {"SKILL.md": md("faq")})
    skills = Skills(store, "bot", "alice", skill_writes="live")
    snap = skills.snapshot()
    before = counter(store)
    result = snap.call_tool(tool, args)
    assert result.startswith(f"Error: {tool}: ") and says in result, result
    assert counter(store) == before
    assert skills.snapshot() is snap  # nothing moved


def test_bad_json_and_a_disabled_skill(tmp_path: Path) -> None:
    store = skillfs.open_store(f"sqlite:///{tmp_path / 's.db'}")
    store.publish(ALICE, "faq", {"SKILL.md": md("faq")})
    store.governance.disable(ALICE, "faq", reason="leaks secrets")
    snap = Skills(store, "bot", "alice", skill_writes="live").snapshot()
    assert "invalid arguments" in snap.call_tool("skill_manage", "{not json")
    refused = snap.call_tool(
        "skill_manage", {"action": "write_file", "name": "faq", "path": "a", "content": "a"}
    )
    assert "disabled for this user by an operator (leaks secrets)" in refused
    assert store.manifest(ALICE, "faq").version == 2  # the disable only
    # switched off for everyone in the shared scope: the agent cannot write it back for its
    # user under that name (outside testing: create made the killed skill live again)
    store.publish(SHARED, "leaky", {"SKILL.md": md("leaky")})
    store.governance.disable(SHARED, "leaky", reason="leaks the API key")
    snap = Skills(store, "bot", "alice", skill_writes="live").snapshot()
    again = snap.call_tool(
        "skill_manage", {"action": "create", "name": "leaky", "content": text("leaky")}
    )
    assert "'leaky' is disabled in shared:bot by an operator (leaks the API key)" in again
    assert "leaky" not in store.skills(ALICE)
    drafts = Skills(store, "bot", "alice", skill_writes="draft").snapshot()
    proposed = drafts.call_tool(
        "propose_skill", {"name": "leaky", "files": {"SKILL.md": text("leaky")}}
    )
    assert not proposed.startswith("Error"), proposed  # a draft: an operator reviews it


def test_a_step_that_began_before_a_disable_cannot_copy_the_skill_back(store: Store) -> None:
    """Outside (governance) testing: a step's view still held the shared skill when an
    operator disabled it; the agent's write_file in that step made the user's copy of it,
    and the killed skill's files were served to the user again. The copy names its origin,
    which the store reads with the commit."""
    store.publish(SHARED, "leaky", {"SKILL.md": md("leaky"), "run.sh": b"print key"})
    store.publish(SHARED, "gone", {"SKILL.md": md("gone")})
    skills = Skills(store, "bot", "alice", skill_writes="live")
    step = skills.snapshot()
    store.governance.disable(SHARED, "leaky", reason="leaks the API key")
    store.delete(SHARED, "gone")
    write = {"action": "write_file", "path": "notes.md", "content": "n"}
    refused = step.call_tool("skill_manage", {**write, "name": "leaky"})
    assert "'leaky' is disabled in shared:bot by an operator (leaks the API key)" in refused
    refused = step.call_tool("skill_manage", {**write, "name": "gone"})
    assert "'gone' was deleted from shared:bot since it was read" in refused
    assert store.skills(ALICE) == [] and skills.snapshot().skills == ()


def test_a_concurrent_writer_is_a_conflict_not_an_overwrite(tmp_path: Path) -> None:
    """The edit is based on the version it read: a write landing between that read and the
    commit makes the tool answer with a conflict, and the other writer's version stays."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = skillfs.open_store(url)
    store.publish(ALICE, "faq", {"SKILL.md": md("faq")})
    other = skillfs.open_store(url)
    skills = Skills(store, "bot", "alice", skill_writes="live")
    snap = skills.snapshot()
    real = store.engine.load_skills

    def load_then_race(scope: Scope, names: list[str]) -> Any:
        got = real(scope, names)
        if scope == ALICE and store.engine.load_skills is load_then_race:
            store.engine.load_skills = real  # type: ignore[method-assign]  # once
            other.publish(ALICE, "faq", {"SKILL.md": md("faq", "Theirs.")}, actor="bob")
        return got

    store.engine.load_skills = load_then_race  # type: ignore[method-assign]
    result = snap.call_tool(
        "skill_manage", {"action": "write_file", "name": "faq", "path": "a", "content": "a"}
    )
    assert "changed since you read it" in result and result.startswith("Error: skill_manage")
    m = store.manifest(ALICE, "faq")
    assert (m.version, m.actor, list(m.files)) == (2, "bob", ["SKILL.md"])


def test_a_store_that_is_down_is_error_text(tmp_path: Path) -> None:
    from support.grpc_servers import ADMIN, in_process

    server = in_process(f"memory://{uuid.uuid4().hex}", tmp_path)
    url = f"grpc://127.0.0.1:{server.grpc_port}"
    store = skillfs.open_store(url, token=ADMIN, retry_for=0.5)
    snap = Skills(store, "bot", "alice", skill_writes="live").snapshot()
    server.stop(0)
    result = snap.call_tool("propose_skill", {"name": "a", "files": {"SKILL.md": text("a")}})
    assert result.startswith("Error: propose_skill: the skill store is unavailable")
    assert "nothing was written; try again later" in result
    store.close()


def test_files_of_a_disk_layer_are_copied_by_content(tmp_path: Path) -> None:
    (tmp_path / "skills" / "local").mkdir(parents=True)
    (tmp_path / "skills" / "local" / "SKILL.md").write_bytes(md("local"))
    (tmp_path / "skills" / "local" / "run.sh").write_bytes(b"#!/bin/sh\n")
    (tmp_path / "skills" / "local" / "run.sh").chmod(0o755)
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    layer = skillfs.LocalDir(tmp_path / "skills")
    skills = Skills(store, "bot", "alice", [layer], skill_writes="live")
    ok(skills.snapshot().call_tool(
        "skill_manage", {"action": "write_file", "name": "local", "path": "b.md", "content": "b"}
    ))  # fmt: skip
    m = store.manifest(ALICE, "local")
    assert sorted(m.files) == ["SKILL.md", "b.md", "run.sh"] and m.files["run.sh"].mode == 0o755
    assert store.read_entry(m.files["run.sh"]) == b"#!/bin/sh\n"


# ------------------------------------------------------------------ draft mode


def test_draft_propose_is_a_pending_draft_in_no_view(store: Store) -> None:
    store.publish(SHARED, "faq", {"SKILL.md": md("faq", "The old answers.")})
    skills = Skills(store, "bot", "alice", skill_writes="draft")
    snap = skills.snapshot()
    assert "draft for an operator to review" in snap.tools()[-2]["function"]["description"]
    before = counter(store)
    files = {"SKILL.md": text("faq", "The new answers.")}
    result = ok(snap.call_tool("propose_skill", {"name": "faq", "files": files, "message": "why"}))
    assert result["status"] == "draft" and result["draft"] == "_drafts/faq"
    assert result["version"] == 1 and "not among your skills" in result["note"]
    assert counter(store) == before + 1
    for user in ("alice", "bob"):  # a draft is in no view
        assert Skills(store, "bot", user).snapshot().skill("faq").description == "The old answers."
    [draft] = store.drafts.list(ALICE)
    assert (draft.name, draft.version, draft.message) == ("faq", 1, "why")
    assert draft.actor == actor_of(store) and draft.base_version == 0
    # the next write is the draft's next version, from the draft's files
    again = skills.snapshot().call_tool(
        "skill_manage", {"action": "write_file", "name": "faq", "path": "a.md", "content": "a"}
    )
    assert ok(again)["version"] == 2
    draft_files = store.manifest(ALICE, "_drafts/faq").files
    assert sorted(draft_files) == ["SKILL.md", "a.md"]
    assert store.read_entry(draft_files["SKILL.md"]) == files["SKILL.md"].encode()
    store.drafts.approve(ALICE, "faq", options=skillfs.WriteOptions(actor="operator"))
    nxt = skills.snapshot()
    assert nxt.skill("faq").description == "The new answers."  # alice's own copy, live
    assert Skills(store, "bot", "bob").snapshot().skill("faq").description == "The old answers."
    assert store.drafts.list(ALICE) == []


def test_draft_manage_create_edit_and_withdraw(store: Store) -> None:
    skills = Skills(store, "bot", "alice", skill_writes="draft")

    def call(**args: Any) -> str:
        return skills.snapshot().call_tool("skill_manage", args)

    assert ok(call(action="create", name="notes", content=text("notes")))["status"] == "draft"
    assert "a draft of it is pending review" in call(
        action="create", name="notes", content=text("notes")
    )
    assert ok(call(action="edit", name="notes", content=text("notes", "Better.")))["version"] == 2
    assert not skills.snapshot().skills
    withdrawn = ok(call(action="delete", name="notes", message="not needed after all"))
    assert withdrawn["status"] == "withdrawn"
    assert store.drafts.list(ALICE) == []
    assert store.governance.audit(ALICE, skill="_drafts/notes")[0].action == "reject"
    refused = call(action="delete", name="notes")
    assert "no pending draft to withdraw; deleting a live skill is an operator's" in refused
    store.publish(ALICE, "mine", {"SKILL.md": md("mine")})
    before = counter(store)
    assert "an operator's decision" in call(action="delete", name="mine")
    assert counter(store) == before and store.manifest(ALICE, "mine").version == 1


def test_a_draft_edited_after_the_live_skill_moved_stays_stale(store: Store) -> None:
    """The agent's next edit starts from its pending draft, so it stays proposed on the
    version that draft was built on: approving it cannot undo a live edit made since
    (outside testing: each draft write took the live version as its base)."""
    from skillfs.errors import Conflict

    store.publish(ALICE, "faq", {"SKILL.md": md("faq", "Answers questions.")})
    skills = Skills(store, "bot", "alice", skill_writes="draft")

    def call(**args: Any) -> str:
        return skills.snapshot().call_tool("skill_manage", args)

    ok(call(action="edit", name="faq", content=text("faq", "Agent rewrite.")))
    store.publish(ALICE, "faq", {"SKILL.md": md("faq", "Hotfix.")}, expected_version=1)
    ok(call(action="write_file", name="faq", path="notes.md", content="more"))
    [draft] = store.drafts.list(ALICE)
    assert (draft.base_version, draft.stale) == (1, True)
    with pytest.raises(Conflict, match="moved since its draft was proposed"):
        store.drafts.approve(ALICE, "faq")
    assert b"Hotfix." in store.read(ALICE, "faq", "SKILL.md")


def test_draft_edit_of_a_disabled_skill_is_a_proposal(store: Store) -> None:
    """A kill switch stops live writes; a draft only proposes, for an operator to decide."""
    store.publish(ALICE, "faq", {"SKILL.md": md("faq")})
    store.governance.disable(ALICE, "faq", reason="wrong")
    skills = Skills(store, "bot", "alice", skill_writes="draft")
    fixed = {"action": "edit", "name": "faq", "content": text("faq", "Fixed.")}
    assert ok(skills.snapshot().call_tool("skill_manage", fixed))["status"] == "draft"
    live = Skills(store, "bot", "alice", skill_writes="live").snapshot()
    assert "disabled for this user by an operator (wrong)" in live.call_tool("skill_manage", fixed)


def test_over_grpc_a_propose_token_writes_drafts_and_nothing_live(tmp_path: Path) -> None:
    """The token decides: a `propose` grant on the user's scope writes drafts (recorded by the
    token's name), and a live write is refused with text naming the grant it lacks."""
    from skillfs.auth import tokens_document
    from skillfs.server.app import ServerConfig, SkillfsServer
    from support.grpc_servers import ADMIN

    proposer = "test-proposer-token-0123456789abcdef"
    tokens = tmp_path / "tokens.json"
    grants = ["agent:bot/user:alice:propose", "agent:bot/shared:read"]
    tokens.write_text(
        tokens_document([("admin", ADMIN, ["*:admin"]), ("agent:bot/alice", proposer, grants)],
                        receipt_key="test-receipt-key")
    )  # fmt: skip
    config = ServerConfig(
        store=f"memory://{uuid.uuid4().hex}", grpc="127.0.0.1:0", http="127.0.0.1:0", tokens=tokens
    )
    server = SkillfsServer(config).start()
    try:
        url = f"grpc://127.0.0.1:{server.grpc_port}"
        admin = skillfs.open_store(url, token=ADMIN)
        admin.publish(SHARED, "faq", {"SKILL.md": md("faq", "Old."), "big.md": b"x" * 5000})
        agent = skillfs.open_store(url, token=proposer)
        drafts = Skills(agent, "bot", "alice", skill_writes="draft")
        new = {"SKILL.md": text("faq", "New.")}
        assert (
            ok(drafts.snapshot().call_tool("propose_skill", {"name": "faq", "files": new}))[
                "version"
            ]
            == 1
        )
        add = {"action": "write_file", "name": "faq", "path": "a.md", "content": "a"}
        assert ok(drafts.snapshot().call_tool("skill_manage", add))["version"] == 2
        [draft] = admin.drafts.list(ALICE)
        assert (draft.name, draft.version, draft.actor) == ("faq", 2, "agent:bot/alice")
        before = counter(admin)
        live = Skills(agent, "bot", "alice", skill_writes="live")
        refused = live.snapshot().call_tool("propose_skill", {"name": "faq", "files": new})
        assert refused.startswith("Error: propose_skill: token 'agent:bot/alice' may not write")
        assert refused.endswith(
            "nothing was written. This agent may only propose drafts for review here (its "
            "token's grant on the user's scope is propose; skill_writes='live' needs write)"
        )
        edit = {"action": "write_file", "name": "faq", "path": "b.md", "content": "b"}
        assert live.snapshot().call_tool("skill_manage", edit).startswith("Error: skill_manage")
        assert counter(admin) == before and "faq" not in admin.manifests(ALICE)
        withdrawn = drafts.snapshot().call_tool("skill_manage", {"action": "delete", "name": "faq"})
        assert ok(withdrawn)["status"] == "withdrawn" and admin.drafts.list(ALICE) == []
        agent.close()
        admin.close()
    finally:
        server.stop(0)


def test_mcp_stdio_views_offer_the_write_tools_when_asked() -> None:
    """`skillfs mcp --skill-writes draft`: the host's model gets the write tools through
    tools/list and tools/call; a bad call is an MCP tool error, not a protocol error."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from skillfs.mcp import ViewKey, Views, build_server

    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    views = Views(store, lambda ctx: ViewKey("bot", "alice"), skill_writes="draft")

    async def main() -> None:
        async with Client(build_server(views)) as c:
            tools = [t.name for t in (await c.list_tools()).tools]
            assert tools == ["propose_skill", "skill_manage"]  # an empty view
            files = {"SKILL.md": text("notes")}
            done = await c.call_tool("propose_skill", {"name": "notes", "files": files})
            assert not done.is_error and '"status": "draft"' in done.content[0].text  # type: ignore[union-attr]
            bad = await c.call_tool(
                "skill_manage", {"action": "edit", "name": "zz", "content": "x"}
            )
            assert bad.is_error and "'zz' does not exist" in bad.content[0].text  # type: ignore[union-attr]

    anyio.run(main)
    assert [d.name for d in store.drafts.list(ALICE)] == ["notes"]
    with pytest.raises(InvalidArgument, match="skill_writes='on'"):
        Views(store, lambda ctx: ViewKey("bot", "alice"), skill_writes="on")  # type: ignore[arg-type]


def test_a_skill_hidden_from_the_user_is_edited_from_what_the_step_sees(store: Store) -> None:
    """A user's hiding entry (disabled, no files) is no base: a draft starts from the shared
    skill the step sees, never from an empty file table."""
    store.publish(SHARED, "faq", {"SKILL.md": md("faq"), "a.md": b"a"})
    store.governance.disable(ALICE, "faq", reason="not for alice")
    store.publish(Scope.user("bot", "bob"), "x", {"SKILL.md": md("x")})
    bob = Skills(store, "bot", "bob", skill_writes="draft").snapshot()
    edit = {"action": "write_file", "name": "faq", "path": "b.md", "content": "b"}
    assert ok(bob.call_tool("skill_manage", edit))["status"] == "draft"
    drafted = store.manifest(Scope.user("bot", "bob"), draft_entry("faq"))
    assert set(drafted.files) == {"SKILL.md", "a.md", "b.md"}  # the shared skill, plus b.md
    alice = Skills(store, "bot", "alice", skill_writes="draft").snapshot()
    refused = alice.call_tool("skill_manage", edit)  # alice's step does not see faq
    assert "'faq' does not exist: use action 'create'" in refused


@pytest.mark.parametrize("mode", ["draft", "live"])
def test_malformed_calls_never_raise_into_the_loop(mode: str) -> None:
    """Seeded random arguments of every shape: each call answers text (an error or a
    result), never an exception that would end the agent's loop."""
    import random

    shapes: list[Any] = [None, 1, 1.5, True, "", "x", "faq", "SKILL.md", "../a", "/a", "a\0b",
                         "_drafts", "a" * 300, [], {}, {"SKILL.md": "x"}, {"SKILL.md": 1},
                         {"SKILL.md": text("faq")}, text("faq")]  # fmt: skip
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "faq", {"SKILL.md": md("faq")})
    snap = Skills(store, "bot", "alice", skill_writes=mode).snapshot()  # type: ignore[arg-type]
    rng = random.Random(13)
    answered = 0
    for _ in range(500):
        args = {k: rng.choice(shapes) for k in ("name", "files", "action", "path", "content",
                                                 "message") if rng.random() < 0.7}  # fmt: skip
        if rng.random() < 0.5:
            args["action"] = rng.choice(["create", "edit", "write_file", "delete_file", "delete"])
        result = snap.call_tool(rng.choice(["propose_skill", "skill_manage"]), args)
        answered += isinstance(result, str) and bool(result)
    assert answered == 500


def test_two_paths_naming_one_file_are_refused_as_the_store_refuses_them() -> None:
    """Issue 28: `propose_skill` kept one of `SKILL.md` and `./SKILL.md` silently, where
    `Store.publish` refused the same files; the rule has one owner now, the store's."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    snap = Skills(store, "bot", "alice", skill_writes="live").snapshot()
    files = {"SKILL.md": text("twin"), "./SKILL.md": text("twin", body="other")}
    refused = snap.call_tool("propose_skill", {"name": "twin", "files": files})
    assert refused.startswith("Error: propose_skill:"), refused
    assert "'./SKILL.md' names the same file as another path" in refused
    assert store.manifests(ALICE, ["twin"]) == {}
    with pytest.raises(InvalidPath, match="names the same file"):
        store.publish(ALICE, "twin", {p: v.encode() for p, v in files.items()})
