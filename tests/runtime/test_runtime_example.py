"""examples/react_loop.py runs end to end and picks up another process's edit between steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_governed_rollout_example_logs_who_saw_which_version(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """examples/governed_rollout.py: the agent's draft (after correcting the YAML the tool
    refused), approved as a 10 % canary, widened, promoted; the users it logs at each step
    are exactly those the rollout's stable buckets put in."""
    from skillfs import Scope
    from skillfs.governance.rollout_rule import bucket
    from tests.stores import url_for

    url = url_for(request, engine, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "governed_rollout.py"), "--store", url],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    proposals = [line for line in out.splitlines() if "propose_skill(refund-policy)" in line]
    assert proposals[0].endswith('write description: "..."') and "Error:" in proposals[0]
    assert '"status": "draft"' in proposals[1] and '"draft": "_drafts/refund-policy"' in out
    assert "the agent still sees old (a draft is in no view)" in out
    assert "by agent:support-bot/alice in user:support-bot/alice" in out

    def on_new(step: str) -> set[str]:
        line = next(x for x in out.splitlines() if x.startswith(f"[{step}] "))
        names = line.split("(", 1)[1].split(")", 1)[0]
        return set(names.split()) if names not in ("nobody", "everyone") else set()

    users = {f"u{i:02d}" for i in range(1, 51)}
    shared = Scope.shared("support-bot")
    share = {f: {u for u in users if bucket(shared, "refund-policy", u) < f} for f in (0.1, 0.5)}
    assert on_new("proposed") == set()
    assert on_new("canary 10 %") == share[0.1] and 0 < len(share[0.1]) < 10
    assert on_new("widened to 50 %") == share[0.5] > share[0.1]
    assert "[promoted] new version: 50 of 50 users (everyone); old version: 0" in out
    audit = [line.split()[3] for line in out.splitlines() if line.startswith("audit: ")]
    assert audit == ["publish", "approve", "widen", "promote"]
