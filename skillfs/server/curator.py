"""`skillfs serve --curate-every 7d --curate-idle 2h` (docs/governance.md, "Curation"): the
servers of one deployment elect one runner per interval with a lease in the store, and the
runner archives every agent's idle skills.

The lease `curate` lives `every` seconds. Every server tries to take it each `tick`; the one
that gets it runs curation at once and keeps the lease (renewing it while the run lasts), so
no other server runs until the interval after the run is over. A runner killed mid-interval
holds the lease until it expires; then another server takes it and runs. A run that fails or
is stopped early gives the lease back, so another server retries at its next tick."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid

from pydantic import BaseModel, ConfigDict

from skillfs.api import Store
from skillfs.errors import SkillfsError, StoreUnavailable
from skillfs.governance.curation_report import ARCHIVE_AFTER, STALE_AFTER
from skillfs.model.ops import WriteOptions
from skillfs.util.durations import parse_duration

log = logging.getLogger("skillfs.server.curator")

#: The lease's name under the store's prefix (docs/engine-*.md, "Leases").
LEASE = "curate"
#: Longest wait between two tries for the lease (and between renewals during a run).
MAX_TICK = 30.0


class CurateConfig(BaseModel):
    """When the server curates: every `every` seconds (one runner per deployment), agents
    whose skills no worker used and nobody committed to for `idle` seconds; skills idle
    `archive_after` archived."""

    model_config = ConfigDict(frozen=True)

    every: float
    idle: float = 7200.0
    stale_after: float = parse_duration(STALE_AFTER)
    archive_after: float = parse_duration(ARCHIVE_AFTER)


class Curator:
    """The curation thread of one server."""

    def __init__(self, store: Store, config: CurateConfig) -> None:
        self.store = store
        self.config = config
        #: Who holds the lease: this host and process, unique per start.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tick = min(max(config.every / 10, 0.05), MAX_TICK)
        self.runs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="skillfs-curator", daemon=True)
        # a store without leases (grpc://) is refused now, not in the thread; one that is
        # down now is tried again by the loop
        with contextlib.suppress(StoreUnavailable):
            store.engine.release_lease(LEASE, self.holder)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop trying; a run under way stops after its current agent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                won = self.store.engine.acquire_lease(LEASE, self.holder, self.config.every)
            except SkillfsError as exc:
                log.warning("curation lease not taken: %s", exc)
                won = False
            if won:
                self._run()
            self._stop.wait(self.tick)

    def _run(self) -> None:
        """One run under the lease, renewed meanwhile; the lease given back unless it ran
        to the end."""
        self.runs += 1
        log.info("curation run", extra={"holder": self.holder, "run": self.runs})
        done = threading.Event()
        beat = threading.Thread(target=self._renew, args=(done,), daemon=True)
        beat.start()
        finished = False
        try:
            finished = self.run_once()
        except Exception:
            log.exception("curation run failed", extra={"holder": self.holder})
        finally:
            done.set()
            beat.join()
            if not finished:
                self._release()

    def _renew(self, done: threading.Event) -> None:
        while not done.wait(self.tick):
            try:
                if not self.store.engine.renew_lease(LEASE, self.holder, self.config.every):
                    log.warning("curation lease lost during a run", extra={"holder": self.holder})
                    return
            except SkillfsError as exc:
                log.warning("curation lease not renewed: %s", exc)

    def _release(self) -> None:
        try:
            self.store.engine.release_lease(LEASE, self.holder)
        except SkillfsError as exc:
            log.warning("curation lease not released: %s", exc)

    def run_once(self) -> bool:
        """Curate (applied) every agent quiet for `idle`; False when stopped before the end.
        An agent that fails is logged and the others still run."""
        c = self.config
        archived = skipped = curated = 0
        for agent in self.store.agents():
            if self._stop.is_set():
                return False
            try:
                if not self._quiet(agent):
                    continue
                report = self.store.curation.run(
                    agent, c.stale_after, c.archive_after, dry_run=False,
                    options=WriteOptions(actor=f"curator:{self.holder}"),
                )  # fmt: skip
            except SkillfsError as exc:
                log.warning("curation of %s failed: %s", agent, exc)
                continue
            curated += 1
            archived += len(report.archived)
            skipped += len(report.skipped)
        log.info(
            "curation done",
            extra={"holder": self.holder, "agents": curated, "archived": archived,
                   "skipped": skipped},
        )  # fmt: skip
        return True

    def _quiet(self, agent: str) -> bool:
        """Whether the agent has been idle for `idle` seconds: no worker used any of its
        skills (usage last-used times, as Harness's `minIdleHours`: skills do not leave an
        agent in use) and nobody committed to them (curation never races an edit under
        way). One usage read, then one listing per scope."""
        if self.config.idle == 0:
            return True
        cutoff = self.store.clock() - self.config.idle
        if any(s.last_used > cutoff for s in self.store.usage.by_skill(agent).values()):
            return False
        return not any(
            m.committed_at > cutoff
            for scope in self.store.scopes(agent)
            for m in self.store.entries(scope).values()  # a deletion is an edit too
        )
