"""The typed reading of a SKILL.md's frontmatter (docs/validation.md, "Two readings").

The textual reading (skillfs.spec.skill_md) keeps every scalar as written, as skills-ref does;
it decides validation and what the prompt and tools show. MCP hosts read the frontmatter
with a YAML 1.1 safe loader (PyYAML's, as FastMCP does) and refuse a skill whose advertised
frontmatter differs from theirs (SEP-2640), so MCP serves this reading: `version: 2.0` is a
number, `disable-model-invocation: false` a boolean. It is refused, with the reason, when no
host could take it as JSON (a date, `.nan`), when a YAML 1.2 reader would read a scalar
otherwise (`yes`, `0777`, `1e3`), or when a strict reader does not find it as we do.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

import yaml

from skillfs.model import Finding, Typed
from skillfs.spec.validation import finding, show

#: The frontmatter as strict readers find it (FastMCP's pattern): fences of exactly `---`.
_FENCED = re.compile(r"\A---\r?\n(.*?)\r?\n---(?:\r?\n|\Z)", re.DOTALL)

# The YAML 1.2 core schema (yaml.org/spec/1.2.2, 10.3.2), what YAML 1.2 readers type.
_NULL = re.compile(r"null|Null|NULL|~|")
_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_INT10, _INT8, _INT16 = (re.compile(p) for p in (r"[-+]?[0-9]+", r"0o[0-7]+", r"0x[0-9a-fA-F]+"))
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INF = re.compile(r"[-+]?(\.inf|\.Inf|\.INF)")
_NAN = re.compile(r"\.nan|\.NaN|\.NAN")


def core_value(text: str) -> Any:
    """A plain scalar as a YAML 1.2 core-schema reader types it."""
    if _NULL.fullmatch(text):
        return None
    if _BOOL.fullmatch(text):
        return text.lower() == "true"
    if _INT10.fullmatch(text):
        return int(text)
    if _INT8.fullmatch(text):
        return int(text[2:], 8)
    if _INT16.fullmatch(text):
        return int(text[2:], 16)
    if _FLOAT.fullmatch(text):
        return float(text)
    if _INF.fullmatch(text):
        return -math.inf if text.startswith("-") else math.inf
    if _NAN.fullmatch(text):
        return math.nan
    return text


class _Refused(Exception):
    """The reading cannot be served: why, and the warning that says so to operators."""

    def __init__(self, reason: str, finding: Finding) -> None:
        super().__init__(reason)
        self.reason = reason
        self.finding = finding


def read_typed(text: str, source: str) -> tuple[Typed, list[Finding]]:
    """The typed reading of SKILL.md `text` (decoded, BOM dropped) whose frontmatter the
    textual reading found as `source`, and the warnings that say why it is refused."""
    fenced = _FENCED.match(text)  # `source` runs from the end of the '---' line to the next
    try:
        if fenced is None or f"\n{fenced.group(1)}\n".replace("\r\n", "\n") != source:
            raise _refusal(
                None,
                "typed-fence",
                "the frontmatter is not fenced by lines of exactly '---' (no blanks after "
                "them), which strict YAML readers such as FastMCP's need",
            )
        value = _load(fenced.group(1))
    except _Refused as exc:
        return Typed(refused=exc.reason), [exc.finding]
    return Typed(frontmatter=value), []


def _load(source: str) -> dict[str, Any]:
    loader = yaml.SafeLoader(source)
    try:
        node = loader.get_single_node()
        if not isinstance(node, yaml.MappingNode):  # the textual reading refused it first
            raise _refusal(None, "typed-unreadable", "the frontmatter is not a YAML mapping")
        _check(loader, node, None)
        value = loader.construct_document(node)
    except yaml.YAMLError as exc:
        problem = str(exc).split("\n", 1)[0]
        raise _refusal(
            None,
            "typed-unreadable",
            f"a YAML 1.1 safe reader (PyYAML's, FastMCP's) cannot read the frontmatter: {problem}",
        ) from exc
    finally:
        loader.dispose()
    return value  # type: ignore[no-any-return]


def _check(loader: yaml.SafeLoader, node: yaml.Node, field: str | None) -> None:
    """Refuse what a host cannot take: keys that are not text, values with no JSON form, plain
    scalars YAML 1.1 and 1.2 read apart."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check(loader, item, field)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str):
                raise _refusal(
                    field,
                    "typed-key",
                    f"the key {key_node.value!r} (line {_line(key_node)}) is {_kind(key)} to "
                    "YAML 1.1 readers, not text: quote it",
                )
            _check(loader, value_node, field or key)
    elif isinstance(node, yaml.ScalarNode):
        value = loader.construct_object(node)
        where = f"field {show(field)}" if field else "the frontmatter"
        if isinstance(value, datetime.date):
            raise _refusal(
                field,
                "typed-json",
                f"{where} holds {node.value!r} (line {_line(node)}), a YAML date, which has no "
                "JSON form and MCP hosts refuse: quote it",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise _refusal(
                field,
                "typed-json",
                f"{where} holds {node.value!r} (line {_line(node)}), a number that is not "
                "finite, which has no JSON form: quote it",
            )
        if node.style is None:
            later = core_value(node.value)
            if type(later) is not type(value) or later != value:
                raise _refusal(
                    field,
                    "typed-ambiguous",
                    f"{where} holds {node.value!r} (line {_line(node)}), which YAML 1.1 "
                    f"readers read as {value!r} and YAML 1.2 readers as {later!r}: quote it",
                )


def _refusal(field: str | None, rule: str, problem: str) -> _Refused:
    message = f"{problem} (MCP's skills/list leaves the skill out until then)"
    return _Refused(problem, finding("warning", field, rule, message))


def _line(node: yaml.Node) -> int:
    """The SKILL.md line of a node (the YAML source starts on line 2)."""
    return int(node.start_mark.line) + 2


def _kind(value: object) -> str:
    return "null" if value is None else f"a {type(value).__name__}"
