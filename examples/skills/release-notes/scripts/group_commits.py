#!/usr/bin/env python3
"""Print the commits between two Git refs grouped by Conventional Commit type.

usage: group_commits.py FROM [TO]     (TO defaults to HEAD)

Breaking changes (`feat!: ...` or a `BREAKING CHANGE:` footer) are listed first.
Commits that do not follow the convention are listed under "other".
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

TITLES = {
    "feat": "Features",
    "fix": "Fixes",
    "perf": "Performance",
    "docs": "Documentation",
    "refactor": "Refactoring (usually not for release notes)",
    "test": "Tests (not for release notes)",
    "build": "Build (not for release notes)",
    "ci": "CI (not for release notes)",
    "chore": "Chores (not for release notes)",
    "other": "Other commits",
}
SUBJECT = re.compile(r"^(?P<type>[a-z]+)(?:\((?P<scope>[^)]*)\))?(?P<bang>!)?: (?P<text>.+)$")
SEP = "\x1e"  # record separator between commits


def commits(start: str, end: str) -> list[tuple[str, str, str]]:
    """(short hash, subject, body) of each commit in start..end, oldest first."""
    out = subprocess.run(
        ["git", "log", "--reverse", f"--format=%h%x1f%s%x1f%b{SEP}", f"{start}..{end}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = []
    for record in out.split(SEP):
        if record.strip():
            sha, subject, body = record.strip("\n").split("\x1f", 2)
            result.append((sha, subject, body))
    return result


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    start, end = argv[1], argv[2] if len(argv) == 3 else "HEAD"
    try:
        found = commits(start, end)
    except subprocess.CalledProcessError as exc:
        reason = exc.stderr.strip().splitlines()[0] if exc.stderr.strip() else exc
        print(f"group_commits: git log {start}..{end} failed: {reason}", file=sys.stderr)
        return 2
    groups: dict[str, list[str]] = defaultdict(list)
    breaking: list[str] = []
    for sha, subject, body in found:
        m = SUBJECT.match(subject)
        kind = m["type"] if m and m["type"] in TITLES else "other"
        text = m["text"] if m and kind != "other" else subject
        if m and m["scope"]:
            text = f"{m['scope']}: {text}"
        line = f"- {text} ({sha})"
        if (m and m["bang"]) or "BREAKING CHANGE:" in body:
            breaking.append(line)
        groups[kind].append(line)
    print(f"{len(found)} commits in {start}..{end}")
    if breaking:
        print("\n## BREAKING CHANGES")
        print("\n".join(breaking))
    for kind, title in TITLES.items():
        if groups[kind]:
            print(f"\n## {title}")
            print("\n".join(groups[kind]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
