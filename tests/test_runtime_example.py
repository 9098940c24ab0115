"""examples/react_loop.py runs end to end and picks up another process's edit between steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_react_loop_example_sees_the_edit_of_another_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "react_loop.py"),
         "--store", f"sqlite:///{tmp_path / 'skills.db'}"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(steps) == 5
    assert "Error: skill 'code-reviewer' has no file 'references/check-list.md'" in out
    assert "[another process] published code-reviewer v2" in out
    # steps 1-3 share one snapshot token, the edit gives steps 4-5 a new one
    tokens = [line.split()[3] for line in steps]
    assert tokens[0] == tokens[1] == tokens[2] != tokens[3] == tokens[4]
    answer = next(line for line in out.splitlines() if line.startswith("answer: "))
    assert answer.endswith("Feature flags: new behaviour ships behind a flag that defaults to off.")
    assert "1. Correctness; 2. Security" in answer
    assert "usage: {('alice', 'code-reviewer'): 3}" in out
