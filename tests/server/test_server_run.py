"""`skillfs run` (what `make run` starts): a server on the local SQLite store with the example
skills, printing the gRPC address, the console URL and a working admin token."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import skillfs
from skillfs.auth import tokens_document
from skillfs.model import Scope
from support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (REPO / "examples" / "skills").iterdir() if p.is_dir())


def _path_without_skillfs() -> str:
    """$PATH without the directories that hold a `skillfs` (an activated virtualenv)."""
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "skillfs").exists())


def start(home: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO)}
    env["PATH"] = _path_without_skillfs()
    env.pop("SKILLFS_STORE", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from skillfs.cli.app import main; main()", "run",
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
    while "try" not in printed and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.match(r"(store|examples|gRPC|console|admin token|try)\s{2,}(.*)", line):
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
        assert store.skills(Scope.shared("support-bot")) == EXAMPLES
        console = urllib.request.urlopen(printed["console"], timeout=5).read().decode()
        assert "Sign in" in console  # the admin console, signed out
        status = urllib.request.urlopen(printed["console"] + "status", timeout=5).read().decode()
        assert "skillfs server" in status and "answering" in status
        # the command it suggests runs as printed, from the directory `make run` runs in,
        # although `skillfs` is not on $PATH (the virtualenv is not activated)
        assert ".venv/bin/skillfs ls --store grpc://" in printed["try"]
        tried = subprocess.run(
            printed["try"],
            shell=True,
            cwd=REPO,
            env={**os.environ, "PATH": _path_without_skillfs(), "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert tried.returncode == 0, tried.stderr
        assert all(name in tried.stdout for name in EXAMPLES)
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


def test_serve_says_where_it_listens_once_ready(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(tokens_document([("ops", "x" * 20, ["*:admin"])], "k"))
    grpc_port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from skillfs.cli.app import main; main()", "serve",
         "--store", f"sqlite:///{tmp_path / 's.db'}", "--tokens", str(tokens),
         "--grpc", f"127.0.0.1:{grpc_port}", "--http", f"0.0.0.0:{http_port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if not line.startswith("{"):
                break
        assert lines[-1] == (
            f"skillfs serving sqlite:///{tmp_path / 's.db'}: gRPC at grpc://127.0.0.1:"
            f"{grpc_port}, admin console at http://localhost:{http_port}/ (Ctrl-C stops it)\n"
        ), lines
        for line in lines[:-1]:
            json.loads(line)  # the rest stays JSON logs
        page = urllib.request.urlopen(f"http://localhost:{http_port}/", timeout=5).read()
        assert b"Sign in" in page
    finally:
        assert stop(proc) == 0
    assert proc.stdout is not None and proc.stdout.read() == ""


def test_serve_without_tokens_says_how_to_make_them(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SKILLFS_TOKENS", None)
    proc = subprocess.run(
        [sys.executable, "-c", "from skillfs.cli.app import main; main()", "serve",
         "--store", f"sqlite:///{tmp_path / 's.db'}", "--grpc", "127.0.0.1:0",
         "--http", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "400"},
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2  # a missing option (docs/cli.md, "Exit codes")
    line = proc.stderr.strip()
    assert line.startswith(
        "error: no tokens: pass --tokens FILE, or set $SKILLFS_TOKENS to the tokens document "
        "itself (its text, not a path)"
    ), line
    assert "tokens: [{name: ops, token:" in line and "grants: ['*:admin']" in line
    assert "docs/server.md" in line and "run `skillfs run`" in line
    missing = subprocess.run(
        [sys.executable, "-c", "from skillfs.cli.app import main; main()", "serve",
         "--tokens", str(tmp_path / "nope.yaml"), "--store", "memory://x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )  # fmt: skip
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "nope.yaml" in missing.stderr
