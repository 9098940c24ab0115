"""docs/fsspec.md's first example runs as a newcomer would run it: pasted into a fresh
process in an empty directory, with skillfs installed and nothing else (no extra, no server).
Outside testing it needed the `upath` extra and a Redis the reader did not have."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "fsspec.md"


def test_the_first_example_runs_in_an_empty_directory(tmp_path: Path) -> None:
    first = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert first is not None
    code = first.group(1) + "\nprint(fs.ls('skills', detail=False), text.splitlines()[1])\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['skills/code-reviewer'] name: code-reviewer\n"
    assert (tmp_path / "notes" / "todo.md").read_bytes() == b"..."
    assert "upath" not in first.group(1)
