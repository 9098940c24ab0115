"""A warning skillfs logs during a CLI run is one `warning:` line on stderr, said once (outside
testing, Python printed it bare, once per read)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli_helpers import process, publish
from tests.helpers import skill_md


def test_a_logged_warning_is_one_prefixed_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    publish(url, "shared:bot", "odd", {"SKILL.md": skill_md("odd")})
    with sqlite3.connect(db) as c:  # a manifest stored unreadable (a version that is no number)
        (body,) = c.execute("select body from manifests where skill = 'odd'").fetchone()
        c.execute("update manifests set body = ? where skill = 'odd'",
                  (json.dumps({**json.loads(body), "version": "x"}),))  # fmt: skip
    for args in (("ls", "--scope", "shared:bot"), ("history", "odd", "--scope", "shared:bot")):
        result = process(*args, "--store", url)
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines() == [
            "warning: the stored manifest of odd (version 0) is unreadable: Input should be a "
            "valid integer, unable to parse string as an integer"
        ], args
