"""How `skillfs --help` reads: metavars people type, not Python types.

Typer shows each parameter's Python type (`<Target>`, `<bool>`, `<int range> [x>=1]`) and
braces around required arguments (`{SKILL/PATH}`). Every `skillfs` command is built with
`Command` (the app with `Group`), whose parameters show their metavar only (`SKILL/PATH`,
`--version N`, no type for flags), and whose help paragraphs are re-flowed, so a docstring's
line breaks do not survive into an 80-column terminal.
"""

from __future__ import annotations

import inspect
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # the name column already shows the metavar

    def _rich_display_name(self) -> str:
        return self.display_name_raw + ("..." if self.nargs != 1 else "")

    def _usage_display_name(self) -> str:
        name = self._rich_display_name()
        return name if self.required else f"[{name}]"


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag:
            return None
        return self.metavar or (self.name or "value").upper()

    def _get_number_range_help_str(self) -> str | None:
        return None  # the help text says the range in words


def tidy(params: list[Any]) -> list[Any]:
    """The same parameters, shown the way this module describes."""
    for p in params:
        if type(p) is TyperArgument:
            p.__class__ = _Argument
        elif type(p) is TyperOption:
            p.__class__ = _Option
    return params


def reflow(text: str | None) -> str | None:
    """Paragraphs as single lines: the terminal wraps them."""
    if not text:
        return text
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))


class _Tidied:
    """What `Command` and `Group` add to Typer's: re-flowed help, tidied parameters."""

    help: str | None
    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = reflow(self.help)
        tidy(self.params)

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        return tidy([option])[0] if option is not None else None


class Command(_Tidied, TyperCommand):
    pass


class Group(_Tidied, TyperGroup):
    pass
