"""The skill model: read a SKILL.md and inspect a skill's files (skill_dirs.py finds and
validates skill directories on disk).

Bad content never raises here: it becomes findings (docs/design.md §7), and each surface
decides whether an error rejects the skill. The rules themselves live in skillfs.spec.validation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import yaml
from frontmatter.default_handlers import YAMLHandler
from pydantic import BaseModel, ConfigDict

from skillfs.model import Finding, Typed, error_findings
from skillfs.spec.profiles import Profiles
from skillfs.spec.typed import read_typed
from skillfs.spec.validation import SPEC, check_frontmatter, finding, show

SKILL_MD = "SKILL.md"
MAX_LINES = 500  # the spec's recommendation for SKILL.md; longer ones get a warning
#: How deep frontmatter may nest. Real skills nest two or three levels (metadata: {k: v});
#: the limit keeps every stored manifest readable by any JSON reader (docs/validation.md).
MAX_DEPTH = 32
#: Bytes of frontmatter parsed at most: YAML parsing is slow (an 8 MiB frontmatter of 500k
#: keys took the server 28-58 s), and real frontmatter is a few hundred bytes.
MAX_FRONTMATTER_BYTES = 64 * 1024
#: Findings kept per skill; the rest are counted in one last finding, so a SKILL.md of
#: thousands of unknown keys does not make a manifest, or an error, of thousands of lines.
MAX_FINDINGS = 100

# python-frontmatter finds the frontmatter. Its own boundary (`^-{3,}\s*$`) also takes `----`
# and spans blank lines; ours is a line of exactly three dashes (trailing blanks allowed).
# We never call its loader: it is safe (yaml.SafeLoader, checked) but types scalars
# (1.10 -> 1.1, yes -> True, dates -> date objects) and drops errors we want as findings.
_SPLITTER = YAMLHandler(fm_boundary=re.compile(r"^---[ \t]*$", re.MULTILINE))
_STR, _SEQ, _MAP = (f"tag:yaml.org,2002:{t}" for t in ("str", "seq", "map"))


class SkillDoc(BaseModel):
    """A parsed SKILL.md: its two readings of the frontmatter (docs/validation.md, "Two
    readings": `frontmatter` every scalar as text, None when unreadable; `typed` as a YAML 1.1
    safe loader types it, None with the textual one), body, findings about the document."""

    model_config = ConfigDict(frozen=True)

    frontmatter: dict[str, Any] | None
    body: str
    findings: list[Finding]
    typed: Typed | None = None


class Inspection(NamedTuple):
    """What `inspect_skill` finds: the two readings of the frontmatter, and every finding."""

    frontmatter: dict[str, Any] | None
    findings: list[Finding]
    typed: Typed | None


def parse_skill_md(data: bytes) -> SkillDoc:
    """Read SKILL.md bytes; newlines become LF and a UTF-8 BOM is dropped (with a warning)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return SkillDoc(
            frontmatter=None,
            body="",
            findings=[
                finding(
                    "error",
                    None,
                    "encoding",
                    f"SKILL.md is not UTF-8 text (byte {data[exc.start]:#04x}"
                    f" at offset {exc.start}): save it as UTF-8",
                )
            ],
        )
    findings: list[Finding] = []
    if text.startswith("\ufeff"):
        text = text[1:]
        findings.append(
            finding(
                "warning",
                None,
                "bom",
                "SKILL.md starts with a UTF-8 byte-order mark; skills-ref and other tools"
                " reject it: save without BOM",
            )
        )
    as_written = text  # newlines as written: what a host's own reader reads
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        findings.append(
            finding(
                "error",
                None,
                "empty",
                "SKILL.md is empty: it needs YAML frontmatter (name, description)"
                " between '---' lines",
            )
        )
        return SkillDoc(frontmatter=None, body="", findings=findings)
    if not _SPLITTER.detect(text):
        first = text.split("\n", 1)[0]
        findings.append(
            finding(
                "error",
                None,
                "frontmatter-missing",
                f"SKILL.md must start with a '---' line opening the YAML frontmatter;"
                f" line 1 is {show(first)}",
            )
        )
        return SkillDoc(frontmatter=None, body=text, findings=findings)
    try:
        source, rest = _SPLITTER.split(text)
    except ValueError:
        findings.append(
            finding(
                "error",
                None,
                "frontmatter-unclosed",
                "the frontmatter opened by '---' on line 1 is never closed:"
                " add a '---' line after the last field",
            )
        )
        return SkillDoc(frontmatter=None, body=text, findings=findings)
    frontmatter, yaml_findings = _read_yaml(source)
    findings += yaml_findings
    typed = None
    if frontmatter is not None:
        typed, typed_findings = read_typed(as_written, source)
        if not error_findings(yaml_findings):  # else they say what to fix first
            findings += typed_findings
    body = rest.lstrip("\n")
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    if lines > MAX_LINES:
        findings.append(
            finding(
                "warning",
                None,
                "too-long",
                f"SKILL.md has {lines} lines, over the {MAX_LINES} the spec recommends:"
                " move details to references/",
            )
        )
    if frontmatter is not None and not body.strip():
        findings.append(
            finding(
                "warning", None, "no-body", "SKILL.md has no instructions after the frontmatter"
            )
        )
    return SkillDoc(frontmatter=frontmatter, body=body, findings=findings, typed=typed)


def _read_yaml(source: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """Safe YAML: compose only (no object is ever constructed from a tag), every scalar a string.

    Strings everywhere is what the spec (string fields, string metadata) and skills-ref's
    strictyaml give, and it keeps `version: 1.10` as written and every value JSON-ready.
    `source` starts right after the opening '---', so YAML line L (0-based) is file line L + 1.
    """
    size = len(source.encode())
    if size > MAX_FRONTMATTER_BYTES:
        return None, [
            finding(
                "error",
                None,
                "frontmatter-too-large",
                f"the frontmatter is {size} bytes, over the limit of {MAX_FRONTMATTER_BYTES}"
                " (MAX_FRONTMATTER_BYTES): keep it to name, description and a few fields",
            )
        ]
    try:
        node = yaml.compose(source, Loader=yaml.BaseLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" on line {mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "unreadable"
        syntax = finding(
            "error", None, "yaml-syntax", f"frontmatter YAML syntax error{where}: {problem}"
        )
        quoted, fixes = _quote_colon_values(source)
        if fixes:  # the client guide's fallback: retry with those values quoted
            data, findings = _read_yaml(quoted)
            if all(f.rule != "yaml-syntax" for f in findings):  # it was the only problem
                return data, fixes + findings
        return None, [syntax]
    except yaml.YAMLError as exc:  # e.g. a control character the YAML reader refuses
        return None, [
            finding("error", None, "yaml-syntax", f"frontmatter YAML is unreadable: {exc}")
        ]
    except RecursionError:
        return None, [
            finding("error", None, "yaml-syntax", "frontmatter YAML is nested too deeply")
        ]
    if node is None:
        return None, [
            finding(
                "error",
                None,
                "yaml-not-mapping",
                "the frontmatter is empty: it needs at least name and description",
            )
        ]
    if not isinstance(node, yaml.MappingNode):
        value = node.value if isinstance(node, yaml.ScalarNode) else "[...]"
        what = "a list" if isinstance(node, yaml.SequenceNode) else "a scalar"
        return None, [
            finding(
                "error",
                None,
                "yaml-not-mapping",
                f"the frontmatter must be a YAML mapping of fields (name: ..., description: ...),"
                f" got {what} {show(value)}",
            )
        ]
    builder = _Builder()
    try:
        data = builder.build(node, None, _line(node))
    except _TooDeep:
        return None, builder.errors
    except RecursionError:
        return None, [
            finding("error", None, "yaml-syntax", "frontmatter YAML is nested too deeply")
        ]
    if builder.errors:
        return None, builder.errors
    return data, builder.warnings


#: A top-level `key: value` line whose plain value holds ': ' (or ends with ':'), which YAML
#: reads as a nested mapping: `description: Use this skill when: ...`. Real collections
#: write it often.
_COLON_VALUE = re.compile(r"([A-Za-z0-9_-]+):[ \t]+([^\s\"'|>\[{&*!%@`#].*?:(?: .*)?)")


def _quote_colon_values(source: str) -> tuple[str, list[Finding]]:
    """`source` with each such value double-quoted, and an error finding for each: the Agent
    Skills client guide's fallback, so the skill loads while operators see what to fix
    (docs/validation.md). The value is read as YAML reads a plain scalar: its indented
    continuation lines joined by spaces, a ` #` comment left out. Only unindented lines are
    rewritten (they cannot be inside a block scalar), and no line moves."""
    lines = source.split("\n")
    findings = []
    for i, line in enumerate(lines):
        match = _COLON_VALUE.fullmatch(line.rstrip())
        if match is None:
            continue
        end = i
        while end + 1 < len(lines) and lines[end + 1][:1] == " " and lines[end + 1].strip():
            end += 1
        key, value = match.groups()
        parts = [value, *(lines[j].strip() for j in range(i + 1, end + 1))]
        text = " ".join(part.split(" #", 1)[0].strip() for part in parts)
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        lines[i] = f'{key}: "{escaped}"'
        for j in range(i + 1, end + 1):  # now inside the quotes; blank, so no line moves
            lines[j] = ""
        findings.append(
            finding(
                "error",
                key,
                "yaml-unquoted-colon",
                f"frontmatter YAML on line {i + 1} (field {show(key)}): the value holds ': '"
                " without quotes, which YAML reads as a nested mapping and other agents skip"
                f' the skill; it was read as if quoted: write {key}: "..."',
            )
        )
    return "\n".join(lines), findings


class _TooDeep(Exception):
    """Raised once the frontmatter is deeper than MAX_DEPTH; the finding is already recorded."""


class _Builder:
    """Composed YAML nodes to plain dicts, lists and strings, refusing what strictyaml refuses
    (aliases, explicit tags, duplicate or non-string keys). Flow style is only warned about."""

    def __init__(self) -> None:
        self.errors: list[Finding] = []
        self.warnings: list[Finding] = []
        self._seen: set[int] = set()
        self._flow: set[str | None] = set()

    def build(self, node: yaml.Node, field: str | None, line: int, depth: int = 1) -> Any:
        """`line` is the file line where `node` is referenced (for an alias: the alias's key)."""
        if depth > MAX_DEPTH:
            self._error(
                field,
                line,
                "yaml-depth",
                f"the frontmatter nests deeper than {MAX_DEPTH} levels: flatten it",
            )
            raise _TooDeep
        if id(node) in self._seen:  # the composer hands an alias back as the anchored node
            self._error(
                field, line, "yaml-alias", "anchors and aliases (&name, *name) are not allowed"
            )
            return None
        self._seen.add(id(node))
        if node.tag not in (_STR, _SEQ, _MAP):
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            self._error(field, line, "yaml-tag", f"explicit YAML tags ({tag}) are not allowed")
        if isinstance(node, yaml.ScalarNode):
            return node.value
        if isinstance(node, yaml.CollectionNode) and node.flow_style and field not in self._flow:
            self._flow.add(field)
            where = f"field {show(field)}" if field else "the frontmatter"
            self.warnings.append(
                finding(
                    "warning",
                    field,
                    "yaml-flow-style",
                    f"{where} uses flow-style YAML ([...] or {{...}}) on line {_line(node)};"
                    " skills-ref and strict YAML readers reject it: use block style",
                )
            )
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, field, _line(item), depth + 1) for item in node.value]
        result: dict[str, Any] = {}
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            at = _line(key_node)
            if not isinstance(key_node, yaml.ScalarNode):
                self._error(
                    field, at, "yaml-key", "keys must be plain strings, not lists or mappings"
                )
                continue
            key = key_node.value
            if key in lines:
                problem = f"key {show(key)} appears twice (lines {lines[key]} and {at})"
                self._error(field or key, at, "yaml-duplicate-key", problem)
            lines[key] = at
            result[key] = self.build(value_node, field or key, at, depth + 1)
        return result

    def _error(self, field: str | None, line: int, rule: str, problem: str) -> None:
        where = f" (field {show(field)})" if field else ""
        message = f"frontmatter YAML on line {line}{where}: {problem}"
        self.errors.append(finding("error", field, rule, message))


def _line(node: yaml.Node) -> int:
    """The 1-based SKILL.md line of a node (the YAML source starts on line 1, after '---')."""
    return int(node.start_mark.line) + 1


def inspect_skill(
    directory: str, files: Mapping[str, bytes], profiles: Profiles = SPEC
) -> Inspection:
    """The readings of the skill directory `directory` holding `files` (relative path ->
    bytes), and all its findings under the host `profiles` accepted.

    The frontmatter comes back even when it breaks the spec: the worker view is lenient.
    Only SKILL.md is read, so `files` may be a lazy mapping.
    """
    if SKILL_MD not in files:
        near = sorted(p for p in files if "/" not in p and p.lower() == SKILL_MD.lower())
        hint = f" (found {show(near[0])}: rename it to SKILL.md)" if near else ""
        missing = f"skill directory {show(directory)} has no SKILL.md{hint}"
        return Inspection(None, [finding("error", None, "skill-md-missing", missing)], None)
    doc = parse_skill_md(files[SKILL_MD])
    findings = list(doc.findings)
    if doc.frontmatter is not None:
        findings += check_frontmatter(doc.frontmatter, directory, profiles)
    if len(findings) > MAX_FINDINGS:
        left = len(findings) - MAX_FINDINGS + 1
        worst: Literal["error", "warning"] = (
            "error" if any(f.severity == "error" for f in findings) else "warning"
        )
        findings = [
            *findings[: MAX_FINDINGS - 1],
            finding(worst, None, "more-findings", f"and {left} more findings like these"),
        ]
    return Inspection(doc.frontmatter, findings, doc.typed)
