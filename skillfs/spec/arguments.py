"""`$ARGUMENTS` in a skill's body, substituted as Claude Code documents it
(code.claude.com/docs/en/skills, "Pass arguments to skills" and "Available string
substitutions"; docs/runtime.md, "Invoking a skill"):

- `$ARGUMENTS` is the arguments exactly as the user typed them;
- `$ARGUMENTS[N]` and its shorthand `$N` are the N-th argument (from 0), the arguments split
  as a shell splits words (quotes group: `"my widget" React` is two arguments);
- `$name` is the argument at the position of `name` in the frontmatter's `arguments`;
- a positional or named placeholder with no argument at its position stays as written;
- when the body holds no placeholder at all and arguments were given, `ARGUMENTS: <value>`
  is appended, so the model still sees what the user typed.

Shell preprocessing (`` !`cmd` ``, which Claude Code runs on the user's machine before the
model reads the skill) is never run: skillfs serves skills to many users from a shared store,
and running a command a skill's author wrote, on a server or in a worker, would hand every
author a shell there. The text stays in the body as written.

One pass over the body: a value that itself holds `$1` or `$ARGUMENTS` is not substituted
again.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from skillfs.errors import InvalidArgument


def split(raw: str) -> list[str]:
    """The arguments as a shell splits words; an unbalanced quote falls back to splitting at
    whitespace (as Claude Code does)."""
    try:
        return shlex.split(raw)
    except ValueError:
        return raw.split()


def _pattern(names: Sequence[str]) -> re.Pattern[str]:
    named = sorted(names, key=len, reverse=True)  # `$old-name` before `$old`
    parts = [r"\$ARGUMENTS\[(?P<index>\d+)\]", r"\$ARGUMENTS(?!\w)", r"\$(?P<digit>\d+)(?!\w)"]
    if named:
        parts.append(r"\$(?P<name>" + "|".join(map(re.escape, named)) + r")(?![\[\w])")
    return re.compile("|".join(parts))


def substitute(body: str, raw: str, names: Sequence[str] = ()) -> str:
    """`body` with the placeholders replaced by the arguments `raw` (as typed)."""
    words = split(raw)
    position = {n: i for i, n in enumerate(names)}

    def value(m: re.Match[str]) -> str:
        g = m.groupdict()
        if g.get("name") is not None:
            at = position[g["name"]]
        elif g["index"] is not None or g["digit"] is not None:
            at = int(g["index"] or g["digit"])
        else:
            return raw
        return words[at] if at < len(words) else m.group(0)

    pattern = _pattern(names)
    if pattern.search(body) is None:
        return f"{body}\n\nARGUMENTS: {raw}" if raw.strip() else body
    return pattern.sub(value, body)


#: The one argument of a skill that names none: the whole line, as typed.
ARGUMENTS = "arguments"


def line_of(names: Sequence[str], values: Mapping[str, str]) -> str:
    """The arguments as a user would type them, from named values (an MCP host's form).
    Without `names`, the one value `arguments` is the line. With them, each value is
    shell-quoted, in the order of `names`; a name left out before one given is an empty
    argument (`''`), so later ones keep their positions. InvalidArgument names the declared
    arguments when `values` holds another, or a value that is not a string."""
    declared = tuple(names) or (ARGUMENTS,)
    unknown = [k for k in values if k not in declared]
    if unknown:
        raise InvalidArgument(
            f"unknown argument {unknown[0]!r}: this skill takes {', '.join(declared)}"
        )
    wrong = [k for k, v in values.items() if not isinstance(v, str)]
    if wrong:
        raise InvalidArgument(f"argument {wrong[0]!r} must be a string")
    if not names:
        return values.get(ARGUMENTS, "")
    given = [i for i, n in enumerate(names) if n in values]
    last = given[-1] + 1 if given else 0
    return shlex.join(values.get(n, "") for n in names[:last])
