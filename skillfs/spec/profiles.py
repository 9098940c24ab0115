"""Host profiles: what a SKILL.md may say for the hosts a store serves (docs/validation.md,
"Host profiles").

The Agent Skills specification knows six fields; hosts give meaning to more (Claude Code's
`disable-model-invocation`, harness9's `trigger`, Spring AI Alibaba's `allowed_tools`) or
allow more in a name (AgentScope's `data_analysis`). Under a profile a host's own fields and
names are not errors. `spec`, the default, is the specification alone: skills-ref's verdicts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from skillfs.errors import InvalidArgument


@dataclass(frozen=True)
class Profile:
    """What one host accepts beyond the specification."""

    name: str
    #: The host, as messages name it.
    host: str
    #: Top-level fields the host gives a meaning to.
    fields: frozenset[str] = frozenset()
    #: Characters the host allows in a skill name besides lowercase letters, digits and `-`.
    name_characters: str = ""


PROFILES = {
    p.name: p
    for p in (
        Profile("spec", "the Agent Skills specification"),
        Profile(
            "claude-code",
            "Claude Code",
            # code.claude.com/docs/en/skills, "Frontmatter reference"
            frozenset(
                {
                    "when_to_use",
                    "argument-hint",
                    "arguments",
                    "disable-model-invocation",
                    "user-invocable",
                    "model",
                    "effort",
                    "context",
                    "agent",
                    "hooks",
                    "paths",
                    "shell",
                }
            ),
        ),
        Profile("agentscope", "AgentScope", name_characters="_"),
        Profile("harness9", "harness9", frozenset({"trigger"})),
        Profile("saa", "Spring AI Alibaba", frozenset({"allowed_tools", "allowedTools"})),
    )
}
DEFAULT = ("spec",)
#: The environment variable naming the profiles of the stores a process opens.
ENV = "SKILLFS_PROFILES"


@dataclass(frozen=True)
class Profiles:
    """The profiles a store (or a `skillfs validate`) accepts, merged."""

    names: tuple[str, ...] = DEFAULT

    @classmethod
    def of(cls, names: Iterable[str] | None) -> Profiles:
        """The profiles named (`spec` is always one); InvalidArgument names the known ones."""
        chosen = list(dict.fromkeys(["spec", *(names or ())]))
        unknown = [n for n in chosen if n not in PROFILES]
        if unknown:
            raise InvalidArgument(
                f"unknown host profile {unknown[0]!r}: choose from {', '.join(PROFILES)}"
            )
        return cls(tuple(chosen))

    @classmethod
    def of_store(cls, names: Iterable[str] | None) -> Profiles:
        """A store's profiles: `names`, else `$SKILLFS_PROFILES` (comma-separated), else spec."""
        if names is None:
            names = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
        return cls.of(names)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset().union(*(PROFILES[n].fields for n in self.names))

    @property
    def name_characters(self) -> str:
        return "".join(PROFILES[n].name_characters for n in self.names)

    def hosts_of(self, field: str) -> Sequence[Profile]:
        """The profiles, accepted or not, that know `field` (for an error's hint)."""
        return [p for p in PROFILES.values() if field in p.fields]
