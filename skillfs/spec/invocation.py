"""Who may invoke a skill, and with what arguments: Claude Code's invocation fields
(code.claude.com/docs/en/skills, "Frontmatter reference" and "Control who invokes a skill";
docs/validation.md, "Claude Code's fields").

- `disable-model-invocation: true`: only a user invokes the skill; the model never sees it.
- `user-invocable: false`: only the model loads it; it is no prompt a user picks.
- `argument-hint`: what the user types after the skill's name, e.g. `[issue-number]`.
- `arguments`: names for the positional arguments, a list or a space-separated string; a
  body then says `$issue` for the first one.

They are read from the textual reading of the frontmatter, which every manifest carries: a
boolean is on when it is written as YAML 1.2 spells true (`true`, `True`, `TRUE`), the
reading both a YAML 1.1 and a 1.2 host agree on. They take effect whatever the store's
profiles: a profile decides only whether the field is a finding (docs/validation.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: YAML 1.2's core schema spellings of the booleans.
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})


@dataclass(frozen=True)
class Invocation:
    """What a skill's frontmatter says of its invocation; the defaults are Claude Code's."""

    #: False when `disable-model-invocation: true`: kept out of everything the model sees.
    model: bool = True
    #: False when `user-invocable: false`: kept out of the prompts a user picks from.
    user: bool = True
    #: What the user types after the name ("" when the skill gives no hint).
    argument_hint: str = ""
    #: The names of the positional arguments, in order (`arguments`).
    argument_names: tuple[str, ...] = ()


DEFAULT = Invocation()


def invocation(frontmatter: Mapping[str, Any]) -> Invocation:
    """The invocation a frontmatter declares (shared `DEFAULT` when it declares none)."""
    keys = ("disable-model-invocation", "user-invocable", "argument-hint", "arguments")
    if not any(k in frontmatter for k in keys):
        return DEFAULT
    return Invocation(
        model=not _is(frontmatter.get("disable-model-invocation"), True),
        user=not _is(frontmatter.get("user-invocable"), False),
        argument_hint=_hint(frontmatter.get("argument-hint")),
        argument_names=_names(frontmatter.get("arguments")),
    )


def _is(value: Any, boolean: bool) -> bool:
    """Whether `value` (textual reading, or a bool) is `boolean` as YAML 1.2 spells it."""
    if isinstance(value, bool):
        return value is boolean
    return isinstance(value, str) and value.strip() in (_TRUE if boolean else _FALSE)


def _hint(value: Any) -> str:
    """`argument-hint: [issue-number]` is a YAML flow sequence, as Claude Code's own examples
    write it unquoted: shown as `[issue-number]`, each item in brackets."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return " ".join(f"[{item}]" for item in value if isinstance(item, str))
    return ""


def _names(value: Any) -> tuple[str, ...]:
    """`arguments: [issue, branch]` or `arguments: issue branch`; a number is no name (`$0`
    already means the first argument), nor is an empty string."""
    items = value.split() if isinstance(value, str) else value if isinstance(value, list) else []
    names = (v.strip() for v in items if isinstance(v, str))
    return tuple(dict.fromkeys(n for n in names if n and not n.isdigit() and len(n.split()) == 1))
