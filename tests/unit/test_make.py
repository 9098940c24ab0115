"""The README's commands: `make run` installs the runtime only, `make check` and `make test`
add the dev tools; `make check` starts no server, `make test` installs the missing ones and
runs every test, in one lane or the other."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def planned(target: str, venv: Path) -> str:
    """What `make TARGET` would run on a machine without a venv (`make -n`, nothing runs)."""
    return subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_make_run_installs_the_runtime_without_dev_tools(tmp_path: Path) -> None:
    plan = planned("run", tmp_path / "venv")
    assert "pip install -q -e .\n" in plan and "[dev]" not in plan
    assert "the first run takes about a minute" in plan
    assert plan.rstrip().endswith("bin/skillfs run")


def test_make_test_adds_the_dev_tools(tmp_path: Path) -> None:
    plan = planned("test", tmp_path / "venv")
    assert "pip install -q -e .\n" in plan and "pip install -q -e '.[dev]'" in plan
    assert "pytest" in plan
    assert "apt-get" in plan  # the Debian servers, when missing
    assert '-m "not serial"' in plan and "-m serial" in plan  # every test, in one lane or other
    assert "ruff check . && " in plan and "mypy skillfs;" in plan  # lint, in the side lane


def test_make_check_lints_and_runs_the_fast_tiers_without_servers(tmp_path: Path) -> None:
    plan = planned("check", tmp_path / "venv")
    assert "pip install -q -e '.[dev]'" in plan
    assert "ruff check . && " in plan and "mypy skillfs\n" in plan
    assert plan.rstrip().endswith(" -q --no-servers tests/unit tests/store tests/governance")
    assert "apt-get" not in plan
