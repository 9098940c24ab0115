"""A real PostgreSQL server for tests and benchmarks, from Debian's `postgresql` package.

Like the servers of support/servers.py: a child process in its own process group, listening
on 127.0.0.1 only on a free port, every wait bounded, ServerError with the log's tail. What
PostgreSQL needs besides:

- its binaries are under /usr/lib/postgresql/<version>/bin (not on PATH on a clean machine);
- `initdb` and `postgres` refuse to run as root: run as root, they run as the `postgres`
  user, in a data directory from `mkdtemp` owned by it (pytest's own temp root is closed to
  other users), so the directory is made here rather than given;
- the Unix socket goes in that directory (`-k`): the package's own cluster (15/main on
  5432) and its /var/run/postgresql are left alone;
- `kill()` is SIGKILL to the whole process group: killing only the postmaster leaves its
  backends holding shared memory, and the next start waits for them.

    with PostgresServer() as pg:      # started; stopped and its directory removed on exit
        pg.url                        # postgresql://skillfs:…@127.0.0.1:P/skillfs
        pg.kill(); pg.start()         # a crash, then crash recovery on the same data

`fsync=off` only spares the machine's disk: a killed server loses nothing the kernel holds,
which is what these tests crash (not the kernel).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import psycopg

from support.servers import (
    HOST,
    ServerError,
    _OneProcess,
    _Process,
    _wait_until,
    check_servers_allowed,
)

USER = "skillfs"
PASSWORD = "skillfs-test-password"
DATABASE = "skillfs"


def pg_bin(name: str) -> str:
    """A PostgreSQL program from the newest version installed."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=_version)
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise ServerError(f"{name} not found: apt-get install -y postgresql (make servers does)")


def _version(path: str) -> float:
    try:
        return float(Path(path).parents[1].name)
    except ValueError:
        return 0.0


def _as_owner() -> list[str]:
    """The command prefix that runs a program as the `postgres` user when we are root."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]


class PostgresServer(_OneProcess):
    """One PostgreSQL server with a database `skillfs` owned by the password user `skillfs`."""

    def __init__(self, port: int | None = None, *, name: str = "postgres") -> None:
        super().__init__(port, name)
        self.dir = Path(tempfile.mkdtemp(prefix="skillfs-pg-"))
        self.data = self.dir / "data"
        self._initialized = False

    @property
    def url(self) -> str:
        return self.url_of(DATABASE)

    def url_of(self, database: str) -> str:
        return f"postgresql://{USER}:{PASSWORD}@{HOST}:{self.port}/{database}"

    def _initdb(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        os.chmod(self.dir, 0o700)
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        argv = [
            *_as_owner(), pg_bin("initdb"), "-D", str(self.data), "-U", USER,
            f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
            "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=self.dir)
        if done.returncode != 0:
            raise ServerError(f"initdb failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        pwfile.unlink()
        self._initialized = True

    def _argv(self) -> list[str]:
        return [
            *_as_owner(), pg_bin("postgres"), "-D", str(self.data), "-k", str(self.dir),
            "-p", str(self.port), "-c", f"listen_addresses={HOST}", "-c", "fsync=off",
            "-c", "max_connections=300", "-c", "shared_buffers=32MB",
        ]  # fmt: skip

    def _launch(self) -> None:
        self._proc = _Process(f"{self.name}:{self.port}", self._argv(), self.dir / "postgres.log")
        self._proc.launch()

    def _wait_ready(self, deadline: float) -> None:
        proc = self._proc
        assert proc is not None

        def ours_answers() -> bool:  # the answer must come from our data directory
            with self.admin() as conn:
                row = conn.execute("SHOW data_directory").fetchone()
                return row is not None and Path(row[0]).resolve() == self.data.resolve()

        _wait_until(f"{proc.name} to accept connections", ours_answers, deadline, [proc])
        self._ever_started = True

    def admin(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection as the owner, with a short timeout (use it in a `with`)."""
        return psycopg.connect(
            self.url_of("postgres"),
            autocommit=True,
            connect_timeout=2,
            **kwargs,
        )

    def start(self, timeout: float = 60.0) -> Self:
        """initdb on first start, then start and wait until it answers; ServerError otherwise."""
        if self.running:
            return self
        check_servers_allowed(self.name)
        t0 = time.monotonic()
        if not self._initialized:
            self._initdb()
        self._start_process(timeout)
        with self.admin() as conn:
            exists = "SELECT 1 FROM pg_database WHERE datname = %s"
            if not conn.execute(exists, (DATABASE,)).fetchone():
                conn.execute(f"CREATE DATABASE {DATABASE}")
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (SIGINT: sessions are ended, not waited for), SIGKILL after
        `timeout`. Idempotent."""
        if self._proc is not None and self._proc.popen is not None:
            if self._proc.popen.returncode is None:
                self._proc._killpg(signal.SIGINT)
            self._proc.wait_exit(timeout)

    def kill(self) -> None:
        """SIGKILL to the process group (postmaster and backends): a crash."""
        super().kill()

    def remove(self) -> None:
        """Stop and delete the data directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.remove()
            raise

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"PostgresServer({self.url}, running={self.running})"
