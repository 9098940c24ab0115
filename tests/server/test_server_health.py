"""The server's life cycle: health follows the store, SIGTERM drains, the HTTP port serves
metrics and status, TLS, reflection, and the committed generated code is current."""

from __future__ import annotations

import filecmp
import logging
import re
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import skillfs
from skillfs.errors import StoreUnavailable
from skillfs.model import Scope
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.remote.proto import skillfs_pb2_grpc as pb_grpc
from skillfs.remote.wire import rev_to_pb
from skillfs.server.app import SkillfsServer
from support.grpc_servers import (
    ADMIN,
    ALICE,
    ServerProcess,
    health,
    in_process,
    running,
    wait_health,
)
from support.servers import RedisServer, free_port

REPO = Path(__file__).resolve().parents[2]
A = Scope.user("support-bot", "alice")
MD = b"---\nname: s\ndescription: Does s. Use when testing.\n---\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SkillfsServer]:
    with running(f"memory://{uuid.uuid4().hex}", tmp_path, health_interval=0.1) as srv:
        yield srv


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "protos" / "generate.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    generated = REPO / "skillfs" / "remote" / "proto"
    names = sorted(p.name for p in generated.glob("*.py"))
    assert names == sorted(p.name for p in tmp_path.glob("*.py"))
    _, mismatch, errors = filecmp.cmpfiles(generated, tmp_path, names, False)
    assert not mismatch and not errors, f"run `make proto`: {mismatch or errors} differ"


def test_reflection_lists_the_services(server: SkillfsServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(iter(stub.ServerReflectionInfo(iter([request]))))
    names = {s.name for s in reply.list_services_response.service}
    assert {"skillfs.v1.SkillReader", "skillfs.v1.SkillAdmin", "grpc.health.v1.Health"} <= names


def test_http_port_status_metrics_and_probes(server: SkillfsServer) -> None:
    base = f"http://127.0.0.1:{server.http_port}"
    store = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN)
    store.publish(A, "s", {"SKILL.md": MD})
    wait_health(f"127.0.0.1:{server.grpc_port}", "SERVING")
    metrics = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    assert 'skillfs_grpc_requests_total{code="OK",method="Commit"} 1.0' in metrics
    assert "skillfs_grpc_request_seconds_bucket" in metrics and "skillfs_store_up 1.0" in metrics
    assert "process_cpu_seconds_total" in metrics
    page = urllib.request.urlopen(f"{base}/status", timeout=5).read().decode()
    assert "skillfs server" in page and "answering" in page
    assert server.store.url not in page  # the store is named to signed-in operators only
    with httpx.Client(base_url=base, follow_redirects=True) as operator:
        form = operator.get("/login").text
        nonce = re.search(r'name="nonce" value="([^"]+)"', form)
        assert nonce and operator.post("/login", data={"nonce": nonce[1], "token": ADMIN})
        assert server.store.url in operator.get("/status").text
    assert "<link rel='stylesheet' href='/static/console.css'>" in page  # the console's look
    assert "class='table'" in page and "class='topbar'" in page
    css = urllib.request.urlopen(f"{base}/static/console.css", timeout=5)
    assert css.status == 200 and b".topbar" in css.read()
    console = urllib.request.urlopen(f"{base}/", timeout=5)  # the admin console, signed out
    assert console.url.endswith("/login?next=/") and "Sign in" in console.read().decode()
    assert urllib.request.urlopen(f"{base}/healthz", timeout=5).status == 200
    assert urllib.request.urlopen(f"{base}/readyz", timeout=5).status == 200
    for probe in ("/healthz", "/readyz", "/metrics", "/status"):  # outside testing: 401 or 404
        posted = httpx.post(f"{base}{probe}")
        assert (posted.status_code, posted.headers["allow"]) == (405, "GET, HEAD")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{base}/static/nope.css", timeout=5)
    assert err.value.code == 404

    # another ASGI app mounted under a prefix takes precedence over the console at /
    async def console(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = f"{scope['root_path']} {scope['path']}".encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    server.mount("/console", console)
    assert urllib.request.urlopen(f"{base}/console/x", timeout=5).read() == b"/console /console/x"


def test_a_server_started_with_its_store_down_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside testing: the log said "serving" and never that the store was down (only a
    change of state was logged, and the state began as down)."""
    caplog.set_level(logging.INFO, logger="skillfs.server")
    server = in_process(f"redis://127.0.0.1:{free_port()}/0", tmp_path, health_interval=0.1)
    try:
        deadline = time.monotonic() + 10
        said = lambda: [r for r in caplog.records if r.getMessage() == "store down"]  # noqa: E731
        while not said() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r.levelno for r in said()] == [logging.WARNING]
    finally:
        server.stop(0)


@pytest.mark.slow
def test_health_follows_the_store(tmp_path: Path) -> None:
    """NOT_SERVING while Redis is down (readiness), the process stays up (liveness), and
    SERVING again once Redis is back; clients get UNAVAILABLE meanwhile, not a hang."""
    redis_server = RedisServer(tmp_path / "redis", appendonly=True).start()
    try:
        with ServerProcess(redis_server.url, tmp_path / "srv") as srv:
            client = skillfs.open_store(f"grpc://{srv.address}", token=ADMIN, retry_for=0)
            client.publish(A, "s", {"SKILL.md": MD})
            redis_server.kill()
            wait_health(srv.address, "NOT_SERVING")
            live = urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/healthz", timeout=5)
            assert live.status == 200
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}/readyz", timeout=5)
            assert err.value.code == 503
            with pytest.raises(StoreUnavailable, match="unavailable"):
                client.manifest(A, "s")
            redis_server.start()
            wait_health(srv.address, "SERVING")
            assert client.manifest(A, "s").version == 1  # AOF kept it
            assert client.publish(A, "s", {"SKILL.md": MD}).version == 2
    finally:
        redis_server.stop()


@pytest.mark.slow
def test_sigterm_drains_and_ends_watches(tmp_path: Path) -> None:
    with ServerProcess(f"sqlite:///{tmp_path / 's.db'}", tmp_path / "srv") as srv:
        client = skillfs.open_store(f"grpc://{srv.address}", token=ALICE)
        since = client.publish(A, "s", {"SKILL.md": MD}).revision
        client.publish(A, "s", {"SKILL.md": MD})
        streaming, stub_done = threading.Event(), threading.Event()
        codes: list[grpc.StatusCode] = []

        def watch() -> None:
            with grpc.insecure_channel(srv.address) as ch:
                stream = pb_grpc.SkillReaderStub(ch).Watch(
                    pb.WatchRequest(domain="agents/support-bot", since=rev_to_pb(since)),
                    metadata=[("authorization", f"Bearer {ALICE}")],
                )
                try:
                    for _ in stream:
                        streaming.set()  # the stream is open on the server
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
            stub_done.set()

        t = threading.Thread(target=watch)
        t.start()
        assert streaming.wait(10)
        started = time.monotonic()
        srv.signal(15)
        assert srv.proc is not None and srv.proc.wait(15) == 0
        assert time.monotonic() - started < 8  # watches end within a poll, not a timeout
        assert stub_done.wait(5) and codes == [grpc.StatusCode.OK]  # ended, not broken
        assert health(srv.address) == "DOWN"
        t.join()


def test_a_stop_ends_the_http_port_s_streams_and_drains_both_ports_together(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside testing: a stop waited out the gRPC grace, then the HTTP grace (twice
    `--grace`: past Kubernetes' termination grace at the defaults), and an MCP client's open
    GET stream always held the HTTP port for its whole grace, then was cancelled and logged
    as an error. Now the console's and MCP's streams end at once."""
    server = in_process(f"sqlite:///{tmp_path / 's.db'}", tmp_path / "srv", grace=4.0)
    base = f"http://127.0.0.1:{server.http_port}"
    headers = {"authorization": f"Bearer {ALICE}", "accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    opened = httpx.post(
        f"{base}/mcp/?agent=support-bot&user=alice",
        headers=headers,
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
    )
    session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
    streaming, ended = threading.Event(), threading.Event()

    def listen() -> None:
        with httpx.stream(
            "GET", f"{base}/mcp/?agent=support-bot&user=alice", headers=session, timeout=30
        ) as stream:
            streaming.set()
            for _ in stream.iter_bytes():
                pass
        ended.set()

    threading.Thread(target=listen, daemon=True).start()
    assert streaming.wait(10)
    time.sleep(0.3)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 3.0  # not the HTTP port's 4 s grace
    assert ended.wait(5)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A throw-away key and certificate for localhost / 127.0.0.1."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return key, cert


def test_tls(tmp_path: Path) -> None:
    key, cert = self_signed(tmp_path)
    with running(f"memory://{uuid.uuid4().hex}", tmp_path, tls_cert=cert, tls_key=key) as srv:
        url = f"grpcs://localhost:{srv.grpc_port}?ca={cert}"
        store = skillfs.open_store(url, token=ADMIN)
        assert store.publish(A, "s", {"SKILL.md": MD}).version == 1
        plain = skillfs.open_store(f"grpc://127.0.0.1:{srv.grpc_port}", token=ADMIN, retry_for=0)
        with pytest.raises(StoreUnavailable):
            plain.skills(A)


def test_console_cookies_are_secure_over_tls(tmp_path: Path) -> None:
    """Over the server's own TLS the console marks its session cookies Secure."""
    key, cert = self_signed(tmp_path)
    with running(f"memory://{uuid.uuid4().hex}", tmp_path, tls_cert=cert, tls_key=key) as srv:
        ctx = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(f"https://localhost:{srv.http_port}/login", context=ctx) as r:
            cookies = r.headers.get_all("Set-Cookie") or []
        assert cookies and all("Secure" in c for c in cookies), cookies
