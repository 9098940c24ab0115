"""`skillfs run` (what `make run` starts): a server on the local SQLite store with the example
skills, printing the gRPC address, the console URL and a working admin token."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import skillfs
from skillfs.model import Scope
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (REPO / "examples" / "skills").iterdir() if p.is_dir())


def start(home: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("SKILLFS_STORE", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from skillfs.cli import main; main()", "run",
         "--grpc", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )  # fmt: skip
    assert proc.stdout is not None
    printed: dict[str, str] = {}
    deadline = time.monotonic() + 60
    lines = []
    while "admin token" not in printed and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.match(r"(store|examples|gRPC|console|admin token)\s{2,}(.*)", line):
            printed[m[1]] = m[2].strip()
    assert "admin token" in printed, "".join(lines)
    printed["output"] = "".join(lines)
    return proc, printed


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(20)


def test_run_serves_the_examples_with_an_admin_token(tmp_path: Path) -> None:
    proc, printed = start(tmp_path)
    try:
        for name in EXAMPLES:  # validated first
            assert f"✓ {name}" in printed["output"]
        assert f"{len(EXAMPLES)} skill directories: {len(EXAMPLES)} valid" in printed["output"]
        assert printed["store"].startswith("sqlite:///") and str(tmp_path) in printed["store"]
        assert "imported" in printed["examples"]
        token = printed["admin token"].split()[0]
        store = skillfs.open_store(printed["gRPC"], token=token)
        assert store.skills(Scope.shared("example-agent")) == EXAMPLES
        console = urllib.request.urlopen(printed["console"], timeout=5).read().decode()
        assert "Sign in" in console  # the admin console, signed out
        status = urllib.request.urlopen(printed["console"] + "status", timeout=5).read().decode()
        assert "skillfs server" in status and "answering" in status
    finally:
        assert stop(proc) == 0
    tokens = tmp_path / ".local" / "share" / "skillfs" / "tokens.json"
    assert oct(tokens.stat().st_mode & 0o777) == "0o600"
    # a second run finds the examples and the token it made
    proc, again = start(tmp_path)
    try:
        assert again["examples"].endswith("already there")
        assert again["admin token"].split()[0] == token
    finally:
        assert stop(proc) == 0
