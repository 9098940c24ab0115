"""A new skill's template, and the check that none of its placeholder text is left: the CLI's
`skillfs edit` of a new skill and the console's **New skill** both start from the template, and
both refuse to make live a skill that still says "1. First step." (docs/governance.md,
"Nothing half-written goes live"). The placeholder is not against the Agent Skills spec, so
the store keeps it (a draft may hold it); the surfaces that write a new skill from the template
ask for a second step ("Do it anyway", `--force`) instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from skillfs.model import Finding
from skillfs.spec.validation import finding

#: The description a new skill starts with when none is given (finding `template-description`).
TEMPLATE_DESCRIPTION = "What this skill does, and when the agent should use it."
#: The template's instructions, below its title: each non-blank line is a placeholder (finding
#: `template-text` on a line still holding one).
TEMPLATE_INSTRUCTIONS = (
    "Say when the agent should use this skill, and what it gets done.\n\n"
    "## Instructions\n\n"
    "1. First step.\n"
    "2. Second step.\n\n"
    "## Examples\n\n"
    "- A request this skill handles, and what a good answer looks like.\n"
)
_PLACEHOLDERS = frozenset(
    line for line in TEMPLATE_INSTRUCTIONS.split("\n") if line and not line.startswith("#")
)


def skill_template(
    name: str, description: str = TEMPLATE_DESCRIPTION, instructions: str = TEMPLATE_INSTRUCTIONS
) -> bytes:
    """A new skill's SKILL.md, the one template of every surface: valid frontmatter (safely
    quoted), a title from the name, then `instructions` (the usual sections by default)."""
    head = yaml.safe_dump(
        {"name": name, "description": description},
        sort_keys=False,
        allow_unicode=True,
        width=10_000,
        default_flow_style=False,
    )
    title = name.replace("-", " ").strip().capitalize() or name
    body = instructions.replace("\r\n", "\n").strip("\n")
    return f"---\n{head}---\n\n# {title}\n\n{body}\n".encode()


def placeholder_findings(frontmatter: Mapping[str, Any] | None, text: str) -> list[Finding]:
    """Errors for what of the template SKILL.md `text` still holds: its placeholder
    description, and each line still one of its placeholder instructions (by line number)."""
    found = []
    if (frontmatter or {}).get("description") == TEMPLATE_DESCRIPTION:
        found.append(
            finding(
                "error",
                "description",
                "template-description",
                f"description is still the template's placeholder ({TEMPLATE_DESCRIPTION!r}): "
                "say what the skill does and when to use it",
            )
        )
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip() in _PLACEHOLDERS:
            found.append(
                finding(
                    "error",
                    None,
                    "template-text",
                    f"line {number} is still the template's placeholder ({line.strip()!r}): "
                    "write the skill's own instructions there",
                )
            )
    return found
