"""THE curation scenario (docs/governance.md, "Curation"): three real `skillfs serve
--curate-every 2s --curate-idle 0` processes over one Redis and over one etcd elect one
runner per interval with a lease in the store — exactly one run per interval, counted from
the servers' own "curation run" log lines — and when the runner is killed (SIGKILL) its lease
expires and another server takes over."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import InvalidPath
from skillfs.server.curator import LEASE, CurateConfig, Curator
from support.grpc_servers import ServerProcess, wait_health, write_tokens
from tests.cli_helpers import process
from tests.helpers import skill_md
from tests.stores import url_for

# Runs are counted against the clock (one per interval, a killed runner replaced once its
# lease expires), with three `skillfs serve` processes starting at once: alone, not beside
# other tests (make test's serial lane).
pytestmark = pytest.mark.serial

EVERY = 2.0  # etcd counts a lease in whole seconds, at least ~2 s
#: How far a run may start after the interval ends: the losers try every EVERY / 10 seconds,
#: etcd expires leases on its own checks (every 500 ms), and a loaded machine adds slack.
LATE = 1.5
#: How much earlier than EVERY after the last one a run's log line may be. Two runners of one
#: interval would log within a poll (EVERY / 10) of each other; half an interval tells them
#: from a log line written late (on a loaded machine a server stalled 0.39 s between taking
#: the lease and logging it). That a lease lasts its TTL is the engines' lease tests'
#: (tests/engines/test_lease.py).
EARLY = EVERY / 2


def _runs(servers: list[ServerProcess]) -> list[tuple[float, int]]:
    """Every "curation run" line of the servers' logs: (time, pid of its server), in order."""
    found = []
    for server in servers:
        for line in server.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("msg") == "curation run":
                    found.append((float(entry["ts"]), int(entry["holder"].split(":")[1])))
    return sorted(found)


def _wait_runs(servers: list[ServerProcess], count: int, limit: float) -> list[tuple[float, int]]:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        runs = _runs(servers)
        if len(runs) >= count:
            return runs
        time.sleep(0.05)
    raise AssertionError(f"{len(_runs(servers))} curation runs after {limit}s, wanted {count}")


def _one_per_interval(runs: list[tuple[float, int]]) -> None:
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(runs)]
    assert all(EVERY - EARLY <= gap <= EVERY + LATE for gap in gaps), gaps


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["redis", "etcd"])
def test_three_servers_one_runner(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(request, engine, tmp_path)
    shared = Scope.shared("support-bot")
    then = time.time() - 200 * 86400
    with skillfs.open_store(url, clock=lambda: then) as old:
        old.publish(shared, "idle", {"SKILL.md": skill_md("idle")})
        old.publish(shared, "used", {"SKILL.md": skill_md("used")})
        old.usage.record("support-bot", {("alice", "used"): 1}, {("alice", "used"): time.time()})
    args = ("--curate-every", f"{EVERY:g}s", "--curate-idle", "0")
    servers = [ServerProcess(url, tmp_path / f"s{i}", args=args) for i in range(3)]
    try:
        for server in servers:
            server.start(wait=False)
        for server in servers:
            wait_health(server.address, "SERVING")
        with skillfs.open_store(url) as store:
            runs = _wait_runs(servers, 4, 4 * EVERY + 30)
            _one_per_interval(runs)
            archived = store.governance.audit("support-bot", skill="idle")[0]
            assert archived.action == "archive" and archived.actor.startswith("curator:")
            assert store.skills(shared) == ["used"]  # archived once, the used one kept
            # kill the runner of the latest run while it holds the lease
            by_pid = {s.proc.pid: s for s in servers if s.proc is not None}
            last_at, runner = runs[-1]
            by_pid[runner].kill()
            after = _wait_runs(servers, len(runs) + 2, 3 * EVERY + 20)[len(runs) :]
            assert all(pid != runner for _, pid in after)  # the others took over
            _one_per_interval([(last_at, runner), *after])  # once its lease expired
    finally:
        for server in servers:
            server.stop()


def test_curate_idle_skips_an_agent_edited_lately(tmp_path: Path) -> None:
    """`--curate-idle`: an agent with a skill committed within it is left for a later run."""
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    then = time.time() - 200 * 86400
    with skillfs.open_store(url, clock=lambda: then) as old:
        for agent in ("quiet-bot", "busy-bot"):
            old.publish(Scope.shared(agent), "idle", {"SKILL.md": skill_md("idle")})
    with skillfs.open_store(url) as store:
        store.publish(Scope.shared("busy-bot"), "new", {"SKILL.md": skill_md("new")})
        curator = Curator(store, CurateConfig(every=3600, idle=7200))
        assert curator.run_once()
        assert store.skills(Scope.shared("quiet-bot")) == []  # archived
        assert store.skills(Scope.shared("busy-bot")) == ["idle", "new"]  # edited just now
        assert Curator(store, CurateConfig(every=3600, idle=0)).run_once()
        assert store.skills(Scope.shared("busy-bot")) == ["new"]


def test_curation_needs_a_store_with_leases(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = url_for(request, "grpc", tmp_path)
    with (
        skillfs.open_store(url) as store,
        pytest.raises(InvalidPath, match="not supported over grpc://"),
    ):
        Curator(store, CurateConfig(every=60))
    served = process(
        "serve", "--store", url, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
        "--tokens", str(write_tokens(tmp_path)), "--curate-every", "1d",
    )  # fmt: skip
    assert served.returncode == 1
    assert served.stderr.strip().splitlines()[-1].startswith("error: leases are not supported")
    bad = process("serve", "--store", "memory://", "--curate-every", "7x", SKILLFS_TOKENS="{}")
    assert bad.returncode == 2 and "invalid --curate-every '7x'" in bad.stderr


def test_a_run_keeps_the_lease_unless_it_stopped_early(tmp_path: Path) -> None:
    """A finished run keeps the lease for its interval; a run stopped before its end (the
    server shutting down) gives it back, so another server runs at its next try."""
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    with skillfs.open_store(url) as store, skillfs.open_store(url) as other:
        store.publish(Scope.shared("support-bot"), "a", {"SKILL.md": skill_md("a")})
        curator = Curator(store, CurateConfig(every=3600, idle=0))
        assert store.engine.acquire_lease(LEASE, curator.holder, 3600)
        curator._run()  # to its end
        assert not other.engine.acquire_lease(LEASE, "another-server", 3600)
        curator.stop()  # stopping: the next run ends before its first agent
        curator._run()
        assert other.engine.acquire_lease(LEASE, "another-server", 3600)


def test_two_curators_in_turn(tmp_path: Path) -> None:
    """Curators over one SQLite file (each its own engine, as processes would have): one run
    per interval between them, the lease going to whichever asks first once it expires."""
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    every = 0.5
    stores = [skillfs.open_store(url) for _ in range(2)]
    stores[0].publish(Scope.shared("support-bot"), "a", {"SKILL.md": skill_md("a")})
    curators = [Curator(s, CurateConfig(every=every, idle=0)) for s in stores]
    started = time.monotonic()
    for curator in curators:
        curator.start()
    time.sleep(5 * every + 0.2)
    for curator in curators:
        curator.stop()
    elapsed = time.monotonic() - started
    runs = sum(c.runs for c in curators)
    # one run per interval: a run every 0.5 s (+ a try's 50 ms), never two in one interval
    assert int(elapsed / (every + 0.25)) <= runs <= int(elapsed / every) + 1, (runs, elapsed)
    for s in stores:
        s.close()
