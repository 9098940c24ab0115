"""`skillfs serve` and `skillfs run` on a port another process holds: one line saying which
port and what to do, exit 1, for the gRPC port as for the HTTP port."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillfs.auth import tokens_document
from tests.cli_helpers import process


@pytest.fixture
def busy() -> Iterator[int]:
    """A port another process listens on."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        yield holder.getsockname()[1]


def _serve(tmp_path: Path, grpc: str, http: str) -> list[str]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(tokens_document([("ops", "x" * 20, ["*:admin"])], "k"))
    store = f"sqlite:///{tmp_path / 's.db'}"
    args = ["--store", store, "--tokens", str(tokens), "--grpc", grpc, "--http", http]
    result = process("serve", *args)
    assert result.returncode == 1, result.stderr
    return result.stderr.splitlines()


def test_serve_on_a_busy_grpc_port(tmp_path: Path, busy: int) -> None:
    assert _serve(tmp_path, f"127.0.0.1:{busy}", "127.0.0.1:0") == [
        f"error: cannot listen on 127.0.0.1:{busy} for gRPC: the port is in use; stop what "
        "holds it, or pick another port with --grpc HOST:PORT"
    ]


def test_serve_on_a_busy_http_port(tmp_path: Path, busy: int) -> None:
    assert _serve(tmp_path, "127.0.0.1:0", f"127.0.0.1:{busy}") == [
        f"error: cannot listen on 127.0.0.1:{busy} for HTTP: the port is in use; stop what "
        "holds it, or pick another port with --http HOST:PORT"
    ]


def test_run_on_a_busy_grpc_port(tmp_path: Path, busy: int) -> None:
    result = process(
        "run", "--grpc", f"127.0.0.1:{busy}", "--http", "127.0.0.1:0", HOME=str(tmp_path)
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{busy} for gRPC: the port is in use; stop what "
        "holds it, or pick another port with --grpc HOST:PORT"
    ]
