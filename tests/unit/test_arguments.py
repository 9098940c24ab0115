"""`$ARGUMENTS` substitution, each of Claude Code's documented rules
(code.claude.com/docs/en/skills, "Pass arguments to skills"), and the invocation fields read
from a frontmatter (spec/arguments.py, spec/invocation.py)."""

from __future__ import annotations

import pytest

from skillfs.errors import InvalidArgument
from skillfs.spec.arguments import line_of, split, substitute
from skillfs.spec.invocation import DEFAULT, Invocation, invocation
from skillfs.spec.skill_md import parse_skill_md


def test_arguments_is_the_line_exactly_as_typed() -> None:
    assert substitute("Fix $ARGUMENTS now.", '  "my widget"  React ') == (
        'Fix   "my widget"  React  now.'
    )


def test_indexed_and_short_positionals_split_shell_style() -> None:
    body = "$ARGUMENTS[0] | $ARGUMENTS[1] | $0 | $1 | $2"
    assert substitute(body, "\"my widget\" 'Re act' Vue") == (
        "my widget | Re act | my widget | Re act | Vue"
    )


def test_a_missing_positional_stays_as_written() -> None:
    body = "$0 then $3 and $ARGUMENTS[5], $10"
    assert substitute(body, "a b") == "a then $3 and $ARGUMENTS[5], $10"
    assert substitute(body, "") == body  # no arguments at all: nothing to put there


def test_arguments_are_appended_when_the_body_has_no_placeholder() -> None:
    assert substitute("Deploy it.", "staging --dry-run") == (
        "Deploy it.\n\nARGUMENTS: staging --dry-run"
    )
    assert substitute("Deploy it.", "") == "Deploy it."  # nothing given, nothing appended
    # a placeholder with no argument at its place still counts: nothing is appended
    assert substitute("Deploy $2.", "staging") == "Deploy $2."


def test_named_arguments_map_to_positions() -> None:
    names = ["old-name", "old", "scope"]
    body = "Rename $old-name ($old) in $scope; $ARGUMENTS; $unknown; $old[x]"
    assert substitute(body, "MyClass MyService", names) == (
        "Rename MyClass (MyService) in $scope; MyClass MyService; $unknown; $old[x]"
    )


def test_one_pass_values_are_not_substituted_again() -> None:
    assert substitute("$0 / $1", "$1 '$ARGUMENTS'") == "$1 / $ARGUMENTS"


def test_shell_preprocessing_is_never_run() -> None:
    body = "Status: !`rm -rf ~` and $0"
    assert substitute(body, "x") == "Status: !`rm -rf ~` and x"


def test_an_unbalanced_quote_splits_at_whitespace() -> None:
    assert split('"unclosed word') == ['"unclosed', "word"]


def test_named_values_become_a_line() -> None:
    assert line_of(["a", "b", "c"], {"b": "x y"}) == "'' 'x y'"  # positions kept
    assert split(line_of(["a", "b"], {"a": "it's", "b": "$1"})) == ["it's", "$1"]
    assert line_of([], {"arguments": '"my widget" React'}) == '"my widget" React'
    assert line_of([], {}) == ""
    with pytest.raises(InvalidArgument, match="unknown argument 'z': this skill takes a, b"):
        line_of(["a", "b"], {"z": "1"})
    with pytest.raises(InvalidArgument, match="takes arguments"):
        line_of([], {"issue": "1"})


def test_invocation_fields_from_the_textual_reading() -> None:
    doc = parse_skill_md(
        b"---\nname: x\ndescription: d\ndisable-model-invocation: true\n"
        b"user-invocable: False\nargument-hint: [issue-number]\narguments: issue 0 branch\n"
        b"---\nbody\n"
    )
    assert invocation(doc.frontmatter or {}) == Invocation(
        model=False, user=False, argument_hint="[issue-number]", argument_names=("issue", "branch")
    )
    assert invocation({"name": "x"}) is DEFAULT
    # only YAML 1.2's spellings of a boolean count; anything else keeps the default
    assert invocation({"disable-model-invocation": "yes", "user-invocable": "no"}) == DEFAULT
    assert invocation({"disable-model-invocation": True, "user-invocable": False}).model is False
    assert invocation({"arguments": ["a", "a", "two words", 3]}).argument_names == ("a",)
