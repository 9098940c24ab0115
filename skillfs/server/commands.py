"""`skillfs serve` (the server as deployments run it) and `skillfs run` (what `make run` starts:
a server on the embedded SQLite store with the example skills and a local admin token).

The server modules (gRPC, Prometheus) are imported only when one of these runs, so the other
commands start fast."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from skillfs.commands.common import fail, out
from skillfs.engines import DEFAULT_PATH, default_url
from skillfs.errors import SkillfsError
from skillfs.model import File, Scope
from skillfs.skill import find_skill_dirs
from skillfs.store import Store

#: The agent whose shared scope `skillfs run` fills with the example skills.
EXAMPLE_AGENT = "example-agent"

StoreOption = Annotated[
    str | None,
    typer.Option("--store", help="Store URL (default: $SKILLFS_STORE, else the SQLite file)."),
]
GrpcOption = Annotated[str, typer.Option("--grpc", help="HOST:PORT for gRPC.")]
HttpOption = Annotated[str, typer.Option("--http", help="HOST:PORT for the status page.")]


def serve(
    store: StoreOption = None,
    grpc: GrpcOption = "0.0.0.0:7070",
    http: Annotated[
        str, typer.Option("--http", help="HOST:PORT for status, /metrics and the console.")
    ] = "0.0.0.0:7080",
    tokens: Annotated[
        Path | None,
        typer.Option("--tokens", help="Tokens config file (default: $SKILLFS_TOKENS)."),
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate.")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key.")] = None,
    grace: Annotated[float, typer.Option(help="Seconds calls get to finish on SIGTERM.")] = 10.0,
    max_workers: Annotated[
        int, typer.Option(help="Threads for calls (each open Watch holds one).")
    ] = 128,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the gRPC server over a store (stateless: run as many as you like over one store)."""
    from skillfs.server.app import ServerConfig, SkillfsServer, setup_logging

    setup_logging(log_level)
    config = ServerConfig(
        store=store or default_url(),
        grpc=grpc,
        http=http,
        tokens=tokens,
        tls_cert=tls_cert,
        tls_key=tls_key,
        grace=grace,
        max_workers=max_workers,
    )
    try:
        server = SkillfsServer(config)
    except SkillfsError as exc:
        raise fail(str(exc)) from None
    server.serve()


def _dev_tokens(path: Path) -> str:
    """The admin token of the local tokens file, creating the file (mode 0600) if absent."""
    if path.exists():
        doc = json.loads(path.read_text())
        return str(next(t["token"] for t in doc["tokens"] if t.get("name") == "admin"))
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(
            {
                "receipt_key": secrets.token_hex(32),
                "tokens": [{"name": "admin", "token": token, "grants": ["*:admin"]}],
            },
            f,
            indent=2,
        )
    return token


def _import_examples(store: Store, examples: Path) -> list[str]:
    """Publish each example skill the example agent's shared scope does not hold yet."""
    scope = Scope.shared(EXAMPLE_AGENT)
    have = set(store.skills(scope))
    added = []
    for directory in find_skill_dirs(examples):
        if directory.name in have:
            continue
        files = {
            p.relative_to(directory).as_posix(): File(p.read_bytes(), mode=p.stat().st_mode & 0o777)
            for p in sorted(directory.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }
        store.publish(scope, directory.name, files)
        added.append(directory.name)
    return added


def run_examples(
    examples: Path,
    store: StoreOption = None,
    grpc: GrpcOption = "127.0.0.1:7070",
    http: HttpOption = "127.0.0.1:7080",
) -> None:
    """Start a server on the local store with the example skills; print where and how."""
    from skillfs.server.app import ServerConfig, SkillfsServer, setup_logging

    setup_logging("warning")
    url = store or default_url()
    tokens = DEFAULT_PATH.parent / "tokens.json"
    admin = _dev_tokens(tokens)
    config = ServerConfig(store=url, grpc=grpc, http=http, tokens=tokens)
    try:
        server = SkillfsServer(config)
        added = _import_examples(server.store, examples)
    except SkillfsError as exc:
        raise fail(str(exc)) from None

    def announce() -> None:
        host = grpc.rpartition(":")[0]
        grpc_url = f"grpc://{host}:{server.grpc_port}"
        console_url = f"http://{http.rpartition(':')[0]}:{server.http_port}/"
        scope = f"shared:{EXAMPLE_AGENT}"
        out.print(f"store          {escape(server.store.url)}")
        out.print(
            f"examples       {escape(scope)}: "
            + (f"imported {', '.join(added)}" if added else "already there")
        )
        out.print(f"gRPC           {grpc_url}")
        out.print(f"console        {console_url}")
        out.print(f"admin token    {admin}    (from {escape(str(tokens))})")
        out.print(
            f"try            SKILLFS_TOKEN={admin} skillfs ls --store {grpc_url} --scope {scope}"
        )
        out.print("Ctrl-C stops the server.", style="dim")

    server.serve(announce)
