"""Tool sets (runtime/model_tools.py): the default set byte-identical to the definitions
skillfs gave before sets existed; harness9's `use_skill`; Spring AI Alibaba's `read_skill` by
id, name or path (refused when they disagree) and `disable_skill`, which hides a skill for
the rest of the worker's session and no other's (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillfs import PromptOptions, Skills, Store
from skillfs.errors import InvalidArgument
from skillfs.model import Scope
from skillfs.runtime.model_tools import LOAD_INSTRUCTIONS
from skillfs.runtime.prompt import INTRO
from tests.runtime_helpers import md, memory_store

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
GOLDEN = Path(__file__).parent / "data" / "default_tools.json"


def store_with_skills() -> Store:
    store = memory_store()
    store.publish(SHARED, "beta", {"SKILL.md": md("beta", "Shared beta.", "Beta steps.")})
    store.publish(ALICE, "alpha", {"SKILL.md": md("alpha", "Alice's alpha.", "Alpha steps.")})
    return store


def test_the_default_set_is_byte_identical_to_the_tools_before_sets() -> None:
    """tests/runtime/data/default_tools.json was written by the code before tool sets."""
    golden = json.loads(GOLDEN.read_text())
    for tools in ("default", None):
        skills = Skills(store_with_skills(), "bot", "alice", **({"tools": tools} if tools else {}))
        snap = skills.snapshot()
        for style in ("openai", "anthropic"):
            for enum in (False, True):
                key = f"{style}{'-enum' if enum else ''}"
                assert json.dumps(snap.tools(style=style, enum=enum)) == golden[key], key
        assert snap.tool_names == ("load_skill_through_path", "read_skill", "search_skills")


def test_an_unknown_set_is_refused_with_the_choices() -> None:
    with pytest.raises(InvalidArgument, match="choose a tool set from default, harness9, saa"):
        Skills(memory_store(), "bot", "alice", tools="claude")  # type: ignore[arg-type]


def test_harness9_use_skill_returns_the_body_after_the_frontmatter() -> None:
    snap = Skills(store_with_skills(), "bot", "alice", tools="harness9").snapshot()
    assert [t["function"]["name"] for t in snap.tools()] == ["use_skill", "load_skill_through_path"]
    params = snap.tools(enum=True)[0]["function"]["parameters"]
    assert params["properties"]["skill_name"]["enum"] == ["alpha", "beta"]
    assert params["required"] == ["skill_name"]
    assert snap.call_tool("use_skill", {"skill_name": "beta"}) == "# beta\nBeta steps.\n"
    assert snap.call_tool("use_skill", '{"skill_name": "alpha"}').endswith("Alpha steps.\n")
    error = snap.call_tool("use_skill", {"skill_name": "betta"})
    assert error.startswith("Error: unknown skill name 'betta'. Did you mean 'beta'?")
    assert snap.call_tool("read_skill", {"skill_id": "beta"}).startswith("Error: unknown tool")
    assert "call use_skill with its name" in snap.prompt(PromptOptions(header=True))


def test_use_skill_by_a_name_two_skills_share_is_refused() -> None:
    store = memory_store()
    store.publish(SHARED, "one", {"SKILL.md": md("same", "First.")})
    store.publish(SHARED, "two", {"SKILL.md": md("same", "Second.")})
    snap = Skills(store, "bot", "alice", tools="harness9").snapshot()
    text = snap.call_tool("use_skill", {"skill_name": "same"})
    assert text == "Error: skill_name 'same' names 2 skills (ids one, two): give skill_id instead"


def test_saa_read_skill_by_id_name_or_path(tmp_path: Path) -> None:
    snap = Skills(store_with_skills(), "bot", "alice", tools="saa").snapshot()
    names = [t["name"] for t in snap.tools(style="anthropic")]
    assert names == ["read_skill", "disable_skill", "load_skill_through_path"]
    assert snap.tools(style="anthropic")[0]["input_schema"]["required"] == []
    body = "# beta\nBeta steps.\n"
    for args in (
        {"skill_id": "beta"},
        {"skill_name": "beta"},
        {"skill_path": "shared/beta"},
        {"skill_path": "/beta/SKILL.md"},
        {"skill_id": "beta", "skill_name": "beta", "skill_path": "shared/beta/"},
    ):
        assert snap.call_tool("read_skill", args) == body, args
    shown = snap.materialize(tmp_path, shown_as="/workspace/.skills-cache")
    assert shown.call_tool("read_skill", {"skill_path": "/workspace/.skills-cache/user/alpha"})
    text = shown.call_tool("read_skill", {"skill_path": "/elsewhere/alpha"})
    assert text == (
        "Error: unknown skill path '/elsewhere/alpha'. Available skill paths: "
        "/workspace/.skills-cache/user/alpha, /workspace/.skills-cache/shared/beta"
    )


def test_saa_read_skill_refuses_arguments_that_disagree_or_are_missing() -> None:
    snap = Skills(store_with_skills(), "bot", "alice", tools="saa").snapshot()
    disagree = snap.call_tool("read_skill", {"skill_id": "alpha", "skill_name": "beta"})
    assert disagree == (
        "Error: the arguments name different skills (skill_id 'alpha' is skill 'alpha', "
        "skill_name 'beta' is skill 'beta'): give one"
    )
    none = snap.call_tool("read_skill", {})
    assert none == "Error: name the skill: give skill_id, skill_name or skill_path"
    other = snap.call_tool("read_skill", {"skill": "alpha"})
    assert other.startswith("Error: unknown argument 'skill'")
    assert snap.call_tool("read_skill", {"skill_id": 7}).startswith("Error: argument 'skill_id'")


def test_disable_skill_hides_it_for_the_rest_of_the_session_only() -> None:
    store = store_with_skills()
    skills = Skills(store, "bot", "alice", tools="saa")
    snap = skills.snapshot()
    text = snap.call_tool("disable_skill", {"skill_name": "beta"})
    assert text.startswith("Skill 'beta' is disabled for the rest of this conversation")
    # this step: reads refused at once; the prompt it was given stays as it was
    refused = snap.call_tool("read_skill", {"skill_id": "beta"})
    assert refused == (
        "Error: skill 'beta' was disabled for the rest of this session (disable_skill)"
    )
    assert [s.id for s in snap.model_skills] == ["alpha"]
    # the next step: out of the prompt and the tools' enum; the same object after that (C3)
    after = skills.snapshot()
    assert after.token != snap.token and "beta" not in after.prompt()
    params = after.tools(enum=True)[0]["function"]["parameters"]
    assert params["properties"]["skill_id"]["enum"] == ["alpha"]
    assert skills.snapshot() is after
    # a user still invokes it; an edit of it keeps it hidden
    assert after.invoke("beta") == "# beta\nBeta steps.\n"
    store.publish(SHARED, "beta", {"SKILL.md": md("beta", "Beta, edited.")})
    assert "beta" not in skills.snapshot().prompt()
    # another conversation of the same user sees it
    other = Skills(store, "bot", "alice", tools="saa").snapshot()
    assert "Beta, edited." in other.prompt()
    assert other.call_tool("read_skill", {"skill_id": "beta"}).startswith("# beta")


def test_saa_header_and_template_name_its_tools() -> None:
    snap = Skills(store_with_skills(), "bot", "alice", tools="saa").snapshot()
    header = snap.prompt(PromptOptions(header=True))
    assert "call read_skill with its skill_name" in header and "disable_skill" in header
    templated = snap.prompt(PromptOptions(template="{skills_list}\n{skills_load_instructions}"))
    assert templated.endswith("</available_skills>\n" + LOAD_INSTRUCTIONS["saa"])
    assert header.startswith(INTRO + LOAD_INSTRUCTIONS["saa"] + "\n\n<available_skills>")
