"""Skills as MCP prompts (docs/integrations.md, "Skills as prompts"): what a host offers its
user as `/skill-name args`, as Claude Code offers a skill.

Every skill of the view is a prompt unless its SKILL.md says `user-invocable: false`; a skill
the model does not see (`disable-model-invocation: true`) is one too: that is how its users
reach it. A prompt's name is the skill id. It takes one optional argument, `arguments`, the
line as a user would type it after the name (described by the skill's `argument-hint`),
unless the frontmatter names its arguments (Claude Code's `arguments: [issue, branch]`): then
one optional argument per name, in order. `prompts/get` answers the skill's instructions with
`$ARGUMENTS` substituted (spec/arguments.py), as one user message.
"""

from __future__ import annotations

import mcp_types as types

from skillfs.errors import NotFound
from skillfs.mcp.catalog import listing
from skillfs.runtime import SkillInfo, Snapshot
from skillfs.runtime.prompt import prompt_description
from skillfs.spec.arguments import ARGUMENTS
from skillfs.spec.invocation import Invocation


def invocable(snap: Snapshot) -> list[SkillInfo]:
    """The skills `prompts/list` carries: those users invoke, sorted by id."""
    return [s for s in snap.skills if s.invocation.user]


def listed(snap: Snapshot) -> list[tuple[str, str, str, Invocation]]:
    """What `prompts/list` says of the view, to compare two views by: each `prompt` is made
    of these alone, so equal lists mean equal prompts (without building them)."""
    return [(s.id, s.name, s.description, s.invocation) for s in invocable(snap)]


def prompt(s: SkillInfo) -> types.Prompt:
    """The MCP prompt of a skill: its id, its description as the prompt block shows it, its
    arguments."""
    how = s.invocation
    if how.argument_names:
        hint = f" ({how.argument_hint})" if how.argument_hint else ""
        arguments = [
            types.PromptArgument(
                name=name,
                description=f"Argument {i} of {len(how.argument_names)}{hint}: ${name} "
                "in the skill's instructions.",
                required=False,
            )
            for i, name in enumerate(how.argument_names, 1)
        ]
    else:
        arguments = [
            types.PromptArgument(
                name=ARGUMENTS,
                description=how.argument_hint
                or "What to pass the skill, as typed after its name ($ARGUMENTS in its "
                "instructions).",
                required=False,
            )
        ]
    return types.Prompt(
        name=s.id,
        title=s.name if s.name != s.id else None,
        description=prompt_description(s.description),
        arguments=arguments,
    )


def skill_of(snap: Snapshot, name: str) -> SkillInfo:
    """The skill a prompt name names; NotFound naming the prompts otherwise."""
    s = snap.merged.by_id.get(name)
    if s is None or not s.invocation.user:
        names = listing([x.id for x in invocable(snap)])
        raise NotFound(f"no prompt {name[:200]!r} is served; prompts: {names}")
    return s


def result(s: SkillInfo, text: str) -> types.GetPromptResult:
    """`prompts/get`'s answer: the invoked skill's text as one user message."""
    return types.GetPromptResult(
        description=prompt_description(s.description),
        messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        ],
    )
