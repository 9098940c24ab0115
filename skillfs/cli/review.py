"""`skillfs review-rule`: a scope's two-person rule (docs/governance.md, "The two-person
rule"), shown, turned on or off (`store.review`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from skillfs.cli.common import (
    EDIT,
    JsonOption,
    MessageOption,
    ScopeOption,
    StoreOption,
    TokenOption,
    changed_by,
    command,
    emit_json,
    last_change,
    opened,
    out,
)
from skillfs.governance.review import ReviewRule
from skillfs.model.ops import WriteOptions


class Switch(StrEnum):
    ON = "on"
    OFF = "off"


@command("review-rule", EDIT)
def review_rule(
    scope: ScopeOption,
    switch: Annotated[
        Switch | None,
        typer.Argument(
            metavar="[on|off]",
            show_default=False,
            help="on: every live change of the scope goes through a draft another person "
            "approves; off: writes are live again. Without it: show the rule.",
        ),
    ] = None,
    message: MessageOption = "",
    store_url: StoreOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show or change a scope's two-person rule: under it, a write that serves new files to
    workers (edit, import, rollback, stage, rename, a new skill) is refused, and the change
    is proposed as a draft that an actor other than its author approves; disable, enable,
    abort and delete stay immediate. Changing it needs an admin grant on the scope (over
    grpc://) and is a version the audit lists."""
    with opened(store_url, token) as store:
        if switch is not None:
            options = WriteOptions(message=message)
            if switch is Switch.ON:
                store.review.require(scope, options=options)
            else:
                store.review.lift(scope, options=options)
        rule = store.review.rule(scope)
    if as_json:
        emit_json({"scope": str(scope), "required": rule.required, **last_change(rule)})
    else:
        out.print(said(rule))


def said(rule: ReviewRule) -> str:
    """The rule in words, with who changed it last, when and why."""
    if rule.required:
        head = (
            f"{rule.scope} requires review: every live change goes through a draft another "
            "person approves (the two-person rule)"
        )
    else:
        head = f"{rule.scope} does not require review: writes are live at once"
    return changed_by(head, rule, "set")
