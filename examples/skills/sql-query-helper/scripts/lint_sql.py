#!/usr/bin/env python3
"""Flag common SQL mistakes. A heuristic reading of the text, not a parser.

usage: lint_sql.py [FILE.sql ...]     (reads stdin when no file is given)

Exit status: 0 when nothing was found, 1 when something was, 2 on a usage error.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHECKS = [
    (
        re.compile(r"\b(UPDATE|DELETE)\b(?![^;]*\bWHERE\b)[^;]*", re.I | re.S),
        "UPDATE/DELETE without WHERE changes every row of the table",
    ),
    (
        re.compile(r"\bSELECT\s+(\w+\.)?\*", re.I),
        "SELECT * returns columns you may not need and breaks when the table changes",
    ),
    (
        re.compile(r"\bNOT\s+IN\s*\(\s*SELECT\b", re.I),
        "NOT IN (SELECT ...) yields no rows if the subquery returns a NULL: use NOT EXISTS",
    ),
    (re.compile(r"\bLIKE\s+'%", re.I), "LIKE with a leading wildcard cannot use a B-tree index"),
    (
        re.compile(r"'(?:%s|%\(\w+\)s|\{\w*\})'|\"\s*\+\s*\w+"),
        "a value seems to be formatted into the SQL: use bound parameters",
    ),
]


def strip_comments(sql: str) -> str:
    sql = re.sub(r"/\*.*?\*/", " ", sql, flags=re.S)
    return re.sub(r"--[^\n]*", " ", sql)


def lint(sql: str) -> list[tuple[int, str]]:
    """(line, message) for each finding, in order."""
    text = strip_comments(sql)
    found = []
    for pattern, message in CHECKS:
        for m in pattern.finditer(text):
            found.append((text.count("\n", 0, m.start()) + 1, message))
    return sorted(found)


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__.strip())
        return 0
    try:
        sources = [(a, Path(a).read_text(encoding="utf-8")) for a in argv[1:]]
    except OSError as exc:
        print(f"lint_sql: {exc}", file=sys.stderr)
        return 2
    sources = sources or [("-", sys.stdin.read())]
    problems = 0
    for name, sql in sources:
        for line, message in lint(sql):
            print(f"{name}:{line}: {message}")
            problems += 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
