"""`memory://`: an in-process engine for tests and throw-away use; the reference for the others."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence

from skillfs.engines.base import (
    LOG_LIMIT,
    Charge,
    Check,
    CommitOp,
    Engine,
    charged,
    check_current,
    check_lease,
    check_unchanged,
    must_reset,
    reset_to,
)
from skillfs.model import Change, Manifest, Revision, Scope, UsageStat


class MemoryEngine(Engine):
    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        self._lock = threading.Condition()
        self._chunks: dict[tuple[str, int], bytes] = {}
        self._blob_use: dict[str, float] = {}
        self._live: dict[Scope, dict[str, Manifest]] = defaultdict(dict)
        self._history: dict[tuple[Scope, str], list[Manifest]] = defaultdict(list)
        self._revs: dict[str, Revision] = {}
        self._log: dict[str, deque[Change]] = defaultdict(lambda: deque(maxlen=LOG_LIMIT))
        self._usage: dict[str, dict[tuple[str, str], UsageStat]] = defaultdict(dict)
        self._quota: dict[str, dict[str, int]] = defaultdict(dict)  # domain -> key -> bytes
        #: lease name -> (holder, time.monotonic() it expires)
        self._leases: dict[str, tuple[str, float]] = {}
        self._wakes = 0  # `wake_waits` calls: a wait that sees it move answers

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        with self._lock:
            present = {s for s in shas if s in self._blob_use}
            for s in present:
                self._blob_use[s] = now
            return present

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float, domain: str = "") -> None:
        with self._lock:
            for i, c in enumerate(chunks):
                self._chunks[(sha, i)] = bytes(c)
            self._blob_use[sha] = now

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        with self._lock:
            return [self._chunks.get(k) for k in keys]

    def blob_shas(self) -> Iterator[str]:
        with self._lock:
            return iter(sorted(self._blob_use))

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        with self._lock:
            if self._blob_use.get(sha, cutoff) >= cutoff:
                return False
            del self._blob_use[sha]
            for key in [k for k in self._chunks if k[0] == sha]:
                del self._chunks[key]
            return True

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        with self._lock:
            return dict(self._live.get(scope, {}))

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        with self._lock:
            live = self._live.get(scope, {})
            return {s: live[s] for s in skills if s in live}

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        with self._lock:
            for op in ops:
                cur = self._live[op.scope].get(op.manifest.skill)
                check_current(op, cur.version if cur else 0, cur is not None and not cur.deleted)
            for c in checks:
                held = self._live[c.scope].get(c.skill)
                check_unchanged(c, held.version if held else 0)
            counters = self._quota[domain]
            counted = {c.key: charged(domain, c, counters.get(c.key, 0)) for c in charges}
            counters.update(counted)
            old = self._revs.get(domain)
            rev = Revision(
                epoch=old.epoch if old else uuid.uuid4().hex,
                counter=(old.counter if old else 0) + 1,
            )
            self._revs[domain] = rev
            for op in ops:
                m = op.manifest
                cur = self._live[op.scope].get(m.skill)
                if cur is not None:
                    self._history[(op.scope, m.skill)].insert(0, cur)
                self._live[op.scope][m.skill] = m
                self._log[domain].append(
                    Change(
                        revision=rev,
                        op="remove" if m.deleted else "put",
                        scope=op.scope,
                        skill=m.skill,
                        version=m.version,
                        actor=m.actor,
                        message=m.message,
                    )
                )
            self._lock.notify_all()
            return rev

    def quota_used(self, domain: str) -> dict[str, int]:
        with self._lock:
            return dict(self._quota.get(domain, {}))

    def charge_quota(self, domain: str, charge: Charge) -> None:
        with self._lock:
            counters = self._quota[domain]
            counters[charge.key] = charged(domain, charge, counters.get(charge.key, 0))

    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        with self._lock:
            counters = self._quota[domain]
            for key, n in deltas.items():
                counters[key] = max(0, counters.get(key, 0) + n)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        with self._lock:
            return list(self._history.get((scope, skill), []))

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        with self._lock:
            drop = set(versions)
            key = (scope, skill)
            self._history[key] = [m for m in self._history[key] if m.version not in drop]

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        with self._lock:
            return {d: self._revs.get(d) for d in domains}

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        return self.changes_many({domain: since}, timeout).get(domain, [])

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        def found() -> dict[str, list[Change]]:
            return {d: c for d, r in since.items() if (c := self._after(d, r))}

        with self._lock:
            wakes = self._wakes
            self._lock.wait_for(lambda: found() or self._wakes != wakes, timeout)
            return found()

    def wake_waits(self) -> None:
        with self._lock:
            self._wakes += 1
            self._lock.notify_all()

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        with self._lock:
            return {s: list(h) for s in skills if (h := self._history.get((scope, s)))}

    def _after(self, domain: str, since: Revision) -> list[Change]:
        rev = self._revs.get(domain)
        log = self._log.get(domain)
        trimmed = log[0].revision.counter if log and len(log) == log.maxlen else 0
        if must_reset(rev, since, trimmed):
            return reset_to(rev)
        if log is None or rev == since:
            return []
        return [c for c in log if c.revision.counter > since.counter]

    def domains(self) -> list[str]:
        with self._lock:
            return sorted(self._revs)

    def scopes(self, domain: str) -> list[Scope]:
        with self._lock:
            return sorted((s for s in self._live if s.domain == domain), key=str)

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> set[tuple[str, str]]:
        times = last_used or {}
        with self._lock:
            held = self._usage[agent]
            created = {key for key, n in counts.items() if n and key not in held}
            for key, n in counts.items():
                add = UsageStat(n, times.get(key, 0.0))
                held[key] = held.get(key, UsageStat(0, 0.0)).plus(add)
            return created

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        with self._lock:
            return dict(self._usage.get(agent, {}))

    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            held = self._usage[agent]
            for key in keys:
                held.pop(key, None)

    def usage_agents(self) -> list[str]:
        with self._lock:
            return sorted(agent for agent, held in self._usage.items() if held)

    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        with self._lock:
            now = time.monotonic()
            held = self._leases.get(name)
            if held is not None and held[1] > now:
                return False
            self._leases[name] = (holder, now + ms / 1000)
            return True

    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        with self._lock:
            now = time.monotonic()
            held = self._leases.get(name)
            if held is None or held[0] != holder or held[1] <= now:
                return False
            self._leases[name] = (holder, now + ms / 1000)
            return True

    def release_lease(self, name: str, holder: str) -> bool:
        check_lease(name, holder)
        with self._lock:
            held = self._leases.get(name)
            if held is None or held[0] != holder or held[1] <= time.monotonic():
                return False
            del self._leases[name]
            return True

    def ping(self) -> None:
        return None


_named: dict[str, MemoryEngine] = {}
_named_lock = threading.Lock()


def shared_memory_engine(url: str) -> MemoryEngine:
    """`memory://` is a fresh store; `memory://NAME` is shared by every opener in this process."""
    name = url.split("://", 1)[1]
    if not name:
        return MemoryEngine(url)
    with _named_lock:
        return _named.setdefault(name, MemoryEngine(url))
