"""Spec findings as the console shows them: of a skill's stored SKILL.md as the current rules
see it, of an edit in progress, and with the SKILL.md line each is about.

Writes are not checked here: `Store.commit(..., strict=)` refuses an off-spec skill
(docs/design.md §7) and the pages show the findings it refused with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from skillfs.api import Store
from skillfs.console.diff import as_text
from skillfs.model import File, FileEntry, Finding, Manifest, Scope
from skillfs.model.names import entry_name
from skillfs.spec.profiles import Profiles
from skillfs.spec.skill_md import SKILL_MD, inspect_skill


@dataclass(frozen=True)
class ShownFinding:
    """A finding as the editor shows it: with the SKILL.md line it is about, when known."""

    severity: str
    rule: str
    message: str
    line: int | None


def shown(findings: list[Finding], text: str | None) -> list[ShownFinding]:
    """Findings as the pages list them: errors first, then warnings, each in the order found."""
    ordered = sorted(findings, key=lambda f: f.severity != "error")
    return [
        ShownFinding(f.severity, f.rule, f.message, finding_line(f, text) if text else None)
        for f in ordered
    ]


_LINE = re.compile(r"\bline (\d+)")


def finding_line(f: Finding, text: str) -> int | None:
    """The SKILL.md line a finding points at: named in its message, or its field's line."""
    m = _LINE.search(f.message)
    if m:
        return int(m.group(1))
    if f.rule in ("frontmatter-missing", "frontmatter-unclosed", "empty", "bom"):
        return 1
    if f.field:
        lines = text.split("\n")
        for i, line in enumerate(lines[1:], start=2):
            if line.strip() == "---":
                break
            if re.match(rf"{re.escape(f.field)}\s*:", line):
                return i
        return 1
    return None


def findings_of(
    store: Store,
    scope: Scope,
    skill: str,
    files: Mapping[str, File | FileEntry],
    *,
    profiles: Profiles | None = None,
) -> list[Finding]:
    """The spec findings the skill would have with `files` in `scope`, under the host
    profiles the scope accepts (`store.host_profiles`; `profiles`: as read already, for
    several skills of one scope), as its commit makes them: new files, or stored ones kept
    by reference. Only SKILL.md is read."""
    md = files.get(SKILL_MD)
    texts = dict.fromkeys(files, b"")
    if md is not None:
        texts[SKILL_MD] = md.data if isinstance(md, File) else store.read_entry(md)
    if profiles is None:
        profiles = store.host_profiles.of(scope)
    return inspect_skill(skill, texts, profiles).findings


def stored_findings(store: Store, scope: Scope, m: Manifest) -> list[Finding]:
    """A version's findings as the current rules see them; a draft's or an archived skill's
    SKILL.md is checked against the skill it holds (`_drafts/<name>` holds `<name>`)."""
    return findings_of(store, scope, entry_name(m.skill), m.files)


def skill_md_text(store: Store, m: Manifest) -> str | None:
    md = m.files.get(SKILL_MD)
    return as_text(store.read_entry(md)) if md else None
