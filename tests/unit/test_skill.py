"""The skill model against the reference validator (skills-ref), edge case by edge case.

Each case states our verdict and the exact error rules we report; the oracle test then checks
that skills-ref reaches the same verdict, except for the deliberate differences listed in
DELIBERATE (docs/validation.md explains each), where it checks that the two still differ.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import skills_ref
from hypothesis import given, settings
from hypothesis import strategies as st

from skillfs.model import Finding
from skillfs.spec.skill_dirs import find_skill_dirs, validate_dir
from skillfs.spec.skill_md import SkillDoc, inspect_skill, parse_skill_md

DESC = "Does one useful thing. Use when a test needs a valid skill."


def md(*frontmatter_lines: str, body: str = "# Title\n\nInstructions.\n") -> bytes:
    """A SKILL.md from frontmatter lines (LF, UTF-8)."""
    return (
        "---\n" + "".join(f"{line}\n" for line in frontmatter_lines) + "---\n\n" + body
    ).encode()


def ok(*extra: str, name: str = "my-skill", body: str = "# Title\n\nInstructions.\n") -> bytes:
    return md(f"name: {name}", f"description: {DESC}", *extra, body=body)


@dataclass(frozen=True)
class Case:
    id: str
    skill_md: bytes | None  # None: the directory has no SKILL.md
    valid: bool  # our verdict
    errors: frozenset[str] = frozenset()  # exactly the error rules we report
    warnings: frozenset[str] = frozenset()  # warning rules we must report (at least these)
    directory: str = "my-skill"
    extra: Mapping[str, bytes] = field(default_factory=dict)


def case(
    id: str,
    skill_md: bytes | None,
    valid: bool,
    errors: set[str] | None = None,
    warnings: set[str] | None = None,
    directory: str = "my-skill",
    extra: Mapping[str, bytes] | None = None,
) -> Case:
    assert valid == (not errors), f"{id}: a case is valid exactly when it expects no error"
    return Case(
        id,
        skill_md,
        valid,
        frozenset(errors or ()),
        frozenset(warnings or ()),
        directory,
        dict(extra or {}),
    )


PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + bytes(range(256))
NFC_CAFE = unicodedata.normalize("NFC", "café")
NFD_CAFE = unicodedata.normalize("NFD", "café")

CASES = [
    # --- valid skills, in the shapes real collections have
    case("minimal", ok(), True),
    case(
        "all-fields",
        ok(
            "license: Apache-2.0",
            "compatibility: Needs git and Python 3.11",
            "allowed-tools: Bash(git:*) Read",
            "metadata:",
            "  author: someone",
            '  version: "1.0"',
        ),
        True,
    ),
    case("crlf", ok().replace(b"\n", b"\r\n"), True),
    case("cr-only", ok().replace(b"\n", b"\r"), True),
    case(
        "no-final-newline",
        b"---\nname: my-skill\ndescription: " + DESC.encode() + b"\n---",
        True,
        warnings={"no-body"},
    ),
    case("delimiter-trailing-space", ok().replace(b"---\n", b"--- \n"), True),
    case(
        "block-literal", md("name: my-skill", "description: |", "  Line one.", "  Line two."), True
    ),
    case("block-folded", md("name: my-skill", "description: >-", "  Folded", "  text."), True),
    case(
        "non-ascii-text",
        md("name: my-skill", "description: Résumé helper — 日本語も 🚀. Use when asked."),
        True,
    ),
    case("unicode-name", ok(name=NFC_CAFE), True, directory=NFC_CAFE),
    case("cjk-name", ok(name="数据分析"), True, directory="数据分析"),
    case("nfd-directory", ok(name=NFC_CAFE), True, directory=NFD_CAFE),
    case("name-digits", ok(name="2024"), True, directory="2024"),
    case("name-yes-is-a-string", ok(name="yes"), True, directory="yes"),
    case(
        "name-whitespace",
        md('name: " my-skill "', f"description: {DESC}"),
        True,
        warnings={"whitespace"},
    ),
    case("name-64", ok(name="a" * 64), True, directory="a" * 64),
    case("description-1024", md("name: my-skill", "description: " + "d" * 1024), True),
    case("compatibility-500", ok("compatibility: " + "c" * 500), True),
    case("compatibility-empty", ok('compatibility: ""'), True, warnings={"empty"}),
    case("metadata-typed-scalars", ok("metadata:", "  version: 1.10", "  date: 2024-01-05"), True),
    case("metadata-not-mapping", ok("metadata: just text"), True, warnings={"type"}),
    case(
        "metadata-nested",
        ok("metadata:", "  owner:", "    team: infra"),
        True,
        warnings={"value-type"},
    ),
    case(
        "allowed-tools-block-list",
        ok("allowed-tools:", "  - Read", "  - Grep"),
        True,
        warnings={"type"},
    ),
    case("license-mapping", ok("license:", "  spdx: MIT"), True, warnings={"type"}),
    case("body-over-500-lines", ok(body="line\n" * 520), True, warnings={"too-long"}),
    case("no-body", ok(body=""), True, warnings={"no-body"}),
    case(
        "binary-files-beside",
        ok(),
        True,
        extra={"assets/logo.png": PNG, "scripts/tool.bin": bytes(range(256)) * 4},
    ),
    case(
        "nested-directories",
        ok(),
        True,
        extra={
            "references/api/v1/endpoints.md": b"# Endpoints\n",
            "a/b/c/d/e.txt": b"deep\n",
            ".DS_Store": b"\x00\x00\x00\x01Bud1",
        },
    ),
    # --- deliberate differences (see DELIBERATE)
    case("bom", b"\xef\xbb\xbf" + ok(), True, warnings={"bom"}),
    case(
        "flow-sequence",
        ok("allowed-tools: [Read, Grep]"),
        True,
        warnings={"yaml-flow-style", "type"},
    ),
    case("flow-mapping", ok("metadata: {author: someone}"), True, warnings={"yaml-flow-style"}),
    case(
        "triple-dash-in-value", md("name: my-skill", 'description: "Use A --- B when asked"'), True
    ),
    case("lowercase-skill-md", None, False, {"skill-md-missing"}, extra={"skill.md": ok()}),
    # --- the file and its frontmatter block
    case("missing-skill-md", None, False, {"skill-md-missing"}, extra={"README.md": b"# hi\n"}),
    case("empty-file", b"", False, {"empty"}),
    case("whitespace-only", b" \n\n\t\n", False, {"empty"}),
    case("no-frontmatter", b"# My skill\n\nJust markdown.\n", False, {"frontmatter-missing"}),
    case("blank-line-before-frontmatter", b"\n" + ok(), False, {"frontmatter-missing"}),
    case("four-dash-opener", b"-" + ok(), False, {"frontmatter-missing"}),
    case(
        "unterminated",
        b"---\nname: my-skill\ndescription: x\n\n# Body\n",
        False,
        {"frontmatter-unclosed"},
    ),
    case(
        "non-utf8-latin1",
        ok().replace(b"Does", "Dés".encode("latin-1")),
        False,
        {"encoding"},
    ),
    case("utf16", ok().decode().encode("utf-16"), False, {"encoding"}),
    # --- YAML
    case("empty-frontmatter", b"---\n---\n# Body\n", False, {"yaml-not-mapping"}),
    case(
        "comment-only-frontmatter",
        b"---\n# nothing here\n---\n# Body\n",
        False,
        {"yaml-not-mapping"},
    ),
    case(
        "yaml-list", md("- name: my-skill", f"- description: {DESC}"), False, {"yaml-not-mapping"}
    ),
    case("yaml-scalar", md("just some text"), False, {"yaml-not-mapping"}),
    case("yaml-bad-indent", md("name: my-skill", "  description: x"), False, {"yaml-syntax"}),
    case("yaml-unclosed-quote", md("name: my-skill", 'description: "oops'), False, {"yaml-syntax"}),
    case("yaml-tab", md("name:\tmy-skill", f"description: {DESC}"), False, {"yaml-syntax"}),
    case(
        "yaml-unquoted-colon",
        md("name: my-skill", "description: Use this skill when: the user asks for a review"),
        False,
        {"yaml-unquoted-colon"},
    ),
    case(
        "yaml-control-char", md("name: my-skill", "description: bell \x07"), False, {"yaml-syntax"}
    ),
    case("yaml-duplicate-key", ok("name: my-skill"), False, {"yaml-duplicate-key"}),
    case(
        "yaml-alias",
        md("name: my-skill", "description: &d Text", "license: *d"),
        False,
        {"yaml-alias"},
    ),
    case("yaml-tag", ok("metadata:", "  count: !!int 3"), False, {"yaml-tag"}),
    case("yaml-python-tag", ok("license: !!python/object/apply:os.getcwd []"), False, {"yaml-tag"}),
    case("yaml-complex-key", ok("? - a", ": b"), False, {"yaml-key"}),
    # --- name
    case("name-missing", md(f"description: {DESC}"), False, {"required"}),
    case("name-empty", md('name: ""', f"description: {DESC}"), False, {"empty"}),
    case("name-list", md("name:", "  - my-skill", f"description: {DESC}"), False, {"type"}),
    case("name-uppercase", ok(name="My-Skill"), False, {"characters"}, directory="My-Skill"),
    case("name-unicode-uppercase", ok(name="Café"), False, {"characters"}, directory="Café"),
    case("name-underscore", ok(name="my_skill"), False, {"characters"}, directory="my_skill"),
    case("name-space", ok(name="my skill"), False, {"characters"}, directory="my skill"),
    case("name-dot", ok(name="my.skill"), False, {"characters"}, directory="my.skill"),
    case(
        "name-leading-hyphen", ok(name="-my-skill"), False, {"hyphen-edge"}, directory="-my-skill"
    ),
    case(
        "name-trailing-hyphen", ok(name="my-skill-"), False, {"hyphen-edge"}, directory="my-skill-"
    ),
    case(
        "name-double-hyphen", ok(name="my--skill"), False, {"hyphen-double"}, directory="my--skill"
    ),
    case("name-65", ok(name="a" * 65), False, {"max-length"}, directory="a" * 65),
    case("name-not-directory", ok(name="other-skill"), False, {"directory-match"}),
    case("name-null-is-a-string", ok(name="null"), False, {"directory-match"}),
    # --- description
    case("description-missing", md("name: my-skill"), False, {"required"}),
    case("description-empty", md("name: my-skill", 'description: ""'), False, {"empty"}),
    case("description-no-value", md("name: my-skill", "description:"), False, {"empty"}),
    case("description-blank", md("name: my-skill", 'description: "   "'), False, {"empty"}),
    case(
        "description-mapping", md("name: my-skill", "description:", "  en: Hello"), False, {"type"}
    ),
    case(
        "description-1025",
        md("name: my-skill", "description: " + "d" * 1025),
        False,
        {"max-length"},
    ),
    case(
        "description-block-newline-counts",
        md("name: my-skill", "description: |", "  " + "d" * 1024),
        False,
        {"max-length"},
    ),
    # --- compatibility and other fields
    case("compatibility-501", ok("compatibility: " + "c" * 501), False, {"max-length"}),
    case("compatibility-list", ok("compatibility:", "  - linux"), False, {"type"}),
    case("unknown-field", ok("version: 1.0"), False, {"unknown-field"}),
    case(
        "unknown-fields-claude-code",
        ok("disable-model-invocation: true", "model: sonnet"),
        False,
        {"unknown-field"},
    ),
]

# Where we differ from skills-ref on purpose. Each entry: the reason (docs/validation.md).
DELIBERATE = {
    "bom": "editors on Windows add a BOM; it is invisible and harmless, so we drop it and warn"
    " (skills-ref reads the BOM as text before '---' and rejects the file)",
    "flow-sequence": "flow style is valid YAML that PyYAML reads; we warn that strictyaml-based"
    " tools (skills-ref) reject it",
    "flow-mapping": "as flow-sequence",
    "triple-dash-in-value": "the frontmatter ends at a line that is exactly '---'; skills-ref"
    " splits at the first '---' anywhere, even inside a quoted value",
    "lowercase-skill-md": "the store, the runtime and load_skill_through_path address SKILL.md by"
    " its exact name; skills-ref also accepts skill.md",
}

# skills-ref raises instead of returning a list here (we count that as "invalid").
SKILLS_REF_RAISES = {
    "non-utf8-latin1": UnicodeDecodeError,
    "utf16": UnicodeDecodeError,
    "yaml-complex-key": AssertionError,
    "yaml-control-char": AttributeError,
}


def write_case(root: Path, c: Case) -> Path:
    skill = root / c.directory
    skill.mkdir(parents=True)
    files = dict(c.extra)
    if c.skill_md is not None:
        files["SKILL.md"] = c.skill_md
    for rel, data in files.items():
        (skill / rel).parent.mkdir(parents=True, exist_ok=True)
        (skill / rel).write_bytes(data)
    return skill


def skills_ref_verdict(path: Path) -> tuple[bool, type[BaseException] | None]:
    """(valid, the exception skills-ref raised or None)."""
    try:
        return skills_ref.validate(path) == [], None
    except Exception as exc:  # skills-ref crashes on some inputs: that is "not valid" too
        return False, type(exc)


def test_the_table_is_big_and_its_names_are_unique() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
    assert set(DELIBERATE) <= {c.id for c in CASES}
    assert set(SKILLS_REF_RAISES) <= {c.id for c in CASES}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_edge_case(c: Case, tmp_path: Path) -> None:
    skill = write_case(tmp_path, c)

    report = validate_dir(skill)
    files = {
        p.relative_to(skill).as_posix(): p.read_bytes() for p in skill.rglob("*") if p.is_file()
    }
    findings = inspect_skill(c.directory, files).findings
    errors = {f.rule for f in findings if f.severity == "error"}
    warnings = {f.rule for f in findings if f.severity == "warning"}
    assert report.valid is c.valid, report
    assert errors == c.errors, [f.message for f in findings]
    assert c.warnings <= warnings, [f.message for f in findings]
    assert len(report.errors) == sum(f.severity == "error" for f in findings)

    theirs, raised = skills_ref_verdict(skill)
    assert raised is SKILLS_REF_RAISES.get(c.id)
    if c.id in DELIBERATE:
        assert theirs is not c.valid, f"{c.id} is listed as a deliberate difference, but now agrees"
    else:
        assert theirs is c.valid, f"skills-ref says valid={theirs}, we say {c.valid}: {report}"


# ----------------------------------------------------------------------------- parse_skill_md


def rules(doc: SkillDoc | list[Finding]) -> set[str]:
    findings = doc.findings if isinstance(doc, SkillDoc) else doc
    return {f.rule for f in findings}


def test_parse_splits_frontmatter_and_body() -> None:
    doc = parse_skill_md(ok(body="# Title\n\nStep 1.\n"))
    assert doc.frontmatter == {"name": "my-skill", "description": DESC}
    assert doc.body == "# Title\n\nStep 1.\n"
    assert doc.findings == []


def test_parse_normalizes_crlf_and_drops_the_bom() -> None:
    doc = parse_skill_md(b"\xef\xbb\xbf" + ok(body="a\nb\n").replace(b"\n", b"\r\n"))
    assert doc.frontmatter == {"name": "my-skill", "description": DESC}
    assert doc.body == "a\nb\n"
    assert rules(doc) == {"bom"}
    assert doc.findings[0].severity == "warning"


def test_scalars_stay_strings_as_written_and_serialize_to_json() -> None:
    doc = parse_skill_md(
        ok("metadata:", "  version: 1.10", "  released: 2024-01-05", "  stable: yes", "  n: 007")
    )
    assert doc.frontmatter is not None
    assert doc.frontmatter["metadata"] == {
        "version": "1.10",
        "released": "2024-01-05",
        "stable": "yes",
        "n": "007",
    }
    assert json.loads(json.dumps(doc.frontmatter)) == doc.frontmatter


def test_yaml_is_never_executed(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    doc = parse_skill_md(ok(f'license: !!python/object/apply:os.mkdir ["{target}"]'))
    assert not target.exists()
    assert doc.frontmatter is None
    assert rules(doc) == {"yaml-tag"}
    assert "!!python/object/apply:os.mkdir" in doc.findings[0].message


def test_alias_bombs_are_refused_without_expanding() -> None:
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [
        f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]"
        for p, k in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    doc = parse_skill_md(md(*lines))
    assert doc.frontmatter is None
    assert "yaml-alias" in rules(doc)


def test_yaml_syntax_error_names_the_file_line() -> None:
    doc = parse_skill_md(b"---\nname: my-skill\ndescription: x\n  license: MIT\n---\n")
    assert doc.frontmatter is None
    [f] = doc.findings
    assert (f.severity, f.rule) == ("error", "yaml-syntax")
    assert "line 4" in f.message


UNQUOTED = [
    # the issue's example
    (
        md("name: my-skill", "description: Use this skill when: the user asks for a review"),
        "Use this skill when: the user asks for a review",
    ),
    # as real collections write it: a colon late, quotes and a backslash inside, a continuation
    # line, a comment, then more fields
    (
        md(
            "name: my-skill",
            'description: Set up gbrain for this agent: install the "CLI", C:\\ paths,',
            "  register MCP. (gstack)  # generated",
            "license: MIT",
            "metadata:",
            "  triggers: setup",
        ),
        'Set up gbrain for this agent: install the "CLI", C:\\ paths, register MCP. (gstack)',
    ),
    (md("name: my-skill", "description: Use when:"), "Use when:"),
]


@pytest.mark.parametrize("skill_md, description", UNQUOTED)
def test_an_unquoted_colon_is_read_as_if_quoted_and_reported(
    skill_md: bytes, description: str
) -> None:
    """The Agent Skills client guide's fallback: the skill loads (a worker shows it) while
    operators see an error finding saying how to fix it (docs/validation.md)."""
    doc = parse_skill_md(skill_md)
    assert doc.frontmatter is not None and doc.frontmatter["description"] == description
    assert doc.frontmatter["name"] == "my-skill"
    [f] = [f for f in doc.findings if f.severity == "error"]
    assert (f.rule, f.field) == ("yaml-unquoted-colon", "description")
    assert f.message.startswith("frontmatter YAML on line 3 (field 'description'): the value")
    assert 'write description: "..."' in f.message


def test_an_unquoted_colon_keeps_later_line_numbers() -> None:
    doc = parse_skill_md(md("name: my-skill", "description: a: b", "  more", "name: again"))
    assert doc.frontmatter is None  # the duplicate key is still an error, on its own line
    assert any("lines 2 and 5" in f.message for f in doc.findings), doc.findings


def test_an_unquoted_colon_in_a_block_scalar_is_left_alone() -> None:
    doc = parse_skill_md(md("name: my-skill", "description: |", "  Use when: x", "bad: [1"))
    assert doc.frontmatter is None and rules(doc) == {"yaml-syntax"}


def test_duplicate_key_names_the_key_and_both_lines() -> None:
    [f] = parse_skill_md(md("name: a", "description: b", "name: c")).findings
    assert (f.rule, f.field) == ("yaml-duplicate-key", "name")
    assert "'name'" in f.message and "lines 2 and 4" in f.message


def test_not_a_mapping_says_what_it_got() -> None:
    [f] = parse_skill_md(md("- name", "- description")).findings
    assert f.rule == "yaml-not-mapping" and "a list" in f.message
    [f] = parse_skill_md(md("hello")).findings
    assert "a scalar 'hello'" in f.message


def test_missing_frontmatter_quotes_line_one_and_keeps_the_body() -> None:
    doc = parse_skill_md(b"# My Skill\n\nDo things.\n")
    assert doc.frontmatter is None
    assert doc.body == "# My Skill\n\nDo things.\n"
    [f] = doc.findings
    assert f.rule == "frontmatter-missing" and "'# My Skill'" in f.message


def test_non_utf8_names_the_byte_and_offset() -> None:
    [f] = parse_skill_md(b"---\nname: caf\xe9\n").findings
    assert f.rule == "encoding"
    assert "0xe9" in f.message and "offset 13" in f.message


def test_flow_style_warning_names_field_and_line() -> None:
    doc = parse_skill_md(ok("allowed-tools: [Read, Grep]"))
    assert doc.frontmatter is not None
    assert doc.frontmatter["allowed-tools"] == ["Read", "Grep"]
    [f] = doc.findings
    assert (f.severity, f.rule, f.field) == ("warning", "yaml-flow-style", "allowed-tools")
    assert "line 4" in f.message


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_parse_never_raises_on_bytes(data: bytes) -> None:
    doc = parse_skill_md(data)
    json.dumps(doc.frontmatter)
    assert all(f.message for f in doc.findings)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab:- \n\t'\"[]{}&*!#|>?,%@`\\\r\ufeffé")), max_size=120)
)
def test_parse_never_raises_on_yamlish_text(text: str) -> None:
    doc = parse_skill_md(("---\n" + text + "\n---\nbody\n").encode())
    json.dumps(doc.frontmatter)
    if doc.frontmatter is None:
        assert any(f.severity == "error" for f in doc.findings)


# ------------------------------------------------------------------------------ inspect_skill


def inspect(skill_md: bytes, directory: str = "my-skill") -> list[Finding]:
    return inspect_skill(directory, {"SKILL.md": skill_md}).findings


def test_message_names_field_rule_and_value() -> None:
    [chars, match] = inspect(ok(name="Code_Reviewer"), "code-reviewer")
    assert chars.message.startswith(
        "name 'Code_Reviewer' must use only lowercase letters, digits and hyphens"
    )
    assert "'C', 'R', '_'" in chars.message
    assert (chars.field, chars.rule, chars.severity) == ("name", "characters", "error")
    assert match.message == (
        "name 'Code_Reviewer' must equal the skill's directory name 'code-reviewer'"
    )


@pytest.mark.parametrize(
    ("skill_md", "expected"),
    [
        (ok(name="my--skill"), "name 'my--skill' must not contain consecutive hyphens '--'"),
        (ok(name="-x"), "name '-x' must not start or end with a hyphen"),
        (md(f"description: {DESC}"), "name is missing from the frontmatter"),
        (md("name: my-skill", "description:"), "description must not be empty, got ''"),
        (md("name: my-skill", "description:", "  - a"), "description must be a string, got a list"),
        (ok("compatibility:", "  - x"), "compatibility must be a string, got a list"),
        (ok("tags: x"), "field 'tags' is not an Agent Skills field"),
        (ok("metadata: text"), "metadata should be a mapping of string keys to string values"),
        (ok("allowed-tools:", "  - Read"), "allowed-tools should be a space-delimited string"),
    ],
)
def test_messages(skill_md: bytes, expected: str) -> None:
    messages = [f.message for f in inspect(skill_md)]
    assert any(m.startswith(expected) for m in messages), messages


def test_long_values_are_truncated_in_messages() -> None:
    [f] = inspect(md("name: my-skill", "description: " + "x" * 5000))
    assert f.message.startswith("description is 5000 characters, over the 1024 allowed: 'xxx")
    assert f.message.endswith("...'")
    assert len(f.message) < 150
    [f] = inspect(ok(name="n" * 300), "n" * 300)
    assert len(f.message) < 150 and "300 characters" in f.message


def test_frontmatter_comes_back_even_with_errors() -> None:
    frontmatter, findings, _ = inspect_skill("x", {"SKILL.md": ok("extra: 1", name="Bad_Name")})
    assert frontmatter == {"name": "Bad_Name", "description": DESC, "extra": "1"}
    assert {f.rule for f in findings} == {"characters", "directory-match", "unknown-field"}


def test_missing_skill_md_names_the_directory_and_a_near_miss() -> None:
    frontmatter, [f], _ = inspect_skill("tool", {"skill.md": ok(), "README.md": b""})
    assert frontmatter is None
    assert (
        f.message
        == "skill directory 'tool' has no SKILL.md (found 'skill.md': rename it to SKILL.md)"
    )
    _, [f], _ = inspect_skill("tool", {"docs/skill.md": b""})
    assert f.message == "skill directory 'tool' has no SKILL.md"


class OnlySkillMd(Mapping[str, bytes]):
    """Fails the test if anything but SKILL.md is read."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def __getitem__(self, key: str) -> bytes:
        assert key == "SKILL.md", f"inspect_skill read {key}"
        return self.files[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


def test_inspect_reads_only_skill_md() -> None:
    files = OnlySkillMd({"SKILL.md": ok(), "assets/big.bin": b"\0" * 10})
    frontmatter, findings, _ = inspect_skill("my-skill", files)
    assert (frontmatter, findings) == ({"name": "my-skill", "description": DESC}, [])


# ------------------------------------------------------------ validate_dir, find_skill_dirs


def make_skill(path: Path, name: str | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "SKILL.md").write_bytes(ok(name=name or path.name))
    return path


def test_validate_dir_reports_name_and_messages(tmp_path: Path) -> None:
    skill = tmp_path / "my-skill"
    skill.mkdir()
    (skill / "SKILL.md").write_bytes(ok("license:", "  a: b", name="Other"))
    report = validate_dir(skill)
    assert report.path == str(skill)
    assert report.name == "Other"
    assert report.valid is False
    assert report.errors == [
        "name 'Other' must use only lowercase letters, digits and hyphens (found 'O')",
        "name 'Other' must equal the skill's directory name 'my-skill'",
    ]
    assert report.warnings == [
        "license should be a string such as 'Apache-2.0' or 'LICENSE.txt',"
        ' got a mapping \'{"a": "b"}\''
    ]


def test_validate_dir_on_dot_uses_the_real_directory_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(make_skill(tmp_path / "my-skill"))
    report = validate_dir(Path("."))
    assert report.valid, report
    assert report.path == "."


def test_validate_dir_on_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    report = validate_dir(tmp_path / "notes.txt")
    assert not report.valid and report.name is None
    assert "is not a directory" in report.errors[0]


def test_find_skill_dirs_one_skill(tmp_path: Path) -> None:
    skill = make_skill(tmp_path / "my-skill")
    make_skill(skill / "examples" / "inner")  # a skill's own sub-directories are its files
    assert find_skill_dirs(skill) == [skill]
    assert find_skill_dirs(skill / "SKILL.md") == [skill]


def test_find_skill_dirs_collection(tmp_path: Path) -> None:
    a = make_skill(tmp_path / "team" / "a")
    b = make_skill(tmp_path / "team" / "nested" / "b")
    c = make_skill(tmp_path / "c")
    make_skill(tmp_path / "_drafts" / "d")
    make_skill(tmp_path / ".archive" / "e")
    make_skill(tmp_path / "team" / "__pycache__" / "f")
    (tmp_path / "README.md").write_text("a collection")
    assert find_skill_dirs(tmp_path) == [c, a, b]


def test_find_skill_dirs_reports_directories_that_are_neither(tmp_path: Path) -> None:
    a = make_skill(tmp_path / "a")
    broken = tmp_path / "broken"
    (broken / "references").mkdir(parents=True)
    (broken / "skill.md").write_bytes(ok(name="broken"))
    assert find_skill_dirs(tmp_path) == [a, broken]
    assert "rename it to SKILL.md" in validate_dir(broken).errors[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert find_skill_dirs(empty) == [empty]
    assert validate_dir(empty).errors == ["skill directory 'empty' has no SKILL.md"]


def test_find_skill_dirs_survives_symlink_loops(tmp_path: Path) -> None:
    a = make_skill(tmp_path / "group" / "a")
    os.symlink(tmp_path / "group", tmp_path / "group" / "loop")
    os.symlink(a, tmp_path / "alias-of-a")
    assert find_skill_dirs(tmp_path) == [a]


def test_find_skill_dirs_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        find_skill_dirs(tmp_path / "nope")
