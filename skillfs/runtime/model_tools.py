"""The model's skill tools, as tool sets named after the hosts whose tools they copy
(docs/runtime.md, "Tool sets").

A model trained or prompted on one host calls that host's tools: harness9's `use_skill`,
Spring AI Alibaba's `read_skill` by name or path and `disable_skill`. A worker chooses its
set once (`Skills(..., tools=)`); `"default"` is the set skillfs has always offered, its
definitions byte-identical, so prompt caches stay warm across the upgrade. This module holds
the definitions, the sentence a prompt uses to say how to load a skill with them, and how a
seed's arguments (a name, a path) name a skill.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Literal, get_args

from skillfs.errors import InvalidArgument, NotFound
from skillfs.runtime.layers import SkillInfo
from skillfs.spec.skill_md import SKILL_MD
from skillfs.util.suggest import closest

ToolSet = Literal["default", "harness9", "saa"]
#: The tools of each set, in the order `tools()` gives them. The seeds' sets keep
#: `load_skill_through_path` so a skill's other files are reachable when nothing is
#: materialized for a shell.
TOOL_SETS: dict[ToolSet, tuple[str, ...]] = {
    "default": ("load_skill_through_path", "read_skill", "search_skills"),
    "harness9": ("use_skill", "load_skill_through_path"),
    "saa": ("read_skill", "disable_skill", "load_skill_through_path"),
}
#: How a prompt says to load a skill with each set: `{skills_load_instructions}` of a
#: template, and the end of the header `PromptOptions(header=True)` gives.
LOAD_INSTRUCTIONS: dict[ToolSet, str] = {
    "default": "When a task matches a skill's description, load its SKILL.md with "
    "load_skill_through_path before acting, then load the files it mentions as needed.",
    "harness9": "When a task matches a skill's description, call use_skill with its name "
    "before acting and follow the instructions it returns; load the files they mention with "
    "load_skill_through_path.",
    "saa": "When a task matches a skill's description, call read_skill with its skill_name "
    "before acting and follow the instructions it returns; load the files they mention with "
    "load_skill_through_path. Call disable_skill for a skill that keeps matching but does "
    "not help: it is hidden for the rest of this conversation.",
}
#: The arguments by which `read_skill` and `disable_skill` of the "saa" set name a skill.
SELECTORS = ("skill_id", "skill_name", "skill_path")
#: The tools whose call changes what its conversation sees later (docs/runtime.md,
#: "Sessions"): a surface offers them only to a call that belongs to a conversation. (Loads
#: change a session too, but only what it binds, and a surface that binds no host tool, as
#: MCP, shows nothing of them.)
CONVERSATION_TOOLS = frozenset({"disable_skill"})


def check_tool_set(name: str) -> ToolSet:
    """`tools` as given to `Skills`; InvalidArgument names the sets."""
    if name in TOOL_SETS:
        return name
    raise InvalidArgument(
        f"tools={name!r}: choose a tool set from {', '.join(get_args(ToolSet))} "
        "(docs/runtime.md, 'Tool sets')"
    )


def tool_specs(
    tool_set: ToolSet = "default",
    ids: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, JSON schema) of a set's tools; `ids` and `names`: the skill ids
    and names to allow as enums (None: plain strings)."""
    skill_id: dict[str, Any] = {
        "type": "string",
        "description": "The <skill-id> of a skill listed in <available_skills>.",
    }
    if ids is not None:
        skill_id["enum"] = list(ids)
    skill_name: dict[str, Any] = {"type": "string", "description": "The name of a listed skill."}
    if names is not None:
        skill_name["enum"] = list(names)
    selectors = {
        "skill_id": skill_id,
        "skill_name": skill_name,
        "skill_path": {
            "type": "string",
            "description": "The skill's directory as the skills list shows it, or its "
            "SKILL.md there.",
        },
    }
    one_of = "Name the skill by skill_id, skill_name or skill_path (several must agree)."
    specs = {
        "load_skill_through_path": (
            "Load a skill's instructions or one of its files. Call it with path "
            "'SKILL.md' before using a skill from <available_skills>, then load the "
            "files its instructions mention by their path relative to the skill.",
            _params(
                skill_id=skill_id,
                path={
                    "type": "string",
                    "description": "A path inside the skill, e.g. 'SKILL.md' or "
                    "'references/guide.md'.",
                },
            ),
        ),
        "read_skill": (
            "Read a skill's instructions: its SKILL.md without the YAML frontmatter.",
            _params(skill_id=skill_id),
        ),
        "search_skills": (
            "Find available skills whose name, description or file paths contain every "
            "word of the query.",
            _params(query={"type": "string", "description": "Words to look for."}),
        ),
        "use_skill": (
            "Use a skill: returns its instructions (SKILL.md after the YAML frontmatter). "
            "Call it before acting on a task that matches a skill's description.",
            _params(skill_name=skill_name),
        ),
    }
    if tool_set == "saa":
        specs["read_skill"] = (
            f"Read a skill's instructions: its SKILL.md without the YAML frontmatter. {one_of}",
            _params(required=False, **selectors),
        )
        specs["disable_skill"] = (
            "Hide a skill that does not help with this conversation: from now on it is not "
            f"listed and cannot be read, until the conversation ends. {one_of}",
            _params(required=False, **selectors),
        )
    return [(name, *specs[name]) for name in TOOL_SETS[tool_set]]


def _params(required: bool = True, **props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required else [],
        "additionalProperties": False,
    }


# ---------------------------------------------------------------------- naming a skill


def by_name(name: str, among: Sequence[SkillInfo]) -> SkillInfo | None:
    """The skill whose frontmatter `name` is `name` (else whose id is: a name is usually its
    directory's); None when none is; InvalidArgument when several are."""
    hits = [s for s in among if s.name == name] or [s for s in among if s.id == name]
    if len(hits) > 1:
        raise InvalidArgument(
            f"skill_name {name!r} names {len(hits)} skills (ids "
            f"{', '.join(s.id for s in hits)}): give skill_id instead"
        )
    return hits[0] if hits else None


def skill_path(s: SkillInfo, shown_root: PurePath | None) -> str:
    """A skill's directory as the model is told it: under the shown files root when the
    skills are materialized, else `<source>/<skill id>` (the materialized layout)."""
    rel = f"{s.source_dir}/{s.id}"
    return rel if shown_root is None else str(shown_root / rel)


def by_path(path: str, among: Sequence[SkillInfo], shown_root: PurePath | None) -> SkillInfo | None:
    """The skill whose directory is `path` (`skill_path`, or `<source>/<id>`, or `/<id>`),
    with or without a trailing `/SKILL.md`; None when none is."""
    p = path.strip().rstrip("/")
    if p.endswith("/" + SKILL_MD):
        p = p[: -len(SKILL_MD) - 1]
    for s in among:
        if p in (skill_path(s, shown_root), f"{s.source_dir}/{s.id}", f"/{s.id}"):
            return s
    return None


def not_found(what: str, value: object, known: Sequence[str]) -> NotFound:
    """NotFound for an unknown name, path or id (a model may send a non-string one), with a
    "did you mean" and what exists."""
    near = closest(str(value), known)
    hint = f" Did you mean {near!r}?" if near else ""
    return NotFound(
        f"unknown skill {what} {value!r}.{hint} Available skill {what}s: "
        + (", ".join(known) or "(none)")
    )
