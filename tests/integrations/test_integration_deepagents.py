"""`SkillfsBackend` under a real deep agent (deepagents' own graph, tools and middleware) driven
by langchain's fake chat model, no network: the agent reads a skill, an operator publishes an
edit, and the same thread's next step reads the edit; writes become commits to the user's
scope; the backend answers ls, read with offset/limit, glob and grep."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

pytest.importorskip("deepagents")

from deepagents import create_deep_agent
from deepagents.backends import CompositeBackend, StateBackend
from deepagents.backends.protocol import INVALID_PATH, PERMISSION_DENIED
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

import skillfs
from skillfs.integrations.deepagents import SkillfsBackend, fresh_skills
from tests.langchain_helpers import ScriptedChat
from tests.runtime_helpers import md

SHARED = skillfs.Scope.shared("bot")
ALICE = skillfs.Scope.user("bot", "alice")


def read_call(path: str, call_id: str) -> AIMessage:
    args = {"file_path": path, "offset": 0, "limit": 50}
    return AIMessage(content="", tool_calls=[{"name": "read_file", "args": args, "id": call_id}])


def tool_texts(result: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)]


def test_same_thread_reads_an_edit_published_between_steps() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step one.")})
    skills = skillfs.Skills(store, "bot", "alice")
    model = ScriptedChat(
        messages=iter(
            [
                read_call("/skills/refunds/SKILL.md", "c1"),
                AIMessage(content="read it"),
                read_call("/skills/refunds/SKILL.md", "c2"),
                AIMessage(content="read it again"),
            ]
        )
    )
    backend = CompositeBackend(default=StateBackend(), routes={"/skills/": SkillfsBackend(skills)})
    agent = create_deep_agent(
        model=model, backend=backend, skills=["/skills/"], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t1"}}
    first = agent.invoke({"messages": [HumanMessage("refund order 7")]}, config)
    assert "Step one." in tool_texts(first)[-1]
    assert "Handle refunds." in str(model.sent[0][0].content)  # the skills list in the prompt

    store.publish(SHARED, "refunds", {"SKILL.md": md("refunds", "Handle refunds.", "Step two.")})
    store.publish(SHARED, "returns", {"SKILL.md": md("returns", "Handle returns.")})
    second = agent.invoke(fresh_skills({"messages": [HumanMessage("and order 8")]}), config)
    assert "Step two." in tool_texts(second)[-1]  # the same thread reads the edit
    assert "Handle returns." in str(model.sent[-1][0].content)  # and lists the new skill


def test_backend_operations_and_writes_as_commits() -> None:
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    body = "\n".join(f"line {i}" for i in range(10))
    store.publish(
        SHARED, "guide", {"SKILL.md": md("guide", body=body), "references/style.md": b"be kind\n"}
    )
    read_only = SkillfsBackend(skillfs.Skills(store, "bot", "alice"))
    assert "skill writes are off for this worker" in (read_only.write("/guide/x", "x").error or "")
    backend = SkillfsBackend(skillfs.Skills(store, "bot", "alice", skill_writes="live"))
    assert [e["path"] for e in backend.ls("/").entries or []] == ["/guide/"]
    listed = backend.ls("/guide").entries or []
    assert [(e["path"], e["is_dir"]) for e in listed] == [
        ("/guide/SKILL.md", False),
        ("/guide/references/", True),
    ]
    window = backend.read("/guide/SKILL.md", offset=7, limit=2)
    assert window.file_data and window.file_data["content"] == "line 1\nline 2\n"
    assert "unknown skill id 'nope'" in (backend.read("/nope/SKILL.md").error or "")
    assert [m["path"] for m in backend.glob("**/*.md").matches or []] == [
        "/guide/SKILL.md",
        "/guide/references/style.md",
    ]
    assert [m["path"] for m in backend.grep("kind").matches or []] == ["/guide/references/style.md"]

    assert backend.edit("/guide/references/style.md", "kind", "brief").error is None
    copied = store.manifest(ALICE, "guide")  # copy-on-write into alice's scope, one commit
    assert sorted(copied.files) == ["SKILL.md", "references/style.md"]
    assert copied.actor == "agent:bot/alice"  # an agent's own write (docs/governance.md)
    assert store.read(ALICE, "guide", "references/style.md") == b"be brief\n"
    assert store.read(SHARED, "guide", "references/style.md") == b"be kind\n"
    assert backend.write("/guide/notes.md", "mine").error is None
    assert store.manifest(ALICE, "guide").version == 2


def test_backend_writes_follow_every_rule_of_the_write_tools() -> None:
    """Outside testing: the backend's writes were plain publishes, on by default; they
    stored a SKILL.md without frontmatter (the skill left the user's view), a name with a
    space, and brought back a skill an operator disabled. They are the write tools' now."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(ALICE, "notes", {"SKILL.md": md("notes")})
    store.publish(SHARED, "guide", {"SKILL.md": md("guide"), "run.sh": b"print key"})
    store.governance.disable(SHARED, "guide", reason="leaks the API key")
    backend = SkillfsBackend(skillfs.Skills(store, "bot", "alice", skill_writes="live"))
    refused = {
        "/notes/SKILL.md": "breaks the Agent Skills spec",
        "/Bad Name/SKILL.md": "breaks the Agent Skills spec",
        "/new/notes.md": "write its SKILL.md first",
    }
    for path, why in refused.items():
        assert why in (backend.write(path, "garbage, no frontmatter").error or ""), path
    killed = backend.write("/guide/SKILL.md", md("guide").decode()).error or ""
    assert "'guide' is disabled in shared:bot by an operator (leaks the API key)" in killed
    assert store.manifest(ALICE, "notes").version == 1 and store.skills(ALICE) == ["notes"]
    assert backend.write("/fresh/SKILL.md", md("fresh").decode()).error is None
    assert store.manifest(ALICE, "fresh").actor == "agent:bot/alice"
    up = backend.upload_files([("/fresh/logo.png", bytes(range(256)))])
    assert up[0].error is None and store.read(ALICE, "fresh", "logo.png") == bytes(range(256))


def test_backend_reports_a_store_that_is_down_as_each_calls_error() -> None:
    """Outside testing: with the store down, read, ls and downloads raised StoreUnavailable,
    which ended the agent's whole run; writes already answered an error."""
    store = skillfs.open_store("redis://127.0.0.1:1/0", retry_for=0)
    backend = SkillfsBackend(skillfs.Skills(store, "bot", "alice", skill_writes="live"))
    for result in (
        backend.read("/guide/SKILL.md"),
        backend.ls("/"),
        backend.glob("**"),
        backend.grep("x"),
        backend.write("/guide/x.md", "x"),
        backend.download_files(["/guide/SKILL.md"])[0],
    ):
        assert "is unavailable" in (result.error or ""), result


def test_backend_writes_drafts_when_skills_write_drafts() -> None:
    """With `skill_writes="draft"` the backend's writes are the agent's draft of the skill
    (docs/governance.md): nothing live changes, a second write is the draft's next version."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "guide", {"SKILL.md": md("guide"), "style.md": b"be kind\n"})
    backend = SkillfsBackend(skillfs.Skills(store, "bot", "alice", skill_writes="draft"))
    assert backend.edit("/guide/style.md", "kind", "brief").error is None
    assert backend.write("/guide/notes.md", "mine").error is None
    draft = store.manifest(ALICE, "_drafts/guide")
    assert (draft.version, sorted(draft.files), draft.actor) == (
        2, ["SKILL.md", "notes.md", "style.md"], "agent:bot/alice"
    )  # fmt: skip
    assert store.read_entry(draft.files["style.md"]) == b"be brief\n"
    assert store.manifests(ALICE) == {"_drafts/guide": draft}  # nothing live in alice's scope
    assert backend.read("/guide/style.md").file_data["content"] == "be kind\n"  # type: ignore[index]
    assert "no such file" in (backend.edit("/guide/x.md", "a", "b").error or "")


def test_a_skill_users_invoke_is_not_in_the_agents_files() -> None:
    """deepagents' SkillsMiddleware lists what the backend shows to the model: a skill whose
    SKILL.md says `disable-model-invocation: true` is not there, and reads of it are refused."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "guide", {"SKILL.md": md("guide")})
    hidden = b"---\nname: deploy\ndescription: Deploys.\ndisable-model-invocation: true\n---\nGo\n"
    store.publish(SHARED, "deploy", {"SKILL.md": hidden, "ref.md": b"steps"})
    backend = SkillfsBackend(skillfs.Skills(store, "bot", "alice"))
    assert [e["path"] for e in backend.ls("/").entries or []] == ["/guide/"]
    assert [m["path"] for m in backend.glob("**/*.md").matches or []] == ["/guide/SKILL.md"]
    assert "disable-model-invocation" in (backend.read("/deploy/SKILL.md").error or "")
    assert backend.grep("steps").matches == []
    [down] = backend.download_files(["/deploy/ref.md"])
    assert down.error is not None and down.content is None


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def test_binary_files_reach_the_model_encoded_as_deepagents_own_backends_return_them() -> None:
    """Outside testing: reading a skill's image, PDF or other non-UTF-8 file answered an error,
    where deepagents' own backends return the bytes base64-encoded (its `read_file` tool then
    hands them to a multimodal model as a content block)."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    files = {"SKILL.md": md("guide"), "logo.png": PNG, "form.pdf": b"%PDF-1.4 plain", "x.bin": PNG}
    store.publish(SHARED, "guide", files)
    model = ScriptedChat(
        messages=iter(
            [read_call("/skills/guide/logo.png", "c1"), AIMessage(content="seen"), AIMessage("")]
        )
    )
    backend = CompositeBackend(
        default=StateBackend(),
        routes={"/skills/": SkillfsBackend(skillfs.Skills(store, "bot", "alice"))},
    )
    agent = create_deep_agent(model=model, backend=backend, checkpointer=InMemorySaver())
    out = agent.invoke(
        {"messages": [HumanMessage("what is the logo?")]}, {"configurable": {"thread_id": "b"}}
    )
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "success"
    [block] = message.content_blocks
    assert (block["type"], block.get("mime_type")) == ("image", "image/png")
    assert base64.b64decode(block["base64"]) == PNG  # type: ignore[typeddict-item]
    for path, data in (("/skills/guide/form.pdf", b"%PDF-1.4 plain"), ("/skills/guide/x.bin", PNG)):
        read = backend.read(path, offset=5, limit=1)  # the whole payload, as theirs: no window
        assert read.file_data is not None and read.file_data["encoding"] == "base64", path
        assert base64.b64decode(read.file_data["content"]) == data


def test_a_refused_glob_is_an_error_result_as_deepagents_own_backends_answer() -> None:
    """Outside testing: a pattern deepagents' shared matcher refuses (`../*`) raised out of
    `glob`, where its own backends return `GlobResult(error=...)`."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "guide", {"SKILL.md": md("guide")})
    backend = CompositeBackend(
        default=StateBackend(),
        routes={"/skills/": SkillfsBackend(skillfs.Skills(store, "bot", "alice"))},
    )
    refused = backend.glob("../*", path="/skills/")
    assert refused.matches is None and "Path traversal not allowed" in (refused.error or "")
    call = {"name": "glob", "args": {"pattern": "../*", "path": "/skills/"}, "id": "g1"}
    model = ScriptedChat(messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage("")]))
    agent = create_deep_agent(model=model, backend=backend, checkpointer=InMemorySaver())
    out = agent.invoke({"messages": [HumanMessage("list")]}, {"configurable": {"thread_id": "g"}})
    [message] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert message.status == "error" and str(message.content) == f"Error: {refused.error}"


def test_an_upload_refused_because_writes_are_off_is_permission_denied() -> None:
    """Outside testing: with skill writes off every upload answered `invalid_path`; deepagents'
    protocol names that refusal `permission_denied` (an invalid path stays `invalid_path`)."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    store.publish(SHARED, "guide", {"SKILL.md": md("guide")})
    read_only = CompositeBackend(
        default=StateBackend(),
        routes={"/skills/": SkillfsBackend(skillfs.Skills(store, "bot", "alice"))},
    )
    [up] = read_only.upload_files([("/skills/guide/logo.png", PNG)])
    assert up.error == PERMISSION_DENIED
    writable = SkillfsBackend(skillfs.Skills(store, "bot", "alice", skill_writes="live"))
    [bad] = writable.upload_files([("/Bad Name/logo.png", PNG)])
    assert bad.error == INVALID_PATH
    assert store.skills(ALICE) == []


def test_grep_reads_the_view_in_one_batch_per_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """grep reads every file of the model's skills: batched (`read_entries`), not one store
    read per file."""
    store = skillfs.open_store(f"memory://{uuid.uuid4().hex}")
    for name in ("guide", "faq"):
        files = {"SKILL.md": md(name), "a.md": f"{name} kind\n".encode(), "b.md": b"\0bin"}
        store.publish(SHARED, name, files)
    backend = SkillfsBackend(skillfs.Skills(store, "bot", "alice"))
    batches: list[int] = []
    read_entries = store.read_entries

    def counted(entries: Any) -> Any:
        entries = list(entries)
        batches.append(len(entries))
        return read_entries(entries)

    monkeypatch.setattr(store, "read_entries", counted)
    monkeypatch.setattr(store, "read_entry", None)  # no file read one by one
    matches = backend.grep("kind").matches or []
    assert sorted(m["path"] for m in matches) == ["/faq/a.md", "/guide/a.md"]
    assert batches == [6]
