"""skillfs servers for tests: in this process (fast, for the conformance suite) or as
`skillfs serve` processes (for horizontal scale, kills and SIGTERM).

Every server trusts the tokens below; `ADMIN` may do anything, the others are scoped the
way a worker's token would be.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Self, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from skillfs.auth import tokens_document
from skillfs.server.app import ServerConfig, SkillfsServer
from support.servers import check_servers_allowed, free_port

ADMIN = "test-admin-token-0123456789abcdef"
ALICE = "test-alice-token-0123456789abcdef"
BOB = "test-bob-token-0123456789abcdef"
READER = "test-reader-token-0123456789abcdef"
TOKENS = [
    ("admin", ADMIN, ["*:admin"]),
    ("alice", ALICE, ["agent:support-bot/user:alice:write", "agent:support-bot/shared:read"]),
    ("bob", BOB, ["agent:support-bot/user:bob:write", "agent:support-bot/shared:read"]),
    ("reader", READER, ["*:read"]),
]
REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def write_tokens(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokens.json"
    path.write_text(tokens_document(TOKENS, receipt_key="test-receipt-key"))
    return path


def in_process(store_url: str, directory: Path, **config: object) -> SkillfsServer:
    """A started server over `store_url` on free ports (unless `grpc=` or `http=` says
    where); stop it with `.stop(0)`. Its messages are capped at 1 MiB (`max_message_mib`),
    far below the default: an answer or request that grows with the store fails the test
    that makes it (docs/server.md, "Bounded messages")."""
    check_servers_allowed(f"a skillfs server over {store_url}")
    where = {"grpc": "127.0.0.1:0", "http": "127.0.0.1:0", "max_message_mib": 1}
    cfg = ServerConfig(store=store_url, tokens=write_tokens(directory), **{**where, **config})
    return SkillfsServer(cfg).start()


@contextlib.contextmanager
def running(store_url: str, directory: Path, **config: object) -> Iterator[SkillfsServer]:
    """`in_process`, stopped (without grace) when the block ends."""
    server = in_process(store_url, directory, **config)
    try:
        yield server
    finally:
        server.stop(0)


def health(address: str, timeout: float = 2.0) -> str:
    """The health status name of a server ('SERVING', 'NOT_SERVING', or 'DOWN')."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return "DOWN"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def wait_health(address: str, want: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        status = health(address, timeout=1.0)
        if status == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{address} health is {status}, not {want} after {timeout}s")


class ServerProcess:
    """`skillfs serve` over a store in its own process, as a deployment runs it."""

    def __init__(
        self,
        store_url: str,
        directory: Path,
        tokens: Path | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.args = args  # more options of `skillfs serve` (--tls-cert, ...)
        self.directory = directory
        self.store_url = store_url
        self.tokens = tokens or write_tokens(directory)
        self.port = free_port()
        self.http_port = free_port()
        self.log = directory / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> Self:
        check_servers_allowed(f"skillfs serve over {self.store_url}")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-c", "from skillfs.cli.app import main; main()", "serve",
                    "--store", self.store_url,
                    "--grpc", self.address,
                    "--http", f"127.0.0.1:{self.http_port}",
                    "--tokens", str(self.tokens),
                    "--grace", "2",
                    *self.args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.directory,
            )  # fmt: skip
        if wait:
            try:
                wait_health(self.address, "SERVING")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{self.log_tail()}") from None
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def single(call: Iterable[T]) -> T:
    """The one message a server-streaming call answers a caller of protocol 1 with (a raw
    stub sends no `skillfs-protocol` metadata): its error, if any, raised here."""
    [message] = list(call)
    return message
