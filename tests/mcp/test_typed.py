"""The typed reading of the frontmatter (docs/validation.md, "Two readings"), checked against
FastMCP's own skills server on the same folders: every skill FastMCP serves, skillfs serves
with the same frontmatter (numbers, booleans, lists typed), every skill it refuses skillfs
leaves out of `skills/list` with the reason, and FastMCP's client verifies every listed
skill's frontmatter against its own reading of SKILL.md (`read_skill`). The one intended
difference: a scalar YAML 1.1 and 1.2 read apart (`yes`, `0777`, `1e3`), which FastMCP serves
as YAML 1.1 reads it and a YAML 1.2 host would refuse."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client as FastClient
from fastmcp import FastMCP
from fastmcp.client.transports import StdioTransport
from fastmcp.skills import SkillsClientExtension
from fastmcp.skills.provider import SkillsDirectoryProvider
from mcp.shared.exceptions import MCPError

import skillfs
from skillfs.spec.skill_md import parse_skill_md
from tests.mcp_helpers import AGENT, corpus_skills, files_of, stdio_command

ALICE = skillfs.Scope.user(AGENT, "alice")
TYPED = (
    "version: 2.0\ndisable-model-invocation: false\nuser-invocable: true\ncount: 3\n"
    "nothing: ~\nmetadata:\n  version: 1.0\n  author: me\nallowed-tools:\n  - Read\n  - Bash\n"
)
#: Frontmatter lines after name and description, by folder name.
CASES = {
    "typed-values": TYPED,
    "quoted": 'version: "2.0"\nupdated: "2025-10-20"\nflag: "yes"\n',
    "dated": "updated: 2025-10-20\n",
    "stamped": "updated: 2025-10-20 10:00:00\n",
    "not-a-number": "score: .nan\n",
    "infinite": "metadata:\n  score: -.inf\n",
    "yes-no": "approved: yes\n",
    "octal": "mode: 0777\n",
    "exponent": "limit: 1e3\n",
    "on-key": "on: push\n",
    "value-tag": "x: =\n",
    "null-metadata": "metadata:\n",
    "block-text": "notes: |\n  two\n  lines\n",
}
#: What FastMCP serves and skillfs leaves out, on purpose.
AMBIGUOUS = {"yes-no", "octal", "exponent"}


def skill_md(name: str, extra: str) -> bytes:
    return f"---\nname: {name}\ndescription: Does {name}.\n{extra}---\nBody.\n".encode()


def case_files() -> dict[str, dict[str, bytes]]:
    out = {name: {"SKILL.md": skill_md(name, extra)} for name, extra in CASES.items()}
    for name, text in {
        "crlf": b"---\r\nname: crlf\r\ndescription: CR LF.\r\n---\r\nB\r\n",
        "bom": b"\xef\xbb\xbf---\nname: bom\ndescription: Starts with a BOM.\n---\nB\n",
        "fence-blank": b"--- \nname: fence-blank\ndescription: A blank after.\n---\nB\n",
        "colon": b"---\nname: colon\ndescription: Use when: asked\n---\nB\n",
    }.items():
        out[name] = {"SKILL.md": text}
    for name, directory in corpus_skills().items():
        out[name] = files_of(directory)
    return out


def fastmcp_verdicts(root: Path, skills: dict[str, dict[str, bytes]]) -> dict[str, Any]:
    """FastMCP's server on each folder alone: the frontmatter it lists, or None (refused)."""
    verdicts: dict[str, Any] = {}
    for name, files in skills.items():
        folder = root / name / name
        for path, data in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(data)
        try:
            verdicts[name] = SkillsDirectoryProvider(folder.parent)
        except ValueError:
            verdicts[name] = None
    served = [p for p in verdicts.values() if p is not None]
    listed: dict[str, Any] = {}

    async def main() -> None:
        server = FastMCP("reference", providers=served)
        async with FastClient(server, extensions=[SkillsClientExtension()]) as client:
            for skill in await client.list_skills():
                listed[skill.frontmatter.name] = skill.frontmatter.root

    anyio.run(main)
    return {name: listed[name] if p is not None else None for name, p in verdicts.items()}


@pytest.mark.slow
def test_skillfs_serves_what_fastmcp_serves_typed_and_refuses_what_it_refuses(
    tmp_path: Path,
) -> None:
    skills = case_files()
    reference = fastmcp_verdicts(tmp_path / "folders", skills)
    url = f"sqlite:///{tmp_path}/skills.db"
    store = skillfs.open_store(url)
    for name, files in skills.items():
        store.publish(ALICE, name, files)
    command, args, env = stdio_command(url)
    listed: dict[str, Any] = {}
    refused: dict[str, str] = {}

    async def main() -> None:
        transport = StdioTransport(command, args, env=env)
        async with FastClient(transport, extensions=[SkillsClientExtension()]) as client:
            for skill in await client.list_skills():
                listed[skill.frontmatter.name] = skill.frontmatter.root
                await client.read_skill(skill.uri)  # FastMCP verifies the frontmatter
            for name in skills.keys() - listed.keys():
                with pytest.raises(MCPError) as caught:
                    await client.get_skill(f"skill://{name}/SKILL.md")
                refused[name] = caught.value.error.message

    anyio.run(main)
    for name, theirs in reference.items():
        if name in AMBIGUOUS:
            assert theirs is not None and name in refused, name
            assert "YAML 1.2 readers" in refused[name]
        elif theirs is None:
            assert name in refused, f"FastMCP refuses {name}, skillfs lists it"
        else:
            assert listed.get(name) == theirs, name
    assert listed["typed-values"]["version"] == 2.0
    assert listed["typed-values"]["disable-model-invocation"] is False
    assert listed["typed-values"]["metadata"] == {"version": 1.0, "author": "me"}
    assert "a YAML date" in refused["dated"] and "not finite" in refused["infinite"]
    assert "not text" in refused["on-key"] and "lines of exactly '---'" in refused["fence-blank"]
    assert len(listed) >= len(corpus_skills()) - 1  # claude-api: a description over 1,024


def test_the_textual_reading_and_the_verdicts_do_not_change() -> None:
    """Validation and the prompt read every scalar as text, as before; the typed reading's
    problems are warnings, so no skill's verdict changes (skills-ref agrees on validity)."""
    for name, extra in CASES.items():
        doc = parse_skill_md(skill_md(name, extra))
        assert doc.frontmatter is not None
        assert all(isinstance(v, str | dict | list) for v in doc.frontmatter.values() if v)
        assert not [f for f in doc.findings if f.severity == "error"], name
    doc = parse_skill_md(skill_md("t", TYPED))
    assert doc.frontmatter is not None and doc.frontmatter["version"] == "2.0"
    assert doc.typed is not None and doc.typed.frontmatter is not None
    assert doc.typed.frontmatter["count"] == 3 and doc.typed.frontmatter["nothing"] is None
    rules = {
        name: [f.rule for f in parse_skill_md(files["SKILL.md"]).findings if "typed-" in f.rule]
        for name, files in case_files().items()
        if name in CASES or name == "fence-blank"
    }
    assert rules["dated"] == ["typed-json"] and rules["octal"] == ["typed-ambiguous"]
    assert rules["on-key"] == ["typed-key"] and rules["value-tag"] == ["typed-unreadable"]
    assert rules["fence-blank"] == ["typed-fence"] and rules["typed-values"] == []


def test_a_manifest_stored_before_the_typed_reading_gets_it_on_first_serve(
    tmp_path: Path,
) -> None:
    """A manifest stored by 0.1 has no `typed` (here: the stored JSON with it taken out):
    the snapshot reads SKILL.md for it, in one batch, and keeps the reading by digest."""
    path = tmp_path / "skills.db"
    store = skillfs.open_store(f"sqlite:///{path}")
    names = ("typed-values", "dated")
    for name in names:
        store.publish(ALICE, name, case_files()[name])
    store.close()
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT skill, body FROM manifests WHERE skill IN (?, ?)", names)
        for skill, body in rows.fetchall():
            doc = json.loads(body)
            assert doc.pop("typed")
            db.execute("UPDATE manifests SET body = ? WHERE skill = ?", (json.dumps(doc), skill))
    store = skillfs.open_store(f"sqlite:///{path}")
    assert store.manifest(ALICE, "dated").typed is None
    with skillfs.Skills(store, AGENT, "alice") as skills:
        typed = skills.snapshot().typed()
    fm = typed["typed-values"].frontmatter
    assert fm is not None and fm["version"] == 2.0 and fm["user-invocable"] is True
    assert "a YAML date" in typed["dated"].refused
