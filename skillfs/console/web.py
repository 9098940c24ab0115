"""A minimal WSGI request/response layer: the console needs forms, multipart uploads, cookies
and streaming, which the stdlib gives in pieces; a framework would be a heavy dependency for it.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Iterable, Iterator
from email.message import Message
from http import HTTPStatus
from http.cookies import SimpleCookie
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

WSGIEnviron = dict[str, Any]


class HTTPError(Exception):
    """An error page: status, a short title and a message that says what to do."""

    def __init__(self, status: int, title: str, message: str = "", hint: str = "") -> None:
        super().__init__(message or title)
        self.status = status
        self.title = title
        self.message = message
        self.hint = hint


class Upload:
    """One file of a multipart form."""

    def __init__(self, filename: str, data: bytes) -> None:
        self.filename = filename
        self.data = data


class Request:
    """The parts of a WSGI request the console reads; the body is read once, size-limited."""

    def __init__(self, environ: WSGIEnviron, max_body: int) -> None:
        self.environ = environ
        self.method: str = environ.get("REQUEST_METHOD", "GET").upper()
        raw_path: str = environ.get("PATH_INFO", "") or "/"
        # WSGI hands the path over as latin-1 decoded bytes; URLs carry UTF-8.
        self.path = raw_path.encode("latin-1").decode("utf-8", "replace")
        self.query_lists = parse_qs(environ.get("QUERY_STRING", ""))
        self.query = {k: v[-1] for k, v in self.query_lists.items()}
        self.secure = environ.get("wsgi.url_scheme") == "https"
        cookie = SimpleCookie()
        try:
            cookie.load(environ.get("HTTP_COOKIE", ""))
        except Exception:  # a malformed Cookie header from another app on the host
            cookie = SimpleCookie()
        self.cookies = {k: m.value for k, m in cookie.items()}
        self.form: dict[str, str] = {}
        self.files: dict[str, Upload] = {}
        self.json: Any = None
        if self.method == "POST":
            self._read_body(max_body)

    def header(self, name: str) -> str | None:
        value = self.environ.get("HTTP_" + name.upper().replace("-", "_"))
        return value if isinstance(value, str) else None

    def _read_body(self, max_body: int) -> None:
        try:
            length = int(self.environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise HTTPError(
                400, "Bad request", "the Content-Length header is not a number"
            ) from None
        if length > max_body:
            raise HTTPError(
                413,
                "Upload too large",
                f"the request is {length} bytes; this console accepts at most {max_body} bytes",
                "Split the upload, or raise the console's max_upload setting.",
            )
        body = self.environ["wsgi.input"].read(length) if length else b""
        ctype = self.environ.get("CONTENT_TYPE", "")
        msg = Message()
        msg["content-type"] = ctype
        kind = msg.get_content_type()
        if kind == "application/x-www-form-urlencoded":
            text = body.decode("utf-8", "replace")
            self.form = {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}
        elif kind == "multipart/form-data":
            boundary = msg.get_param("boundary")
            if not isinstance(boundary, str) or not boundary:
                raise HTTPError(400, "Bad request", "multipart form without a boundary")
            self._parse_multipart(body, boundary.encode("latin-1"))
        elif kind == "application/json":
            try:
                self.json = json.loads(body or b"null")
            except ValueError as exc:
                raise HTTPError(
                    400, "Bad request", f"the JSON body does not parse: {exc}"
                ) from None

    def _parse_multipart(self, body: bytes, boundary: bytes) -> None:
        """RFC 7578 form data: parts between `--boundary` lines, each headers then content."""
        delimiter = b"--" + boundary
        for chunk in body.split(delimiter)[1:]:
            if chunk.startswith(b"--"):
                break  # the closing delimiter
            head, sep, content = chunk.partition(b"\r\n\r\n")
            if not sep:
                raise HTTPError(400, "Bad request", "a multipart part has no header/body separator")
            content = content.removesuffix(b"\r\n")
            part = Message()
            for line in head.decode("utf-8", "replace").strip("\r\n").split("\r\n"):
                name, colon, value = line.partition(":")
                if colon:
                    part[name.strip()] = value.strip()
            field = part.get_param("name", header="content-disposition")
            if not isinstance(field, str):
                continue
            filename = part.get_param("filename", header="content-disposition")
            if isinstance(filename, str):
                if filename:
                    self.files[field] = Upload(filename, content)
            else:
                self.form[field] = content.decode("utf-8", "replace")


class Response:
    """Status, headers and a body (bytes, or an iterator of bytes for a stream)."""

    def __init__(
        self,
        body: bytes | str | Iterable[bytes] = b"",
        status: int = 200,
        content_type: str = "text/html; charset=utf-8",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        self.status = status
        self.body: bytes | Iterable[bytes] = body.encode() if isinstance(body, str) else body
        self.headers = [("Content-Type", content_type), *(headers or [])]

    def set_cookie(
        self, name: str, value: str, *, secure: bool, max_age: int | None = None
    ) -> None:
        parts = [f"{name}={value}", "Path=/", "HttpOnly", "SameSite=Lax"]
        if max_age is not None:
            parts.append(f"Max-Age={max_age}")
        if secure:
            parts.append("Secure")
        self.headers.append(("Set-Cookie", "; ".join(parts)))

    def status_line(self) -> str:
        try:
            return f"{self.status} {HTTPStatus(self.status).phrase}"
        except ValueError:
            return f"{self.status} Unknown"

    def iterable(self) -> Iterator[bytes] | list[bytes]:
        if isinstance(self.body, bytes):
            return [self.body]
        return iter(self.body)


def redirect(location: str, status: int = 303) -> Response:
    return Response(b"", status=status, headers=[("Location", location)])


def json_response(data: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(data, ensure_ascii=False), status=status, content_type="application/json"
    )


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """A thread per request: the live-update streams are long requests."""

    daemon_threads = True
    allow_reuse_address = True


class QuietHandler(WSGIRequestHandler):
    """Access lines at debug level instead of wsgiref's stderr lines; `HTTPS=on` over TLS,
    so the console marks its cookies Secure."""

    log = logging.getLogger("skillfs.http")

    def log_message(self, format: str, *args: Any) -> None:
        self.log.debug(format % args, extra={"peer": self.client_address[0]})

    def get_environ(self) -> dict[str, str]:
        env = super().get_environ()
        if isinstance(self.connection, ssl.SSLSocket):
            env["HTTPS"] = "on"
        return env
