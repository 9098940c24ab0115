"""The HTTP port of a real `skillfs serve` under abuse (issues 10 and 15): redirects, bodies,
the live-update stream's grants, TLS and idle connections, sign-out, readiness, and what an
anonymous visitor learns. What involves the store (live updates and revocation, readiness,
anonymous POSTs, sign-out, what a visitor learns of the store) runs against a server on
SQLite, Redis and etcd (`on_store`: one server per module and store); the rest, which never
reaches the store, on SQLite (`served`). Every loop is bounded in count and time; traffic
stays on 127.0.0.1 (docs/security.md lists what each test covers).
"""

from __future__ import annotations

import json
import os
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

import skillfs
from skillfs.auth import tokens_document
from skillfs.model import Scope
from support.grpc_servers import ADMIN, ALICE, READER, TOKENS, ServerProcess, running
from tests.security.http_clients import (
    Events,
    csrf_of,
    raw_request,
    signed_in,
    threads_of,
)
from tests.server.test_server_health import self_signed
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
MD = b"---\nname: {name}\ndescription: Does {name}. Use when testing.\n---\n"


def md(name: str) -> bytes:
    return MD.replace(b"{name}", name.encode())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp("http-abuse")
    url = f"sqlite:///{directory / 'skills.db'}"
    store = skillfs.open_store(url)
    store.publish(SHARED, "code-reviewer", {"SKILL.md": md("code-reviewer")})
    store.close()
    with ServerProcess(url, directory / "srv") as srv:
        yield srv


@pytest.fixture
def base(served: ServerProcess) -> str:
    return f"http://127.0.0.1:{served.http_port}"


#: The token `test_live_updates_end_when_the_token_is_revoked` revokes (on `on_store`'s
#: server only, whose tokens file holds it).
CAROL = "test-carol-token-0123456789abcdef"
CAROL_GRANTS = ["agent:support-bot/user:carol:write", "agent:support-bot/shared:read"]
STORES = ["sqlite", "redis", "etcd"]


@pytest.fixture(scope="module", params=STORES)
def on_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A real `skillfs serve` on each store, shared by the module's tests of that store."""
    directory = tmp_path_factory.mktemp(f"http-abuse-{request.param}")
    url = url_for(request, request.param, directory)
    store = skillfs.open_store(url)
    store.publish(SHARED, "code-reviewer", {"SKILL.md": md("code-reviewer")})
    store.close()
    tokens = directory / "tokens.json"
    tokens.write_text(
        tokens_document([*TOKENS, ("carol", CAROL, CAROL_GRANTS)], receipt_key="test-receipt-key")
    )
    with ServerProcess(url, directory / "srv", tokens=tokens) as srv:
        yield srv


@pytest.fixture
def store_base(on_store: ServerProcess) -> str:
    return f"http://127.0.0.1:{on_store.http_port}"


# ---------------------------------------------------------------------- redirects


@pytest.mark.parametrize(
    "target",
    [
        "/%5Cevil.example",  # "/\evil.example": browsers read the backslash as a slash
        "/%5C%5Cevil.example",
        "//evil.example",
        "/%0d%0aSet-Cookie:%20planted=1",  # a header of the attacker's
        "/%09/evil.example",
        "https://evil.example/",
    ],
)
def test_sign_in_redirects_only_to_this_site(base: str, target: str) -> None:
    with closing(signed_in(base, ADMIN)) as operator:
        r = operator.get(f"/login?next={target}")
        assert r.status_code == 303 and r.headers["location"] == "/", r.headers
        assert "planted" not in str(r.headers)
    with httpx.Client(base_url=base, timeout=5) as visitor:
        form = visitor.get(f"/login?next={target}").text
        assert "evil.example" not in form and "planted" not in form


# ---------------------------------------------------------------------- bodies


def answered_at_once(port: int, head: str, body: bytes, status: int) -> None:
    """The server answers `status` within 3 s, while the body it was promised never comes."""
    started = time.monotonic()
    answer = raw_request(port, head, body, timeout=5)
    assert answer.startswith(f"HTTP/1.1 {status}".encode()), answer[:200]
    assert time.monotonic() - started < 3


def test_anonymous_post_is_refused_before_its_body_is_read(on_store: ServerProcess) -> None:
    """A POST announcing 32 MiB (under the upload limit) without a session: refused at once,
    not after the server read (and buffered) what the client chose to send."""
    head = (
        "POST /agents/support-bot/shared/skills/ HTTP/1.1\nHost: 127.0.0.1\n"
        "Content-Type: multipart/form-data; boundary=x\nContent-Length: 33554432\n"
    )
    answered_at_once(on_store.http_port, head, b"--x\r\n", 401)


def test_negative_content_length_is_refused(served: ServerProcess) -> None:
    head = "POST /login HTTP/1.1\nHost: 127.0.0.1\nContent-Length: -1\n"
    answered_at_once(served.http_port, head, b"token=x", 400)


def test_sign_in_body_is_capped(served: ServerProcess) -> None:
    """The one form anyone may post reads at most 16 KiB, however the body is sent."""
    for head, body in [
        ("Content-Length: 1048576\n", b"token=" + b"x" * 1000),
        ("Transfer-Encoding: chunked\n", b"10000\r\n" + b"x" * 0x10000 + b"\r\n"),
    ]:
        answer = raw_request(
            served.http_port,
            "POST /login HTTP/1.1\nHost: 127.0.0.1\n"
            f"Content-Type: application/x-www-form-urlencoded\n{head}",
            body,
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_streamed_body_is_cut_at_the_route_limit(base: str, served: ServerProcess) -> None:
    """A signed-in form streamed without a length is answered 413 once it passes its route's
    limit (8 MiB), while the client is still sending: the server does not read on."""
    with closing(signed_in(base, ADMIN)) as operator:
        csrf = csrf_of(operator)
        cookie = operator.cookies["skillfs_session"]
    head = (
        "POST /agents/support-bot/shared/skills/code-reviewer/save HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nCookie: skillfs_session={cookie}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    first = f"csrf={csrf}&content=".encode()
    mib = b"x" * (1024 * 1024)
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=5) as sock:
        sock.sendall(head.encode() + f"{len(first):x}\r\n".encode() + first + b"\r\n")
        for _ in range(64):  # bounded: 64 MiB at most
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                answer = sock.recv(65536)
                break
            try:
                sock.sendall(f"{len(mib):x}\r\n".encode() + mib + b"\r\n")
            except OSError:  # closed by the server after its answer
                answer = sock.recv(65536)
                break
            sent += len(mib)
        else:
            answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent <= 16 * 1024 * 1024, sent  # the limit, plus what the sockets' buffers held


def test_validate_api_refuses_work_too_large_to_check(base: str) -> None:
    """A read-only token cannot keep a CPU busy: the text and its frontmatter are capped."""
    with closing(signed_in(base, READER)) as reader:
        csrf = csrf_of(reader)
        job = {"scope": str(SHARED), "skill": "code-reviewer", "path": "SKILL.md", "base": 1}
        headers = {"X-CSRF-Token": csrf}
        started = time.monotonic()
        huge = reader.post(
            "/api/validate", json={**job, "content": "x" * (3 * 1024 * 1024)}, headers=headers
        )
        assert huge.status_code == 413 and "not checked" in huge.json()["error"]
        keys = "".join(f"k{i}: {i}\n" for i in range(20_000))  # ~200 KiB of frontmatter
        deep = reader.post(
            "/api/validate", json={**job, "content": f"---\n{keys}---\nbody\n"}, headers=headers
        )
        assert deep.status_code == 413 and "frontmatter" in deep.json()["error"]
        assert time.monotonic() - started < 5
        body = json.dumps({**job, "content": "x" * (9 * 1024 * 1024)})
        whole = reader.post(
            "/api/validate",
            content=body,
            headers={**headers, "Content-Type": "application/json"},
        )
        assert whole.status_code == 413


# ---------------------------------------------------------------------- live updates


def test_live_updates_show_only_scopes_the_token_reads(
    store_base: str, on_store: ServerProcess
) -> None:
    """Alice's token reads the shared scope and her own: a skill of bob's moves the revision
    but is never named on her stream."""
    store = skillfs.open_store(on_store.store_url)
    with closing(signed_in(store_base, ALICE)) as alice:
        events = Events(alice, f"agents/{AGENT}")
        try:
            events.until("event: revision")
            secret = f"bob-secret-{uuid.uuid4().hex[:6]}"
            store.publish(Scope.user(AGENT, "bob"), secret, {"SKILL.md": md(secret)})
            mine = f"alice-own-{uuid.uuid4().hex[:6]}"
            store.publish(Scope.user(AGENT, "alice"), mine, {"SKILL.md": md(mine)})
            seen = events.until(mine)
            assert seen and mine in seen[-1]
            assert not [e for e in seen if secret in e], seen
            assert any(e.startswith("event: revision") for e in seen)  # bob's commit, unnamed
        finally:
            events.close()
            store.close()


def test_live_updates_end_when_the_token_is_revoked(
    store_base: str, on_store: ServerProcess
) -> None:
    """Carol's stream is open when her token leaves the tokens file: it says `signed-out`
    and ends, naming nothing committed after, and her session no longer opens a page."""
    srv = on_store
    store = skillfs.open_store(srv.store_url)
    carol = signed_in(store_base, CAROL)
    events = Events(carol, f"agents/{AGENT}")
    try:
        events.until("event: revision")
        revoked = tokens_document(TOKENS, receipt_key="test-receipt-key")  # without carol
        fresh = srv.tokens.with_suffix(".new")
        fresh.write_text(revoked)
        os.replace(fresh, srv.tokens)
        time.sleep(2.5)  # the server re-reads its tokens within two seconds
        after = f"after-revocation-{uuid.uuid4().hex[:6]}"
        store.publish(Scope.user(AGENT, "carol"), after, {"SKILL.md": md(after)})
        seen = events.until("signed-out", timeout=15)
        assert seen and "signed-out" in seen[-1], seen
        assert not [e for e in seen if after in e], seen
        assert events.next(5) is None  # the stream ended
        assert carol.get("/", follow_redirects=False).status_code == 303
    finally:
        events.close()
        carol.close()
        store.close()


def test_head_of_the_live_updates_leaves_the_connection_free(
    store_base: str, on_store: ServerProcess
) -> None:
    """Outside testing: `HEAD /events` answered its headers and kept the event stream going
    on the connection, so the next request on it was never answered."""
    alice = signed_in(store_base, ALICE)
    try:
        r = alice.head(f"/events?domain=agents/{AGENT}")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert alice.get("/healthz", timeout=5).status_code == 200  # the same connection
    finally:
        alice.close()


# ---------------------------------------------------------------------- connections


def test_tls_client_that_never_says_hello_blocks_no_one(tmp_path: Path) -> None:
    key, cert = self_signed(tmp_path)
    args = ("--tls-cert", str(cert), "--tls-key", str(key))
    srv = ServerProcess(f"sqlite:///{tmp_path / 's.db'}", tmp_path / "srv", args=args)
    srv.start(wait=False)
    ctx = ssl.create_default_context(cafile=str(cert))
    base = f"https://localhost:{srv.http_port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{base}/healthz", verify=ctx, timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, srv.log_tail()
                time.sleep(0.1)
        silent = [socket.create_connection(("127.0.0.1", srv.http_port)) for _ in range(5)]
        try:
            for path in ("/healthz", "/readyz", "/login"):
                started = time.monotonic()
                r = httpx.get(f"{base}{path}", verify=ctx, timeout=3)
                assert r.status_code == 200 and time.monotonic() - started < 2
        finally:
            for s in silent:
                s.close()
    finally:
        srv.stop()


@pytest.mark.serial
def test_idle_connections_hold_no_threads(served: ServerProcess, base: str) -> None:
    """200 connections that send nothing, or half a request, take no thread, and the probes
    still answer at once."""
    assert served.proc is not None
    httpx.get(f"{base}/healthz", timeout=5)
    before = threads_of(served.proc.pid)
    idle: list[socket.socket] = []
    try:
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", served.http_port), timeout=5)
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            idle.append(s)
        time.sleep(1.0)
        during = threads_of(served.proc.pid)
        started = time.monotonic()
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        assert time.monotonic() - started < 1
        print(f"threads: {before} before, {during} with {len(idle)} idle connections")
        assert during <= before + 2, (before, during)
    finally:
        for s in idle:
            s.close()


# ---------------------------------------------------------------------- sessions and readiness


def test_sign_out_ends_the_session_on_the_server(store_base: str) -> None:
    operator = signed_in(store_base, ADMIN)
    stolen = operator.cookies["skillfs_session"]
    r = operator.post("/logout", data={"csrf": csrf_of(operator)})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    stolen_cookie = {"skillfs_session": stolen}
    with httpx.Client(base_url=store_base, timeout=5, cookies=stolen_cookie) as replay:
        assert replay.get("/").status_code == 303  # to the sign-in page
        assert replay.get("/events", params={"domain": f"agents/{AGENT}"}).status_code == 401
    operator.close()


#: Requests that hang on the store at once: more than the console's page threads (16).
PINNED = 40


@pytest.mark.parametrize("engine", STORES)
def test_readiness_fails_while_every_page_thread_is_pinned(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """In process, so the store can be made to hang: every console thread then waits on it,
    and /readyz says so although the store's health check is fine."""
    url = url_for(request, engine, tmp_path)
    with running(url, tmp_path / "srv", health_interval=0.1) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        release = threading.Event()
        agents = server.store.agents
        server.store.agents = lambda: (release.wait(20), agents())[1]  # type: ignore[method-assign]
        operator = signed_in(base, ADMIN)
        pinned = [
            threading.Thread(target=operator.get, args=("/",), kwargs={"timeout": 30})
            for _ in range(PINNED)
        ]
        try:
            for t in pinned:
                t.start()
            time.sleep(0.5)
            r = httpx.get(f"{base}/readyz", timeout=5)
            assert r.status_code == 503 and "busy" in r.text
        finally:
            release.set()
            for t in pinned:
                t.join(30)
            operator.close()
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200


# ---------------------------------------------------------------------- what anyone sees


def test_anonymous_visitors_do_not_learn_the_store(
    store_base: str, on_store: ServerProcess
) -> None:
    scheme, _, rest = on_store.store_url.partition("://")
    where = rest.lstrip("/").split("?")[0].split(",")[0]  # the SQLite path, or host:port
    with httpx.Client(base_url=store_base, timeout=5, follow_redirects=True) as visitor:
        for url in ("/", "/login", "/status", "/nowhere", "/agents/support-bot/"):
            page = visitor.get(url).text
            assert where not in page and f"{scheme}:" not in page, url
        assert "answering" in visitor.get("/status").text  # up or down, nothing more
    with closing(signed_in(store_base, READER)) as operator:
        assert where in operator.get("/status").text
