"""Clients an attacker (or a careless operator) would use against the HTTP port: a signed-in
browser session, a Server-Sent Events reader, and raw sockets for what no library sends."""

from __future__ import annotations

import queue
import re
import socket
import threading
import time
from pathlib import Path

import httpx


def signed_in(base: str, token: str, verify: bool | str = True) -> httpx.Client:
    """A console session of `token`, as a browser holds it (cookies kept)."""
    client = httpx.Client(base_url=base, timeout=10, verify=verify)
    form = client.get("/login").text
    nonce = re.search(r'name="nonce" value="([^"]+)"', form)
    assert nonce, form
    r = client.post("/login", data={"nonce": nonce[1], "token": token})
    assert r.status_code == 303 and "skillfs_session" in client.cookies, r.text
    return client


def csrf_of(client: httpx.Client) -> str:
    page = client.get("/").text
    found = re.search(r'data-csrf="([^"]+)"', page)
    assert found, page
    return found[1]


class Events:
    """A live-update stream read in a thread; `next()` waits for one event, bounded."""

    def __init__(self, client: httpx.Client, domain: str) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stream = client.stream("GET", "/events", params={"domain": domain})
        self.response = self._stream.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = ""
        try:
            for chunk in self.response.iter_text():
                buffer += chunk
                while "\n\n" in buffer:
                    event, buffer = buffer.split("\n\n", 1)
                    self._queue.put(event)
        except httpx.HTTPError:
            pass
        self._queue.put(None)  # the stream ended

    def next(self, timeout: float = 15.0) -> str | None:
        """The next event (or comment); None once the stream has ended."""
        return self._queue.get(timeout=timeout)

    def until(self, text: str, timeout: float = 15.0) -> list[str]:
        """Events up to and including the first that holds `text` (or the stream's end)."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.next(max(0.01, deadline - time.monotonic()))
            if event is None:
                return seen
            seen.append(event)
            if text in event:
                return seen
        raise AssertionError(f"no event with {text!r} in {timeout}s: {seen}")

    def close(self) -> None:
        self._stream.__exit__(None, None, None)


def raw_request(port: int, head: str, body: bytes = b"", timeout: float = 5.0) -> bytes:
    """Send a request head (and some body) as written, and read the answer's head (or what
    came before the server closed or `timeout` passed); what a client library would refuse
    to send."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            answer += chunk
            if b"\r\n\r\n" in answer:
                break  # the status line and headers are what the tests look at
        return answer


def threads_of(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))
