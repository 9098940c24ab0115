"""`skillfs serve` (the server as deployments run it) and `skillfs run` (what `make run` starts:
a server on the embedded SQLite store with the example skills and a local admin token).

The server modules (gRPC, Prometheus) are imported only when one of these runs, so the other
commands start fast."""

from __future__ import annotations

import errno
import json
import os
import secrets
import shlex
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from skillfs.api import Store
from skillfs.auth import ENV_TOKENS
from skillfs.cli.common import StoreOption, duration, err, fail, out, shown
from skillfs.cli.transfer import read_source, skill_sources
from skillfs.errors import SkillfsError
from skillfs.governance.edits import ImportPolicy
from skillfs.model import Scope
from skillfs.model.ops import WriteOptions
from skillfs.store.limits import Limits
from skillfs.store.opening import DEFAULT_PATH, default_url

if TYPE_CHECKING:
    from skillfs.server.app import ServerConfig, SkillfsServer
    from skillfs.server.curator import CurateConfig

#: The agent whose shared scope `skillfs run` fills with the example skills: the one the
#: README's snippets and docs/cli.md's examples use, so what they publish shows in the
#: console `make run` opens.
EXAMPLE_AGENT = "support-bot"

GrpcOption = Annotated[str, typer.Option("--grpc", metavar="HOST:PORT", help="The gRPC port.")]
HttpOption = Annotated[
    str,
    typer.Option(
        "--http",
        metavar="HOST:PORT",
        help="The HTTP port: the admin console at /, and /status, /metrics, /healthz, /readyz.",
    ),
]

NO_TOKENS = (
    "no tokens: pass --tokens FILE, or set $SKILLFS_TOKENS to the tokens document itself (its "
    "text, not a path). A tokens file is "
    "YAML, e.g. `tokens: [{name: ops, token: <16+ random characters>, grants: ['*:admin']}]` "
    '(docs/server.md, "Tokens and grants"); for a local dev server with an admin token made '
    "for you, run `skillfs run` instead"
)


def _url(scheme: str, host_port: str, port: int | None) -> str:
    """How a person reaches a listening address: a wildcard host becomes localhost."""
    host = host_port.rpartition(":")[0]
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "localhost"
    return f"{scheme}://{host}:{port}"


def _check_free(address: str, what: str, option: str) -> None:
    """HOST:PORT, said as bad usage before anything starts (a bad port was a traceback); then
    one line when another process listens there (docs/cli.md): gRPC's own bind error is a
    C-core log line and a traceback. Port 0 (any free port) needs no check; other bind errors
    are left to the server to report."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise typer.BadParameter(
            f"{address!r}: give HOST:PORT, the port a number from 1 to 65535 (0: any free port)",
            param_hint=option,
        )
    if int(port) == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, int(port)), family=family):
            pass
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise fail(
                f"cannot listen on {address} for {what}: the port is in use; stop what holds "
                f"it, or pick another port with {option} HOST:PORT"
            ) from None


def _server(config: ServerConfig) -> SkillfsServer:
    """The server over `config`, or one line on stderr saying why not (exit 1)."""
    from skillfs.server.app import SkillfsServer

    _check_free(config.grpc, "gRPC", "--grpc")
    if config.http:
        _check_free(config.http, "HTTP", "--http")
    try:
        return SkillfsServer(config)
    except SkillfsError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:  # the tokens file or a TLS file cannot be read
        where = f": {exc.filename}" if exc.filename else ""
        raise fail(f"{exc.strerror or exc}{where}") from None
    except RuntimeError as exc:  # grpcio: "Failed to bind to address HOST:PORT; set ..."
        reason = str(exc).split(";")[0]
        raise fail(f"cannot listen on {config.grpc} for gRPC: {reason}") from None


def ready_line(server: SkillfsServer) -> str:
    """The one human line `skillfs serve` prints once it serves."""
    tls = server.config.tls_cert is not None
    line = (
        f"skillfs serving {server.store.url}: gRPC at "
        f"{_url('grpcs' if tls else 'grpc', server.config.grpc, server.grpc_port)}"
    )
    if server.config.http:
        console = _url("https" if tls else "http", server.config.http, server.http_port)
        line += f", admin console at {console}/"
    return line + " (Ctrl-C stops it)"


def serve(
    store: StoreOption = None,
    grpc: GrpcOption = "0.0.0.0:7070",
    http: HttpOption = "0.0.0.0:7080",
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            metavar="FILE",
            show_default=False,
            help="Tokens and grants (default: $SKILLFS_TOKENS, which holds the document itself, "
            "not a path).",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option("--tls-cert", metavar="FILE", show_default=False, help="PEM certificate."),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option("--tls-key", metavar="FILE", show_default=False, help="PEM private key."),
    ] = None,
    grace: Annotated[
        float, typer.Option(metavar="SECONDS", help="How long calls get to finish on SIGTERM.")
    ] = 10.0,
    max_workers: Annotated[
        int,
        typer.Option(
            metavar="N",
            min=1,
            help="Threads for blocking store calls; the store's pool is sized from it.",
        ),
    ] = 64,
    max_streams_per_token: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            show_default=False,
            help="Open ReadFile/UploadBlob/Publish/ListBlobs streams of one token (default "
            "10,000; docs/server.md, Limits).",
        ),
    ] = None,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning or error.")
    ] = "info",
    curate_every: Annotated[
        str | None,
        typer.Option(
            "--curate-every",
            metavar="DURATION",
            show_default=False,
            help="Curate every agent this often (7d, 12h): one server of those over the store "
            "runs it, elected by a lease (docs/governance.md). Off by default.",
        ),
    ] = None,
    curate_idle: Annotated[
        str,
        typer.Option(
            "--curate-idle",
            metavar="DURATION",
            help="With --curate-every: curate only agents whose workers have not used their "
            "skills, nor anyone committed to them, for this long (0: any).",
        ),
    ] = "2h",
    scope_quota: Annotated[
        int,
        typer.Option(
            "--scope-quota",
            metavar="BYTES",
            min=0,
            help="Bytes one scope may hold: manifests, history, blobs, usage (0: no quota; "
            "docs/security.md, Quotas). Give every server the same.",
        ),
    ] = Limits().scope_quota or 0,
    token_quota: Annotated[
        int,
        typer.Option(
            "--token-quota",
            metavar="BYTES",
            min=0,
            help="Bytes one token's writes may hold in one agent or market, unless its entry "
            "in the tokens file gives quota_bytes (0: no quota).",
        ),
    ] = Limits().token_quota or 0,
) -> None:
    """Run the server over a store: gRPC, and the admin console on the HTTP port.

    Stateless: run as many as you like over one store. Logs are JSON lines on stderr; one
    plain line says where it listens once it serves."""
    from skillfs.server.app import ServerConfig, setup_logging
    from skillfs.server.backend import Caps

    if tokens is None and not os.environ.get(ENV_TOKENS):
        raise fail(NO_TOKENS, code=2)  # a missing option, as the CLI's usage errors
    curate = _curate_config(curate_every, curate_idle)
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
        curate=curate,
        limits=Limits(scope_quota=scope_quota or None, token_quota=token_quota or None),
    )
    if max_streams_per_token is not None:
        config = config.model_copy(
            update={"caps": Caps(max_streams_per_token=max_streams_per_token)}
        )
    server = _server(config)
    server.serve(lambda: err.print(shown(ready_line(server)), highlight=False))


def _curate_config(every: str | None, idle: str) -> CurateConfig | None:
    """`--curate-every` and `--curate-idle` checked (bad ones exit 2 saying why)."""
    from skillfs.server.curator import CurateConfig

    if every is None:
        return None
    seconds = duration(every, "--curate-every")
    return CurateConfig(every=seconds, idle=duration(idle, "--curate-idle", zero=True))


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


#: The message of the versions `skillfs run` writes (it takes no --message: nobody asked it to
#: change anything but the examples it brings).
EXAMPLES_MESSAGE = "the example skills, added by `skillfs run`"


def _import_examples(store: Store, examples: Path) -> list[str]:
    """Import each example skill the example agent's shared scope does not hold yet (one an
    operator deleted or changed is left as it is)."""
    scope = Scope.shared(EXAMPLE_AGENT)
    have = set(store.skills(scope))
    sources = [  # as `skillfs import` reads them
        s for s in skill_sources(examples, store.limits) if s.name not in have
    ]
    done = store.edits.import_skills(
        scope,
        {s.name: read_source(s) for s in sources},
        source=str(examples.resolve()),
        policy=ImportPolicy.KEEP,
        options=WriteOptions(message=EXAMPLES_MESSAGE),
    )
    return [i.skill for i in done.skills if i.status == "created"]


def _short(path: Path) -> str:
    """A path as a person types it here: relative below the working directory, else absolute."""
    full = os.path.abspath(path)
    relative = os.path.relpath(full)
    return shlex.quote(full if relative.startswith("..") else relative)


def runnable() -> str:
    """How to run this `skillfs` from the working directory: `skillfs` when that name on PATH
    is this very program, else the path of the script running now (`.venv/bin/skillfs` when
    `make run` starts it from a virtualenv that is not activated)."""
    on_path = shutil.which("skillfs")
    script = Path(sys.argv[0])
    if script.name != "skillfs" or not script.is_file():  # python -c / -m: the venv's script
        script = Path(sys.executable).parent / "skillfs"
    if not script.is_file():
        return "skillfs"
    if on_path and os.path.samefile(on_path, script):
        return "skillfs"
    return _short(script)


def run_examples(
    examples: Path,
    store: StoreOption = None,
    grpc: GrpcOption = "127.0.0.1:7070",
    http: HttpOption = "127.0.0.1:7080",
) -> None:
    """Start a server on the local store with the example skills; print where and how."""
    from skillfs.server.app import ServerConfig, setup_logging

    setup_logging("warning")
    url = store or default_url()
    tokens = DEFAULT_PATH.parent / "tokens.json"
    admin = _dev_tokens(tokens)
    config = ServerConfig(store=url, grpc=grpc, http=http, tokens=tokens)
    server = _server(config)
    try:
        added = _import_examples(server.store, examples)
    except SkillfsError as exc:
        raise fail(str(exc)) from None

    def announce() -> None:
        host = grpc.rpartition(":")[0]
        grpc_url = f"grpc://{host}:{server.grpc_port}"
        console_url = f"http://{http.rpartition(':')[0]}:{server.http_port}/"
        scope = f"shared:{EXAMPLE_AGENT}"
        out.print(f"store          {shown(server.store.url)}")
        out.print(
            f"examples       {shown(scope)}: "
            + (f"imported {', '.join(added)}" if added else "already there")
        )
        out.print(f"gRPC           {grpc_url}")
        out.print(f"console        {console_url}")
        out.print(f"admin token    {admin}    (from {shown(str(tokens))})")
        out.print(
            f"try            SKILLFS_TOKEN={admin} {shown(runnable())} ls --store {grpc_url} "
            f"--scope {scope}"
        )
        out.print("Ctrl-C stops the server.", style="dim")

    server.serve(announce)
