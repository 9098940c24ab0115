"""The Agent Skills spec rules on a parsed frontmatter mapping, as findings.

Errors are exactly what the reference validator (`skills-ref`) rejects, so the two agree on
valid/invalid; warnings flag what is usable but off-spec. docs/validation.md lists every rule.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from skillfs.model import Finding
from skillfs.spec.profiles import Profiles

MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
KNOWN_FIELDS = ("name", "description", "license", "allowed-tools", "metadata", "compatibility")
SPEC = Profiles()


def finding(
    severity: Literal["error", "warning"], field: str | None, rule: str, message: str
) -> Finding:
    return Finding(severity=severity, field=field, rule=rule, message=message)


def show(value: object, limit: int = 48) -> str:
    """A value quoted for a message, cut so that a 5 KB description keeps the message readable."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def kind(value: object) -> str:
    """How YAML would call the value's type, for 'must be a string, got a list'."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def suggest_name(raw: str) -> str | None:
    """The valid skill name closest to `raw` (`Refund Policy` -> `refund-policy`): accents
    dropped, lowercase, every run of other characters one hyphen, at most MAX_NAME
    characters. None when nothing of `raw` is left; `raw` itself when it is valid."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", raw))
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    out: list[str] = []
    for c in text:
        if c.isalnum() and c == c.lower():  # what _check_name accepts
            out.append(c)
        elif out and out[-1] != "-":
            out.append("-")
    name = "".join(out).strip("-")[:MAX_NAME].rstrip("-")
    return name or None


def check_frontmatter(
    frontmatter: Mapping[str, Any], directory: str, profiles: Profiles = SPEC
) -> list[Finding]:
    """Every spec finding about the frontmatter of the skill stored in `directory`, under the
    host profiles accepted (skillfs.spec.profiles; `spec` alone by default)."""
    known = (*KNOWN_FIELDS, *sorted(profiles.fields))
    findings = [_unknown(key, known) for key in frontmatter if key not in known]
    findings += _check_name(frontmatter, directory, profiles.name_characters)
    findings += _check_description(frontmatter)
    findings += _check_compatibility(frontmatter)
    findings += _check_optional(frontmatter)
    return findings


def _unknown(key: str, known: Sequence[str]) -> Finding:
    hosts = SPEC.hosts_of(key)
    fix = (
        f"it is {hosts[0].host}'s: validate with --profile {hosts[0].name} (or accept that "
        f"profile in the scope: skillfs profiles --set {hosts[0].name}), or move it under "
        "metadata"
        if hosts
        else "move it under metadata"
    )
    return finding(
        "error",
        key,
        "unknown-field",
        f"field {show(key)} is not an Agent Skills field (allowed: {', '.join(known)}): {fix}",
    )


def _required_string(
    frontmatter: Mapping[str, Any], field: str
) -> tuple[str | None, list[Finding]]:
    """The field's value when it is a non-blank string, else the finding that says why not."""
    if field not in frontmatter:
        return None, [
            finding("error", field, "required", f"{field} is missing from the frontmatter")
        ]
    value = frontmatter[field]
    if not isinstance(value, str):
        return None, [
            finding(
                "error", field, "type", f"{field} must be a string, got {kind(value)} {show(value)}"
            )
        ]
    if not value.strip():
        return None, [
            finding("error", field, "empty", f"{field} must not be empty, got {show(value)}")
        ]
    return value, []


def _check_name(frontmatter: Mapping[str, Any], directory: str, extra: str) -> list[Finding]:
    """As skills-ref does: NFKC-normalized and stripped; Unicode lowercase letters allowed,
    and the `extra` characters a host profile allows."""
    raw, findings = _required_string(frontmatter, "name")
    if raw is None:
        return findings
    if raw != raw.strip():
        findings.append(
            finding("warning", "name", "whitespace", f"name {show(raw)} has surrounding whitespace")
        )
    name = unicodedata.normalize("NFKC", raw.strip())
    if len(name) > MAX_NAME:
        findings.append(
            finding(
                "error",
                "name",
                "max-length",
                f"name {show(name)} is {len(name)} characters, over the {MAX_NAME} allowed",
            )
        )
    bad = sorted({c for c in name if not (c.isalnum() or c == "-" or c in extra) or c != c.lower()})
    if bad:
        findings.append(
            finding(
                "error",
                "name",
                "characters",
                f"name {show(name)} must use only lowercase letters, digits and hyphens"
                f" (found {', '.join(repr(c) for c in bad[:8])})",
            )
        )
    if name.startswith("-") or name.endswith("-"):
        findings.append(
            finding(
                "error",
                "name",
                "hyphen-edge",
                f"name {show(name)} must not start or end with a hyphen",
            )
        )
    if "--" in name:
        findings.append(
            finding(
                "error",
                "name",
                "hyphen-double",
                f"name {show(name)} must not contain consecutive hyphens '--'",
            )
        )
    if unicodedata.normalize("NFKC", directory) != name:
        findings.append(
            finding(
                "error",
                "name",
                "directory-match",
                f"name {show(name)} must equal the skill's directory name {show(directory)}",
            )
        )
    return findings


def _check_description(frontmatter: Mapping[str, Any]) -> list[Finding]:
    description, findings = _required_string(frontmatter, "description")
    if description is not None and len(description) > MAX_DESCRIPTION:
        findings.append(
            finding(
                "error",
                "description",
                "max-length",
                f"description is {len(description)} characters, over the {MAX_DESCRIPTION} allowed:"
                f" {show(description)}",
            )
        )
    return findings


def _check_compatibility(frontmatter: Mapping[str, Any]) -> list[Finding]:
    if "compatibility" not in frontmatter:
        return []
    value = frontmatter["compatibility"]
    if not isinstance(value, str):
        return [
            finding(
                "error",
                "compatibility",
                "type",
                f"compatibility must be a string, got {kind(value)} {show(value)}",
            )
        ]
    if len(value) > MAX_COMPATIBILITY:
        return [
            finding(
                "error",
                "compatibility",
                "max-length",
                f"compatibility is {len(value)} characters, over the {MAX_COMPATIBILITY} allowed:"
                f" {show(value)}",
            )
        ]
    if not value.strip():
        # The spec says 1-500 characters; skills-ref accepts an empty one, so only warn.
        return [
            finding(
                "warning",
                "compatibility",
                "empty",
                "compatibility is empty: omit the field instead",
            )
        ]
    return []


def _check_optional(frontmatter: Mapping[str, Any]) -> list[Finding]:
    """Shapes the spec describes but skills-ref does not enforce: warnings, never errors."""
    findings: list[Finding] = []
    for field, shape in (
        ("license", "a string such as 'Apache-2.0' or 'LICENSE.txt'"),
        ("allowed-tools", "a space-delimited string such as 'Bash(git:*) Read'"),
    ):
        if field in frontmatter and not isinstance(frontmatter[field], str):
            value = frontmatter[field]
            findings.append(
                finding(
                    "warning",
                    field,
                    "type",
                    f"{field} should be {shape}, got {kind(value)} {show(value)}",
                )
            )
    if "metadata" not in frontmatter:
        return findings
    metadata = frontmatter["metadata"]
    if not isinstance(metadata, Mapping):
        findings.append(
            finding(
                "warning",
                "metadata",
                "type",
                f"metadata should be a mapping of string keys to string values,"
                f" got {kind(metadata)} {show(metadata)}",
            )
        )
        return findings
    for key, value in metadata.items():
        if not isinstance(value, str):
            findings.append(
                finding(
                    "warning",
                    "metadata",
                    "value-type",
                    f"metadata value {show(key)} should be a string,"
                    f" got {kind(value)} {show(value)}",
                )
            )
    return findings
