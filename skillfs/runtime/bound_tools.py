"""Host tools bound to skills (docs/runtime.md, "Tools bound to skills").

The host registers each of its tools once with the worker (`Skills(..., host_tools=)`),
marked bindable or not. A tool not bindable is always offered. A bindable one is offered in
a session only while a skill the model loaded there names it in `allowed-tools` (Spring AI
Alibaba's `allowed_tools` and `allowedTools` read the same), and only when that skill comes
from a layer the operator trusts: the shared scope and the worker's markets by default,
never the user's scope, where users and agents write. A skill elsewhere names what it likes
and activates nothing, so no one widens an agent's tools by writing a SKILL.md.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from skillfs.errors import InvalidArgument
from skillfs.runtime.layers import SkillInfo

#: The spellings of the field, Claude Code's and the spec's first.
FIELDS = ("allowed-tools", "allowed_tools", "allowedTools")
#: One entry of a string: a name, or a name with a scope in parentheses (`Bash(git add:*)`).
_ENTRY = re.compile(r"[^\s,()]+(?:\([^)]*\))?")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class HostTool(BaseModel):
    """One of the host's tools as registered with the runtime: its name as the model calls
    it, and whether skills may bind it (else it is offered at every step)."""

    model_config = ConfigDict(frozen=True)

    name: str
    bindable: bool = False

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"tool name {name!r}: give the name the model calls it by (1-128 letters, "
                "digits, '_', '.', ':' or '-')"
            )
        return name


def check_host_tools(tools: Iterable[HostTool]) -> tuple[HostTool, ...]:
    """`Skills(host_tools=)` checked: HostTool objects, each name once."""
    tools = tuple(tools)
    for t in tools:
        if not isinstance(t, HostTool):
            raise InvalidArgument(f"host tool {t!r}: give HostTool(name, bindable=...) objects")
    names = [t.name for t in tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgument(
            f"host tools registered twice: {', '.join(twice)}; register each once"
        )
    return tools


def allowed_tools(frontmatter: Mapping[str, Any]) -> frozenset[str]:
    """The tool names a frontmatter's `allowed-tools` (or SAA's spellings) grants: entries of
    a space- or comma-separated string or of a list. A scoped entry (`Bash(git:*)`) grants
    nothing: skillfs cannot hold a host tool to a scope, so binding it would widen it."""
    names: set[str] = set()
    for key in FIELDS:
        value = frontmatter.get(key)
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        for item in items:
            if isinstance(item, str):
                names.update(e for e in _ENTRY.findall(item) if "(" not in e)
    return frozenset(names)


class Binder:
    """Which host tools a session's loaded skills activate, over the trusted layers."""

    def __init__(self, tools: Sequence[HostTool], trusted: Collection[str]) -> None:
        self.tools = tuple(tools)
        #: The labels of the layers whose skills may bind tools.
        self.trusted = frozenset(trusted)
        #: The names of the bindable tools, in the order registered.
        self.bindable = tuple(t.name for t in self.tools if t.bindable)

    def bound(self, loaded: Iterable[SkillInfo]) -> tuple[str, ...]:
        """The bindable tools that skills of `loaded` from trusted layers name, in the order
        the host registered them (so the tool list is byte-stable between steps)."""
        if not self.bindable:
            return ()
        named: set[str] = set()
        for s in loaded:
            if s.source in self.trusted:
                named |= allowed_tools(s.frontmatter)
        return tuple(n for n in self.bindable if n in named)

    def offered(self, bound: Collection[str]) -> tuple[str, ...]:
        """The host's tools to offer the model: every one not bindable, and those bound."""
        return tuple(t.name for t in self.tools if not t.bindable or t.name in bound)
