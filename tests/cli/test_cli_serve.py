"""`skillfs serve` and `skillfs run` on a port another process holds: one line saying which
port and what to do, exit 1, for the gRPC port as for the HTTP port; a bad address, thread
count or TLS pair is said as such (outside testing: tracebacks, and "is the port taken?")."""

from __future__ import annotations

import socket
import subprocess
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


def _serve(tmp_path: Path, grpc: str, http: str, *more: str, code: int = 1) -> list[str]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(tokens_document([("ops", "x" * 20, ["*:admin"])], "k"))
    store = f"sqlite:///{tmp_path / 's.db'}"
    args = ["--store", store, "--tokens", str(tokens), "--grpc", grpc, "--http", http, *more]
    result = process("serve", *args)
    assert result.returncode == code, result.stderr
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


@pytest.mark.parametrize(
    ("grpc", "http", "more", "said"),
    [
        ("127.0.0.1:0", "nonsense", [], "Invalid value for --http: 'nonsense': give HOST:PORT"),
        ("127.0.0.1:0", "127.0.0.1:abc", [], "Invalid value for --http: '127.0.0.1:abc'"),
        ("127.0.0.1:99999", "127.0.0.1:0", [], "Invalid value for --grpc: '127.0.0.1:99999'"),
        ("127.0.0.1:0", "127.0.0.1:0", ["--max-workers", "0"], "greater than or equal to 1"),
    ],
)
def test_a_bad_address_or_thread_count_is_bad_usage(
    tmp_path: Path, grpc: str, http: str, more: list[str], said: str
) -> None:
    assert said in " ".join(" ".join(_serve(tmp_path, grpc, http, *more, code=2)).split())


def _pem_pair(where: Path, name: str) -> tuple[Path, Path]:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-keyout", f"{name}.key", "-out", f"{name}.pem"],
        cwd=where, check=True, capture_output=True,
    )  # fmt: skip
    return where / f"{name}.pem", where / f"{name}.key"


def test_a_tls_pair_that_does_not_match_is_said_so(tmp_path: Path) -> None:
    cert, _ = _pem_pair(tmp_path, "one")
    _, key = _pem_pair(tmp_path, "two")
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    assert _serve(tmp_path, "127.0.0.1:0", "127.0.0.1:0", *tls) == [
        f"error: TLS: {cert} and {key} are not a PEM certificate and its private key "
        "(KEY_VALUES_MISMATCH); give the files of one pair"
    ]


def test_skillfs_tokens_holds_the_document_and_a_path_there_is_said_so(tmp_path: Path) -> None:
    """`--tokens` takes a file, `$SKILLFS_TOKENS` the document itself (docs/server.md): a path
    put there is refused saying so (it read as a document that was no mapping)."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(tokens_document([("ops", "x" * 20, ["*:admin"])], "k"))
    store = f"sqlite:///{tmp_path / 's.db'}"
    result = process("serve", "--store", store, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
                     SKILLFS_TOKENS=str(tokens))  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"error: $SKILLFS_TOKENS holds the tokens document itself, not a path, and "
        f"{str(tokens)!r} is a file: pass it as --tokens {tokens} instead"
    ]
