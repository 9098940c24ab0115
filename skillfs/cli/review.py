"""`skillfs review-rule`: a scope's two-person rule (docs/governance.md, "The two-person
rule"), shown, turned on or off (`store.review`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Protocol

import typer

from skillfs.cli.common import (
    EDIT,
    JsonOption,
    MessageOption,
    ScopeOption,
    StoreOption,
    TokenOption,
    command,
    emit_json,
    iso,
    opened,
    out,
    shown,
    when,
)
from skillfs.governance.review import ReviewRule
from skillfs.model.ops import WriteOptions


class Changed(Protocol):
    """A scope setting as last changed (ReviewRule, ProfilesSetting; version 0: never)."""

    @property
    def version(self) -> int: ...
    @property
    def actor(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def changed_at(self) -> float: ...


def last_change(setting: Changed) -> dict[str, Any]:
    """The `--json` fields of a setting's last change."""
    return {
        "version": setting.version,
        "actor": setting.actor,
        "message": setting.message,
        "changed_at": iso(setting.changed_at) if setting.version else None,
    }


def changed_by(head: str, setting: Changed, verb: str) -> str:
    """`head`, then who changed the setting last, when and why (nothing when never set)."""
    if not setting.version:
        return head
    why = f": {shown(setting.message)}" if setting.message else ""
    return f"{head}; {verb} by {shown(setting.actor)} at {when(setting.changed_at)}{why}"


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
