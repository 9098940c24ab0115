"""The skills block of the system prompt (docs/runtime.md "The prompt block").

The default (`PromptOptions()`) is the `<available_skills>` XML block the runtime has always
produced, so prompt caches stay warm; the options add an instruction header, a Markdown form,
grouping by source layer, and a template of the host's own with `{skills_list}` and
`{skills_load_instructions}` (Spring AI Alibaba's placeholders). An empty view gives no block
at all: the Agent Skills client guide (agentskills.io/integrate-skills) says to omit the
skills section when there are none.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import PurePath
from typing import Literal

from skillfs.errors import InvalidArgument
from skillfs.runtime.layers import SkillInfo
from skillfs.runtime.model_tools import LOAD_INSTRUCTIONS

#: The Agent Skills specification's limit on a description (agentskills.io/specification).
MAX_DESCRIPTION = 1024
CUT_MARKER = " […] (cut at 1024 characters; read_skill gives the whole description)"

#: What the header `PromptOptions(header=True)` says before the tool set's load instructions.
INTRO = "You have skills: folders of instructions, scripts and resources for specialized tasks. "
#: The header `PromptOptions(header=True)` puts above the block (the default tool set's).
DEFAULT_HEADER = INTRO + LOAD_INSTRUCTIONS["default"]
#: The placeholders a template may hold.
PLACEHOLDERS = ("skills_list", "skills_load_instructions")

# XML 1.0 forbids these characters even escaped; a description holding one would break the block.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
#: Control characters (C0, DEL, C1) other than whitespace, and text-direction marks and
#: overrides: dropped from the text a skill carries into the prompt.
_UNSHOWN = re.compile("(?!\\s)[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: Whitespace other than the space: line breaks of every kind (LF, CR, VT, FF, NEL, U+2028,
#: U+2029) and tabs.
_BREAKS = re.compile(r"[^\S ]")


def one_line(text: str) -> str:
    """A name or description as the prompt shows it: every run of whitespace, line breaks
    included, one space; other control characters and text-direction overrides dropped. Text
    a skill carries never starts a line of its own in the prompt: no forged `### From
    shared:<agent>` heading, no instruction passing for the operator's (docs/runtime.md)."""
    return " ".join(_UNSHOWN.sub("", text).split())


def one_line_literal(text: str) -> str:
    """A skill id or a path, which the model must be able to give back: as `one_line`, but
    only what would break the line becomes a space, so an id or path holding spaces is
    shown exactly."""
    return _BREAKS.sub(" ", _UNSHOWN.sub("", text))


def xml_escape(text: str) -> str:
    """Text for an XML text node: &, <, > and double quotes escaped, characters XML forbids
    dropped. A single quote needs no escape in a text node, and `&apos;` is noise the model
    reads, so it stays as it is."""
    text = _XML_INVALID.sub("", text)
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def prompt_description(text: str) -> str:
    """A description as the prompt shows it: stripped (a block scalar's trailing newline, as
    the reference implementation, skills-ref, does), cut with a marker past the
    specification's 1,024 characters, on one line (`one_line`)."""
    text = text.strip()
    if len(text) > MAX_DESCRIPTION:
        text = text[:MAX_DESCRIPTION].rstrip() + CUT_MARKER
    return one_line(text)


@dataclass(frozen=True)
class PromptOptions:
    """How `Snapshot.prompt()` renders the skills.

    `header`: True for an instruction paragraph naming the worker's tools (`DEFAULT_HEADER`
    with the default tool set), or your own text, put above the block.
    `style`: "xml" (`<available_skills>`) or "markdown" (a bulleted list).
    `group_by_source`: one group per source layer (by label) instead of one list.
    `template`: your own text holding `{skills_list}` (the block, in `style`) and maybe
    `{skills_load_instructions}` (how to load a skill with the worker's tools); `{{` and
    `}}` are literal braces. Instead of `header`."""

    header: bool | str = False
    style: Literal["xml", "markdown"] = "xml"
    group_by_source: bool = False
    template: str | None = None

    def __post_init__(self) -> None:
        if self.template is not None:
            check_template(self.template)
            if self.header:
                raise InvalidArgument(
                    "PromptOptions: give a template or a header, not both (put the header's "
                    "text in the template)"
                )


def check_template(template: str) -> None:
    """InvalidArgument unless `template` holds `{skills_list}` and no other placeholder."""
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as exc:  # a lone "{" or "}"
        raise InvalidArgument(
            f"prompt template: {exc}; write {{{{ and }}}} for a literal brace"
        ) from exc
    known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    for name, spec, conversion in fields:
        if name not in PLACEHOLDERS or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "")
            shown += f":{spec}}}" if spec else "}"
            raise InvalidArgument(
                f"prompt template: unknown placeholder {shown}: a template may hold {known}; "
                "write {{ and }} for a literal brace"
            )
    if "skills_list" not in {name for name, _, _ in fields}:
        raise InvalidArgument(
            "prompt template: no {skills_list}: the template must say where the skills go"
        )


def render(
    skills: Sequence[SkillInfo],
    files_root: PurePath | None,
    options: PromptOptions,
    instructions: str = LOAD_INSTRUCTIONS["default"],
) -> str:
    """The block for `skills` (sorted by id), `files_root` being the root the model is shown;
    empty when there are none. `instructions`: how to load a skill with the worker's tools."""
    if not skills:
        return ""
    groups: list[tuple[str | None, list[SkillInfo]]]
    if options.group_by_source:
        by_source = sorted(skills, key=lambda s: (s.source, s.id))
        groups = [(src, list(g)) for src, g in groupby(by_source, key=lambda s: s.source)]
    else:
        groups = [(None, list(skills))]
    body = (
        _markdown(groups, files_root) if options.style == "markdown" else _xml(groups, files_root)
    )
    if options.template is not None:
        return options.template.format(skills_list=body, skills_load_instructions=instructions)
    header = INTRO + instructions if options.header is True else options.header or ""
    return f"{header}\n\n{body}" if header else body


def _root(files_root: PurePath | None, s: SkillInfo) -> str | None:
    return None if files_root is None else str(files_root / s.source_dir / s.id)


def _xml(groups: list[tuple[str | None, list[SkillInfo]]], files_root: PurePath | None) -> str:
    lines = ["<available_skills>"]
    for source, skills in groups:
        pad = "  "
        if source is not None:
            lines.append(f'  <source name="{xml_escape(one_line(source))}">')
            pad = "    "
        for s in skills:
            description = xml_escape(prompt_description(s.description))
            lines += [
                f"{pad}<skill>",
                f"{pad}  <name>{xml_escape(one_line(s.name))}</name>",
                f"{pad}  <description>{description}</description>",
                f"{pad}  <skill-id>{xml_escape(one_line_literal(s.id))}</skill-id>",
            ]
            root = _root(files_root, s)
            if root is not None:
                lines.append(
                    f"{pad}  <files-root>{xml_escape(one_line_literal(root))}</files-root>"
                )
            lines.append(f"{pad}</skill>")
        if source is not None:
            lines.append("  </source>")
    lines.append("</available_skills>")
    return "\n".join(lines)


def _markdown(groups: list[tuple[str | None, list[SkillInfo]]], files_root: PurePath | None) -> str:
    lines = ["## Available skills"]
    for source, skills in groups:
        lines.append("")
        if source is not None:
            lines += [f"### From {one_line(source)}", ""]
        for s in skills:
            description = prompt_description(s.description)
            skill_id = one_line_literal(s.id)
            line = f"- **{one_line(s.name)}** (skill id `{skill_id}`): {description}"
            root = _root(files_root, s)
            if root is not None:
                line += f" Files: `{one_line_literal(root)}`"
            lines.append(line)
    return "\n".join(lines)
