"""Claude Code's invocation fields in a worker's view (docs/runtime.md, "Invoking a skill"):
a `disable-model-invocation` skill is out of everything the model sees and refused to its
tools, yet users invoke it; a `user-invocable: false` skill is the model's alone."""

from __future__ import annotations

import json

import pytest

from skillfs import Skills
from skillfs.errors import NotFound
from skillfs.model import Scope
from tests.runtime_helpers import md, memory_store

SHARED = Scope.shared("bot")


def skill_md(name: str, extra: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: Does {name}.\n{extra}---\n\n{body}\n".encode()


def view() -> Skills:
    store = memory_store()
    store.publish(SHARED, "open", {"SKILL.md": md("open", "An ordinary skill.")})
    store.publish(
        SHARED,
        "deploy",
        {
            "SKILL.md": skill_md(
                "deploy",
                "disable-model-invocation: true\nargument-hint: [environment]\n",
                "Deploy to $0. Line: $ARGUMENTS",
            ),
            "ref.md": b"secret steps",
        },
    )
    store.publish(
        SHARED,
        "background",
        {"SKILL.md": skill_md("background", "user-invocable: false\n", "Know this.")},
    )
    return Skills(store, "bot", "alice")


def test_a_skill_users_invoke_is_not_shown_to_the_model() -> None:
    snap = view().snapshot()
    assert [s.id for s in snap.skills] == ["background", "deploy", "open"]  # operators
    assert [s.id for s in snap.model_skills] == ["background", "open"]
    assert "deploy" not in snap.prompt()
    assert "<skill-id>background</skill-id>" in snap.prompt()
    [load, *_] = snap.tools(enum=True)
    assert load["function"]["parameters"]["properties"]["skill_id"]["enum"] == [
        "background",
        "open",
    ]
    assert snap.search_skills("deploy") == []
    for name, args in [
        ("load_skill_through_path", {"skill_id": "deploy", "path": "ref.md"}),
        ("read_skill", {"skill_id": "deploy"}),
    ]:
        text, failed = snap.tool_outcome(name, json.dumps(args))
        assert failed and "disable-model-invocation: true" in text, text
    text, failed = snap.tool_outcome("read_skill", {"skill_id": "nope"})
    assert failed and "Available skill ids: background, open" in text  # not listed to it
    with pytest.raises(NotFound, match="not available to the model"):
        snap.load("deploy")
    assert snap.read_bytes("deploy", "ref.md") == b"secret steps"  # the host still reads it


def test_users_invoke_it_with_arguments() -> None:
    snap = view().snapshot()
    assert snap.invoke("deploy", '"eu west" --now') == (
        'Deploy to eu west. Line: "eu west" --now\n'
    )
    assert snap.invoke("open", "x y").endswith("\n\nARGUMENTS: x y\n")
    assert snap.invoke("deploy", {"arguments": "prod"}) == "Deploy to prod. Line: prod\n"
    with pytest.raises(NotFound, match="user-invocable: false"):
        snap.invoke("background")
    with pytest.raises(NotFound, match="unknown skill id 'nope'"):
        snap.invoke("nope")


def test_a_view_of_skills_only_users_invoke_gives_the_model_nothing() -> None:
    store = memory_store()
    store.publish(
        SHARED,
        "deploy",
        {"SKILL.md": skill_md("deploy", "disable-model-invocation: TRUE\n", "Go.")},
    )
    snap = Skills(store, "bot", "alice").snapshot()
    assert snap.prompt() == "" and snap.tools() == []
    assert snap.invoke("deploy") == "Go.\n"
