"""Real Redis, Redis Cluster, Redis Sentinel and etcd servers for tests and benchmarks.

Plain classes, no pytest: fault tests, benchmarks (bench/) and multi-process checkers import
them too. Every server is a child process listening on 127.0.0.1 only, on a free port, with its
data and its log (``*.log``) in a directory the caller gives. Each process runs in its own
process group (so ``kill`` also reaches any child it forked) and, when started from the main
thread, gets SIGKILL from the kernel if the Python process dies (``setpriv --pdeathsig``); an
``atexit`` hook kills whatever is still running. Every wait is bounded: a server that does not
come up raises ``ServerError`` carrying the tail of its log.

    with RedisServer(tmp / "r", appendonly=True) as r:    # started; stopped on exit
        r.client().set("k", b"v"); r.kill(); r.restart()

URL forms (what ``skillfs.open_store`` parses):

    redis://127.0.0.1:P/0                                       RedisServer.url
    redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3      RedisCluster.url
    redis+sentinel://127.0.0.1:S[,127.0.0.1:S2...]/m/0          RedisSentinel.url
    etcd://127.0.0.1:C1[,127.0.0.1:C2...]                       EtcdServer.url / EtcdCluster.url
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

import etcd3
import redis
from etcd3 import etcdrpc
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as RedisClusterClient
from redis.retry import Retry
from redis.sentinel import Sentinel

HOST = "127.0.0.1"
CLIENT_TIMEOUT = 5.0  # seconds, for every client these classes hand out
_POLL = 0.05  # seconds between readiness probes
#: When set (to a reason), every server of this module and of support/grpc_servers.py refuses
#: to start with ServerError: `make check` runs `pytest --no-servers`, which sets it.
NO_SERVERS_ENV = "SKILLFS_TEST_NO_SERVERS"
#: "INDEX/COUNT": this test run's part of the port range (see `free_port`).
PORTS_ENV = "SKILLFS_TEST_PORTS"

__all__ = [
    "HOST",
    "NO_SERVERS_ENV",
    "EtcdCluster",
    "EtcdServer",
    "RedisCluster",
    "RedisSentinel",
    "RedisServer",
    "ServerError",
    "check_servers_allowed",
    "free_port",
]


class ServerError(RuntimeError):
    """A server did not start or did not become ready; the message ends with its log tail."""

    def __init__(self, message: str, *, port_in_use: bool = False) -> None:
        super().__init__(message)
        self.port_in_use = port_in_use


def check_servers_allowed(what: str) -> None:
    """Raise ServerError if servers are switched off ($SKILLFS_TEST_NO_SERVERS)."""
    reason = os.environ.get(NO_SERVERS_ENV)
    if reason:
        raise ServerError(f"{what} not started: {reason}")


# --------------------------------------------------------------------------- ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


_rng = random.Random()  # own instance: tests that seed the global `random` must not pick our ports
_handed_out: set[int] = set()
_ports_lock = threading.Lock()


def _part(first: int, last: int, index: int, count: int) -> tuple[int, int]:
    if count <= 1 or not 0 <= index < count:
        return first, last
    size = (last - first + 1) // count
    return first + index * size, first + (index + 1) * size - 1


def _worker_slice(first: int, last: int) -> tuple[int, int]:
    """This pytest run's and pytest-xdist worker's own part of [first, last], so two workers,
    or two runs started side by side, never pick the same port: $SKILLFS_TEST_PORTS ("1/2":
    the second of two parts; `make test` gives its two lanes one each), then the worker's
    share of that. Processes a test starts inherit their worker's part."""
    try:
        index, count = (int(n) for n in os.environ.get(PORTS_ENV, "0/1").split("/"))
    except ValueError:
        index, count = 0, 1
    first, last = _part(first, last, index, count)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(worker.removeprefix("gw"))
    except ValueError:
        return first, last
    return _part(first, last, index, count)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now.

    Chosen at random below the kernel's ephemeral range, so outgoing connections (which take
    their local port from that range) cannot grab it before the server binds it, and never the
    same port twice in one process; under pytest-xdist, from this worker's own slice of that
    range. Servers still retry with new ports if they lose a race.
    """
    lo, _hi = _ephemeral_range()
    first, last = (10000, lo - 1) if lo > 11000 else (_ephemeral_range()[1] + 1, 65535)
    first, last = _worker_slice(first, last)
    with _ports_lock:
        for _ in range(1000):
            port = _rng.randint(first, last)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((HOST, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise ServerError(f"no free port found in {first}-{last}")


def _tcp_open(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- processes

_live: set[_Process] = set()
_live_lock = threading.Lock()
_SETPRIV = shutil.which("setpriv")


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        procs = list(_live)
    for p in procs:
        p.kill()


class _Process:
    """One server process in its own process group, output appended to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.popen: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def launch(self) -> None:
        check_servers_allowed(self.name)
        if shutil.which(self.argv[0]) is None:
            raise ServerError(
                f"{self.argv[0]} not found on PATH: apt-get install -y "
                "redis-server redis-sentinel etcd-server etcd-client"
            )
        self.log.parent.mkdir(parents=True, exist_ok=True)
        prefix: list[str] = []
        # PR_SET_PDEATHSIG fires when the *thread* that forked exits, so only from the main one.
        if _SETPRIV and threading.current_thread() is threading.main_thread():
            prefix = [_SETPRIV, "--pdeathsig", "KILL", "--"]
        with open(self.log, "ab") as log:
            self._log_offset = log.tell()
            log.write(f"=== {time.strftime('%H:%M:%S')} {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                prefix + self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.log.parent,
                env=self.env,
                start_new_session=True,
            )
        with _live_lock:
            _live.add(self)

    def _exit_status(self) -> str | None:
        """How the process ended ("exit code 1", "signal 9"), None while it runs.

        Never reaps it: while the exited leader is a zombie its pid (the group id) cannot be
        reused, so signalling the group can only reach our own processes.
        """
        p = self.popen
        if p is None:
            return "never started"
        if p.returncode is not None:
            rc = p.returncode
            return f"exit code {rc}" if rc >= 0 else f"signal {-rc}"
        try:
            info = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return "gone"
        if info is None:
            return None
        if info.si_code == os.CLD_EXITED:
            return f"exit code {info.si_status}"
        return f"signal {info.si_status}"

    @property
    def running(self) -> bool:
        return self._exit_status() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.running and self.popen else None

    def _killpg(self, sig: int) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def terminate(self) -> None:
        """Ask the process to exit (SIGTERM); see ``wait_exit``."""
        if self.popen is not None and self.popen.returncode is None:
            self._killpg(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> None:
        """Wait (bounded) for the process to exit, SIGKILL it if it will not, and reap the group."""
        p = self.popen
        if p is None:
            return
        if p.returncode is None:
            deadline = time.monotonic() + timeout
            while self.running and time.monotonic() < deadline:
                time.sleep(0.02)
            self._killpg(signal.SIGKILL)  # the leader if it hung, or any child it left behind
            p.wait(timeout=10)
        with _live_lock:
            _live.discard(self)

    def stop(self, timeout: float = 10.0) -> None:
        self.terminate()
        self.wait_exit(timeout)

    def kill(self) -> None:
        """SIGKILL the process group, no grace (a crash, for fault tests)."""
        if self.popen is not None and self.popen.returncode is None:
            self._killpg(signal.SIGKILL)
        self.wait_exit(10.0)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines this process (its latest launch) wrote to its log."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode(errors="replace")
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self, waiting_for: str) -> None:
        """Raise ServerError (with the log tail) if the process has exited."""
        status = self._exit_status()
        if self.popen is not None and status is not None:
            tail = self.log_tail()
            raise ServerError(
                f"{self.name} ended ({status}) while waiting for {waiting_for}; "
                f"{self.log}:\n{tail}",
                port_in_use="address already in use" in tail.lower(),
            )


def _wait_until(
    what: str,
    check: Callable[[], Any],
    deadline: float,
    procs: Iterable[_Process] = (),
) -> Any:
    """Poll ``check`` until it returns a truthy value, a process dies, or the deadline passes."""
    procs = list(procs)
    last = "no answer yet"
    while True:
        for p in procs:
            p.check_alive(what)
        try:
            result = check()
            if result:
                return result
            last = f"not yet: {result!r}"
        except Exception as e:  # a server still starting answers with all sorts of errors
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {p.name} ({p.log}):\n{p.log_tail()}" for p in procs)
            raise ServerError(f"timed out waiting for {what} (last probe: {last}){tails}")
        time.sleep(_POLL)


def _start_with_retries(start_once: Callable[[], None], repick: Callable[[], None] | None) -> None:
    """Run ``start_once``; if it lost a port race and ports are ours to choose, try new ones."""
    for attempt in range(3):
        try:
            start_once()
            return
        except ServerError as e:
            if not (e.port_in_use and repick is not None and attempt < 2):
                raise
            repick()


# --------------------------------------------------------------------------- Redis


def _redis_ping(port: int) -> bool:
    """PING over a raw socket: no client retries; a server still loading (-LOADING) is not ready."""
    with socket.create_connection((HOST, port), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith(b"+PONG")


def _admin(port: int) -> redis.Redis:
    """A short-timeout, no-retry client for probing (use it in a ``with``)."""
    return redis.Redis(
        HOST,
        port,
        socket_timeout=2,
        socket_connect_timeout=1,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )


class _OneProcess:
    """What a server of one process shares (RedisServer, support/postgres.py's
    PostgresServer): its port, free and ours to change until it first answers, its process,
    and starting it (launch, wait until it answers, stop it if it does not, and try a new port
    after a lost port race). A subclass launches, waits and stops in its own way."""

    def __init__(self, port: int | None, name: str) -> None:
        self.name = name
        self._choose_port = port is None
        self.port = port if port is not None else free_port()
        self.startup_seconds: float | None = None
        self._proc: _Process | None = None
        self._ever_started = False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.running

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _launch(self) -> None:
        raise NotImplementedError

    def _wait_ready(self, deadline: float) -> None:
        """Until it answers (by `deadline`); then `_ever_started`."""
        raise NotImplementedError

    def stop(self, timeout: float = 10.0) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self._proc is not None:
            self._proc.kill()

    def _repick(self) -> None:
        self.stop()
        self.port = free_port()

    def _start_process(self, timeout: float) -> None:
        def once() -> None:
            try:
                self._launch()
                self._wait_ready(time.monotonic() + timeout)
            except BaseException:
                self.stop()
                raise

        can_repick = self._choose_port and not self._ever_started
        _start_with_retries(once, self._repick if can_repick else None)


class RedisServer(_OneProcess):
    """One redis-server.

    ``appendonly=True`` runs with ``--appendonly yes --appendfsync always`` (every acknowledged
    write is on disk: ``kill()`` then ``restart()`` must keep it). ``replicaof=(host, port)``
    starts it as a replica. ``extra_args`` are appended to the command line.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        port: int | None = None,
        appendonly: bool = False,
        replicaof: tuple[str, int] | None = None,
        *,
        extra_args: Iterable[str] = (),
        name: str = "redis",
    ) -> None:
        super().__init__(port, name)
        self.dir = Path(dir)
        self.host = HOST
        self.appendonly = appendonly
        self.replicaof = replicaof
        self.extra_args = list(extra_args)

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.name}.log"

    def _argv(self) -> list[str]:
        argv = [
            "redis-server",
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--repl-diskless-sync-delay", "0",  # replicas sync at once, not after 5 s
        ]  # fmt: skip
        if self.appendonly:
            argv += ["--appendfsync", "always"]
        if self.replicaof:
            argv += ["--replicaof", self.replicaof[0], str(self.replicaof[1])]
        return argv + self.extra_args

    def _launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._proc = _Process(f"{self.name}:{self.port}", self._argv(), self.log_path)
        self._proc.launch()

    def _wait_ready(self, deadline: float) -> None:
        proc = self._proc
        assert proc is not None

        def ours_answers() -> bool:  # the PONG must come from our process, not a port thief
            if not _redis_ping(self.port):
                return False
            with _admin(self.port) as r:
                return bool(r.info("server")["process_id"] == proc.pid)

        _wait_until(f"{proc.name} to answer PING", ours_answers, deadline, [proc])
        self._ever_started = True

    def start(self, timeout: float = 30.0) -> Self:
        """Start (no-op if running) and wait until PING answers; ServerError otherwise."""
        if self.running:
            return self
        t0 = time.monotonic()
        self._start_process(timeout)
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop (SIGTERM, SIGKILL after ``timeout``). Idempotent."""
        if self._proc is not None:
            self._proc.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work (AOF fsync, RDB save) happens."""
        super().kill()

    def restart(self, timeout: float = 30.0) -> Self:
        """Stop (if running) and start again on the same port with the same data directory."""
        self.stop()
        return self.start(timeout)

    def client(self, **kwargs: Any) -> redis.Redis:
        options: dict[str, Any] = {
            "socket_timeout": CLIENT_TIMEOUT,
            "socket_connect_timeout": CLIENT_TIMEOUT,
        }
        return redis.Redis(HOST, self.port, db=0, **(options | kwargs))

    def flush(self) -> None:
        """FLUSHALL: an empty server for the next test."""
        with _admin(self.port) as r:
            r.flushall()

    def log_tail(self, lines: int = 30) -> str:
        return self._proc.log_tail(lines) if self._proc else ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisServer({self.url}, running={self.running})"


class RedisCluster:
    """A Redis Cluster of ``masters`` masters and no replicas, all 16384 slots assigned.

    Formed with ``redis-cli --cluster create``. ``nodes`` are RedisServer objects (node ``i``
    in ``dir/n{i+1}``), so a fault test can ``kill()`` / ``restart()`` one; ``wait_ok()``
    waits for the cluster to be whole again.
    """

    def __init__(
        self, dir: str | os.PathLike[str], masters: int = 3, *, node_timeout_ms: int = 3000
    ) -> None:
        if masters < 3:
            raise ValueError("redis-cli --cluster create needs at least 3 masters")
        self.dir = Path(dir)
        self.masters = masters
        self.node_timeout_ms = node_timeout_ms
        self.startup_seconds: float | None = None
        self._formed = False
        self.nodes: list[RedisServer] = []
        self._make_nodes()

    def _make_nodes(self) -> None:
        self.nodes = []
        for i in range(self.masters):
            args = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(free_port()),  # the bus; the default P+10000 may be > 65535
                "--cluster-node-timeout", str(self.node_timeout_ms),
            ]  # fmt: skip
            node = RedisServer(self.dir / f"n{i + 1}", port=free_port(), extra_args=args)
            self.nodes.append(node)

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in self.ports)

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    def _start_once(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            for n in self.nodes:
                if not n.running:
                    n._launch()
            for n in self.nodes:
                n._wait_ready(deadline)
            if not self._formed:
                self._create(deadline)
            self.wait_ok(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise

    def _create(self, deadline: float) -> None:
        argv = ["redis-cli", "--cluster", "create", *(f"{HOST}:{p}" for p in self.ports)]
        argv += ["--cluster-replicas", "0", "--cluster-yes"]
        log = self.dir / "cluster-create.log"
        try:
            out = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            partial = "".join(
                x.decode(errors="replace") if isinstance(x, bytes) else x
                for x in (e.stdout, e.stderr)
                if x
            )
            log.write_text(f"{' '.join(argv)}\n{partial}")
            tail = "\n".join(partial.splitlines()[-20:])
            raise ServerError(f"{' '.join(argv)} timed out:\n{tail}") from e
        log.write_text(f"{' '.join(argv)}\n{out.stdout}{out.stderr}")
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).splitlines()[-20:])
            raise ServerError(f"{' '.join(argv)} failed ({out.returncode}):\n{tail}")
        self._formed = True

    def _repick(self) -> None:
        self.stop()
        for n in self.nodes:
            shutil.rmtree(n.dir, ignore_errors=True)  # nothing in them yet but a stale nodes.conf
        self._make_nodes()

    def start(self, timeout: float = 60.0) -> Self:
        """Start every node (in parallel), form the cluster once, wait until it is ok."""
        t0 = time.monotonic()
        _start_with_retries(
            lambda: self._start_once(timeout), None if self._formed else self._repick
        )
        self.startup_seconds = time.monotonic() - t0
        return self

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Wait until every node reports cluster_state:ok with all 16384 slots assigned and ok."""
        deadline = time.monotonic() + timeout

        def ok(n: RedisServer) -> bool:
            with _admin(n.port) as r:
                info = r.cluster("INFO")
            return (
                info.get("cluster_state") == "ok"
                and int(info.get("cluster_slots_assigned", 0)) == 16384
                and int(info.get("cluster_slots_ok", 0)) == 16384
                and int(info.get("cluster_known_nodes", 0)) == self.masters
            )

        for n in self.nodes:
            assert n._proc is not None
            _wait_until(f"cluster_state:ok on {n.address}", lambda n=n: ok(n), deadline, [n._proc])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node (in parallel). Idempotent."""
        for n in self.nodes:
            if n._proc:
                n._proc.terminate()
        for n in self.nodes:
            if n._proc:
                n._proc.wait_exit(timeout)

    def client(self, **kwargs: Any) -> RedisClusterClient:
        options: dict[str, Any] = {
            "socket_timeout": CLIENT_TIMEOUT,
            "socket_connect_timeout": CLIENT_TIMEOUT,
        }
        return RedisClusterClient(
            startup_nodes=[ClusterNode(HOST, p) for p in self.ports], **(options | kwargs)
        )

    def flush(self) -> None:
        """FLUSHALL on every master."""
        for n in self.nodes:
            n.flush()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisCluster({self.url}, running={self.running})"


class RedisSentinel:
    """A primary, one replica and one sentinel monitoring them as ``m`` (quorum 1).

    ``url`` is ``redis+sentinel://SENTINELS/SERVICE/DB``: the sentinels as comma-separated
    ``host:port`` pairs, then the monitored service name, then the database number, e.g.
    ``redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/m/0``.

    ``primary`` and ``replica`` are RedisServer objects: ``primary.kill()`` then
    ``wait_failover()`` (down-after 1 s, failover-timeout 3 s) promotes the replica; after it,
    ``primary`` is the promoted server and ``replica`` the old primary (still stopped).
    Meant to be started once: ``stop()`` ends it, no restart of the whole set.
    """

    service = "m"

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = Path(dir)
        self.primary = RedisServer(self.dir / "primary", name="redis")
        self.replica = RedisServer(
            self.dir / "replica", replicaof=(HOST, self.primary.port), name="redis"
        )
        self.sentinel_port = free_port()
        self.startup_seconds: float | None = None
        self._sentinel: _Process | None = None

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [(HOST, self.sentinel_port)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    @property
    def running(self) -> bool:
        return (self._sentinel is not None and self._sentinel.running) or self.primary.running

    def _write_conf(self) -> Path:
        sdir = self.dir / "sentinel"
        sdir.mkdir(parents=True, exist_ok=True)
        conf = sdir / "sentinel.conf"  # sentinel rewrites it: it must be a writable file
        m = self.service
        conf.write_text(
            f"port {self.sentinel_port}\n"
            f"bind {HOST}\n"
            f"dir {sdir}\n"
            "daemonize no\n"
            "sentinel resolve-hostnames no\n"
            f"sentinel monitor {m} {HOST} {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {m} 1000\n"
            f"sentinel failover-timeout {m} 3000\n"
        )
        return conf

    def start(self, timeout: float = 60.0) -> Self:
        """Primary and replica (in parallel), the replica in sync, then the sentinel seeing both."""
        if self._sentinel is not None:
            raise RuntimeError("RedisSentinel is started once; make a new one")
        t0 = time.monotonic()
        deadline = t0 + timeout
        try:
            self.primary._launch()
            self.replica._launch()
            self.primary._wait_ready(deadline)
            self.replica._wait_ready(deadline)
            assert self.replica._proc is not None

            def replica_synced() -> bool:
                with _admin(self.replica.port) as r:
                    return r.info("replication").get("master_link_status") == "up"

            _wait_until(
                f"replica {self.replica.address} in sync with {self.primary.address}",
                replica_synced, deadline, [self.replica._proc],
            )  # fmt: skip
            self._sentinel = _Process(
                f"sentinel:{self.sentinel_port}",
                ["redis-sentinel", str(self._write_conf())],
                self.dir / "sentinel" / "sentinel.log",
            )
            self._sentinel.launch()

            def sentinel_sees_both() -> bool:
                state = self._master_state()
                return state is not None and state["num-slaves"] >= 1

            _wait_until(
                f"sentinel {self.sentinel_port} to see the primary and the replica",
                sentinel_sees_both, deadline, [self._sentinel],
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _master_state(self) -> dict[str, Any] | None:
        """SENTINEL MASTER m, if the sentinel finds it healthy (as redis.sentinel checks it)."""
        with _admin(self.sentinel_port) as s:
            state: dict[str, Any] = s.sentinel_master(self.service)
        healthy = state["is_master"] and not state["is_sdown"] and not state["is_odown"]
        return state if healthy else None

    def master_address(self) -> tuple[str, int]:
        """The primary's address as the sentinel reports it now."""
        with _admin(self.sentinel_port) as s:
            host, port = s.sentinel_get_master_addr_by_name(self.service)
        return (host, int(port))

    def wait_failover(self, timeout: float = 30.0) -> tuple[str, int]:
        """Wait until the sentinel names a new primary that accepts writes; return its address."""
        old = self.primary.address
        assert self._sentinel is not None

        def promoted() -> tuple[str, int] | None:
            state = self._master_state()  # healthy, so that client() finds it at once
            if state is None or (state["ip"], int(state["port"])) == old:
                return None
            addr = (str(state["ip"]), int(state["port"]))
            with _admin(addr[1]) as r:
                return addr if r.execute_command("ROLE")[0] == "master" else None

        new = _wait_until(
            f"sentinel to fail over from {old}", promoted, time.monotonic() + timeout,
            [self._sentinel],
        )  # fmt: skip
        if new == self.replica.address:
            self.primary, self.replica = self.replica, self.primary
        return new

    def client(self, **kwargs: Any) -> redis.Redis:
        """The current primary, found through the sentinel (redis.sentinel.Sentinel)."""
        options: dict[str, Any] = {
            "socket_timeout": CLIENT_TIMEOUT,
            "socket_connect_timeout": CLIENT_TIMEOUT,
        }
        sentinel = Sentinel(self.sentinels, sentinel_kwargs=dict(options), **options)
        return sentinel.master_for(self.service, db=0, **(options | kwargs))

    def flush(self) -> None:
        """FLUSHALL on the current primary."""
        with self.client() as r:
            r.flushall()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop sentinel, primary and replica (in parallel). Idempotent."""
        procs = [self._sentinel, self.primary._proc, self.replica._proc]
        for p in procs:
            if p:
                p.terminate()
        for p in procs:
            if p:
                p.wait_exit(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisSentinel({self.url}, running={self.running})"


# --------------------------------------------------------------------------- etcd


def _etcd_env() -> dict[str, str]:
    # ETCD_* variables in the environment would silently reconfigure the member.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETCD_", "ETCDCTL_"))}
    if platform.machine() in ("aarch64", "arm64"):
        env["ETCD_UNSUPPORTED_ARCH"] = "arm64"  # etcd 3.4 refuses to start on arm64 otherwise
    return env


class EtcdCluster:
    """``members`` etcd members (3.4, from Debian), member ``i`` in ``dir/n{i+1}``.

    Heartbeat 50 ms, election timeout 500 ms: a new leader about a second after a kill.
    Methods taking ``i`` act on member ``i`` (0-based), or on all members when ``i`` is None.
    A member started again keeps its data directory and rejoins
    (``--initial-cluster-state existing``). Leaving a ``with`` block stops the members and
    deletes their ``data`` directories (etcd preallocates 128 MB of WAL per member); the logs
    stay.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        members: int = 3,
        *,
        heartbeat_ms: int = 50,
        election_ms: int = 500,
        args: tuple[str, ...] = (),
    ) -> None:
        self.dir = Path(dir)
        self.args = args  # more options of each member (`--quota-backend-bytes=…`)
        self.size = members
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.token = f"skillfs-test-{uuid.uuid4().hex[:12]}"
        self.names = [f"n{i + 1}" for i in range(members)]
        self.startup_seconds: float | None = None
        self._procs: list[_Process | None] = [None] * members
        self._pick_ports()

    def _pick_ports(self) -> None:
        self.client_ports = [free_port() for _ in range(self.size)]
        self.peer_ports = [free_port() for _ in range(self.size)]

    def _indices(self, i: int | None) -> list[int]:
        return list(range(self.size)) if i is None else [i]

    @property
    def endpoints(self) -> list[str]:
        return [f"{HOST}:{p}" for p in self.client_ports]

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(self.endpoints)

    def member_dir(self, i: int) -> Path:
        return self.dir / self.names[i]

    def log_path(self, i: int) -> Path:
        return self.member_dir(i) / "etcd.log"

    def running(self, i: int | None = None) -> bool:
        """Whether member ``i`` (or any member, when None) is running."""
        return any((p := self._procs[j]) is not None and p.running for j in self._indices(i))

    def pid(self, i: int) -> int | None:
        """Process id of member ``i`` while it runs."""
        p = self._procs[i]
        return p.pid if p is not None else None

    def _argv(self, i: int) -> list[str]:
        data = self.member_dir(i) / "data"
        state = "existing" if (data / "member").exists() else "new"
        cluster = ",".join(
            f"{n}=http://{HOST}:{p}" for n, p in zip(self.names, self.peer_ports, strict=True)
        )
        client_url = f"http://{HOST}:{self.client_ports[i]}"
        peer_url = f"http://{HOST}:{self.peer_ports[i]}"
        return [
            "etcd",
            "--name", self.names[i],
            "--data-dir", str(data),
            "--listen-client-urls", client_url,
            "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url,
            "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", cluster,
            "--initial-cluster-token", self.token,
            "--initial-cluster-state", state,
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
            "--logger", "zap",
            "--log-outputs", "stderr",
            *self.args,
        ]  # fmt: skip

    def _launch(self, i: int) -> None:
        self.member_dir(i).mkdir(parents=True, exist_ok=True)
        (self.member_dir(i) / "data").mkdir(mode=0o700, exist_ok=True)
        p = _Process(f"etcd {self.names[i]}:{self.client_ports[i]}", self._argv(i),
                     self.log_path(i), env=_etcd_env())  # fmt: skip
        self._procs[i] = p
        p.launch()

    def _raw_status(self, i: int, timeout: float = 1.0) -> Any:
        """Maintenance.Status of member ``i`` (header.member_id, leader, raft_term...)."""
        c = etcd3.client(HOST, self.client_ports[i], timeout=timeout)
        try:
            return c.maintenancestub.Status(etcdrpc.StatusRequest(), timeout)
        finally:
            c.close()

    def _serving(self, i: int, linearizable: bool) -> bool:
        # A fresh client per probe: a gRPC channel that saw "connection refused" backs off ~1 s+.
        if not _tcp_open(self.client_ports[i]):
            return False
        c = etcd3.client(HOST, self.client_ports[i], timeout=1.0)
        try:
            c.maintenancestub.Status(etcdrpc.StatusRequest(), 1.0)
            if linearizable:  # goes through the leader: the member is part of a working quorum
                c.get("skillfs-test-readiness-probe")
            return True
        finally:
            c.close()

    def _wait_serving(self, indices: list[int], deadline: float) -> None:
        quorum = sum(self.running(j) for j in range(self.size)) > self.size // 2
        for i in indices:
            p = self._procs[i]
            assert p is not None
            what = f"etcd member {self.names[i]} to serve" + (" reads" if quorum else "")
            _wait_until(what, lambda i=i: self._serving(i, quorum), deadline, [p])

    def _repick(self) -> None:
        self.stop()
        for i in range(self.size):
            shutil.rmtree(self.member_dir(i) / "data", ignore_errors=True)
        self.token = f"skillfs-test-{uuid.uuid4().hex[:12]}"
        self._pick_ports()

    def start(self, i: int | None = None, timeout: float = 30.0) -> Self:
        """Start member ``i`` (all members if None; those running are left alone) and wait.

        Ready means: each started member answers Status, and, when a majority of members is
        running, serves a linearizable read (so it has joined a quorum with a leader).
        """
        t0 = time.monotonic()
        indices = [j for j in self._indices(i) if not self.running(j)]
        fresh = not any((self.member_dir(j) / "data" / "member").exists() for j in range(self.size))

        def once() -> None:
            try:
                for j in indices:
                    self._launch(j)
                self._wait_serving(indices, time.monotonic() + timeout)
            except BaseException:
                for j in indices:
                    self.stop(j)
                raise

        _start_with_retries(once, self._repick if fresh and i is None else None)
        if i is None:
            self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self, i: int | None = None, timeout: float = 10.0) -> None:
        """Graceful stop (SIGTERM, then SIGKILL after ``timeout``). Idempotent.

        Stopping all: followers first, then the leader once it has stepped down. A leader
        stopped while it still counts its peers as live spends ~6 s trying to hand over.
        """
        indices = self._indices(i)
        leader = self._find_leader() if len(indices) > 1 else None
        self._terminate([j for j in indices if j != leader], timeout)
        if leader is not None:
            deadline = time.monotonic() + 4 * self.election_ms / 1000 + 1
            while time.monotonic() < deadline and self._find_leader() == leader:
                time.sleep(_POLL)  # CheckQuorum makes it step down about an election later
            self._terminate([leader], timeout)

    def _terminate(self, indices: list[int], timeout: float) -> None:
        procs = [p for j in indices if (p := self._procs[j]) is not None]
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait_exit(timeout)

    def kill(self, i: int | None = None) -> None:
        """SIGKILL member ``i`` (all if None): a crash."""
        for j in self._indices(i):
            if (p := self._procs[j]) is not None:
                p.kill()

    def restart(self, i: int | None = None, timeout: float = 30.0) -> Self:
        """Stop (if running) and start again with the same ports and data directory."""
        self.stop(i)
        return self.start(i, timeout)

    def _find_leader(self) -> int | None:
        """The running member that says it is the leader, if one does right now."""
        for j in range(self.size):
            if self.running(j):
                with contextlib.suppress(Exception):
                    st = self._raw_status(j)
                    if st.leader and st.leader == st.header.member_id:
                        return j
        return None

    def leader_index(self, timeout: float = 10.0) -> int:
        """Index of the member that is leader, waiting (bounded) for an election to finish."""

        def found() -> tuple[int] | None:  # a tuple: index 0 must count as found
            j = self._find_leader()
            return None if j is None else (j,)

        return int(_wait_until("an etcd leader", found, time.monotonic() + timeout)[0])

    def client(self, i: int = 0, timeout: float = CLIENT_TIMEOUT) -> etcd3.Etcd3Client:
        """An etcd3 client talking to member ``i`` only."""
        return etcd3.client(host=HOST, port=self.client_ports[i], timeout=timeout)

    def flush(self) -> None:
        """Delete every key (a range delete from "\\0" to the end)."""
        for j in range(self.size):
            if self.running(j):
                c = self.client(j)
                try:
                    c.kvstub.DeleteRange(
                        etcdrpc.DeleteRangeRequest(key=b"\0", range_end=b"\0"), c.timeout
                    )
                finally:
                    c.close()
                return
        raise ServerError("no etcd member is running")

    def log_tail(self, i: int, lines: int = 30) -> str:
        p = self._procs[i]
        return p.log_tail(lines) if p else ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for i in range(self.size):
            shutil.rmtree(self.member_dir(i) / "data", ignore_errors=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url}, running={self.running()})"


class EtcdServer(EtcdCluster):
    """A single etcd member; ``kill()`` / ``start()`` / ``restart()`` act on it."""

    def __init__(self, dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__(dir, members=1, **kwargs)

    @property
    def port(self) -> int:
        return self.client_ports[0]

    @property
    def endpoint(self) -> str:
        return self.endpoints[0]
