"""The engine interface: the few primitives that differ between stores.

Everything else (validation, hashing, chunking, versions, conflicts, retries, GC policy,
history retention) is written once in `skillfs.store.core` on top of these. An engine keeps the
consistency contract only through `commit`, which must be one atomic step.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict

from skillfs.errors import InvalidArgument, NotFound, QuotaExceeded, StoreUnavailable
from skillfs.model import (
    AuditEntry,
    Change,
    GcReport,
    Manifest,
    Revision,
    Scope,
    UsageDrop,
    UsageStat,
    VersionSummary,
)

MiB = 1024 * 1024
N = TypeVar("N", int, float)

#: The revision of a domain never written (or wiped): `follow` starts from it.
EMPTY = Revision(epoch="", counter=0)
#: Change-log entries an engine keeps per domain unless its URL says `log_limit=`.
LOG_LIMIT = 10_000
#: Longest pause of the default `changes_many` between two looks at its domains.
MANY_POLL = 0.05
#: The user of the usage counters that record operators' drops (`Engine.drop_usage`).
USAGE_DROPS = "_drops"


class CommitOp(BaseModel):
    """Replace the live manifest of one skill, now at version `expect` (0: none yet)."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    manifest: Manifest
    expect: int


class Check(BaseModel):
    """An entry a commit reads but does not write, which must still be at version `expect`
    (0: none) for the commit to apply: how a user's write compares the lower layer's skill
    whose kill switch it must keep (docs/governance.md, "Disable")."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    skill: str
    expect: int


class Charge(BaseModel):
    """Bytes a commit adds to one quota counter of its domain (`key`: `scope:<scope>` or
    `token:<name>`), refused when they would take it past `limit` (None: counted only).
    The Committer computes them (`skillfs.store.quotas`); an engine's atomic step applies
    them (docs/security.md, "Quotas")."""

    model_config = ConfigDict(frozen=True)

    key: str
    bytes: int
    limit: int | None = None
    #: What adds the bytes, as a refusal names it.
    write: str = "this commit"


def charged(domain: str, charge: Charge, used: int) -> int:
    """What every engine's atomic step does with a charge, given its counter now: the
    counter's next value, or QuotaExceeded naming the quota (nothing written)."""
    if charge.limit is not None and charge.bytes > 0 and used + charge.bytes > charge.limit:
        kind, _, name = charge.key.partition(":")
        if kind == "token":
            what = f"token {name!r} in {domain}"
            how = (
                "give the token a larger quota_bytes in the tokens file, or start the servers "
                "with a larger --token-quota"
            )
        else:
            what = f"scope {name}"
            how = (
                "raise Limits.scope_quota (skillfs serve --scope-quota, or "
                "open_store(url, limits=Limits(scope_quota=...)))"
            )
        raise QuotaExceeded(
            f"quota of {what} exceeded: it holds {used} bytes of its {charge.limit}, and "
            f"{charge.write} adds {charge.bytes}; nothing was written. Free space (delete "
            f"skills or files, drop old versions; `skillfs gc` re-counts) or {how}"
        )
    return max(0, used + charge.bytes)


def check_unchanged(check: Check, version: int) -> None:
    """What every engine's atomic step checks of a `Check`: VersionMismatch, nothing written."""
    if version != check.expect:
        raise VersionMismatch(check.scope, check.skill, version)


class VersionMismatch(Exception):
    """`Engine.commit` found a skill not at the version its op expects; nothing was written."""

    def __init__(self, scope: Scope, skill: str, current: int) -> None:
        super().__init__(f"{scope}/{skill} is at version {current}")
        self.scope = scope
        self.skill = skill
        self.current = current


def check_current(op: CommitOp, version: int, live: bool) -> None:
    """What every engine's atomic step checks of each op, given the skill's current version
    and whether that version is live (not a tombstone): the version the op expects (else
    VersionMismatch), and that a deletion deletes something (else NotFound: a tombstone of
    a skill that never existed, or a second one, would be written). Nothing is written."""
    if version != op.expect:
        raise VersionMismatch(op.scope, op.manifest.skill, version)
    if op.manifest.deleted and not live:
        raise NotFound(
            f"skill {op.manifest.skill!r} does not exist in {op.scope}: nothing to delete"
        )


_LEASE_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def check_lease(name: str, holder: str, ttl: float | None = None) -> int:
    """A lease's name (1-64 of a-z 0-9 . _ -), holder (1-256 characters) and time to live
    (seconds, more than zero) checked before the store is asked; the TTL in milliseconds."""
    if not isinstance(name, str) or not _LEASE_NAME.fullmatch(name):
        raise InvalidArgument(f"invalid lease name {name!r}: use 1-64 of a-z, 0-9, '.', '_', '-'")
    if not isinstance(holder, str) or not 0 < len(holder) <= 256:
        raise InvalidArgument(f"invalid lease holder {holder!r}: give 1-256 characters")
    if ttl is None:
        return 0
    if not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
        raise InvalidArgument(f"invalid lease time {ttl!r}: give seconds, more than zero")
    return max(1, math.ceil(ttl * 1000))


def host_port(text: str, default_port: int | None, where: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` of a store URL (`where` names it), the port
    1-65535 (`default_port` when absent; None: it must be given)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.partition(":")
    number = int(port) if port.isdigit() else -1 if port or default_port is None else default_port
    if not host or not 0 < number < 65536:
        raise InvalidArgument(
            f"invalid host:port {text!r} in {where}: give host:port, port 1-65535"
        )
    return host, number


def redact(url: str) -> str:
    """The URL without its passwords (the one before the host, and any query option named
    like one: `sentinel_password`, `ssl_password`), for error messages and logs."""
    parts = urlsplit(url)
    query = re.sub(r"((?:^|&)[^=&]*password=)[^&]*", r"\1***", parts.query)
    if parts.password is None and query == parts.query:
        return url  # as given (a round trip would turn sqlite:////x into sqlite://x)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{netloc}")
    return urlunsplit(parts._replace(query=query))


def unavailable_error(url: str, exc: BaseException) -> StoreUnavailable:
    """The error for a store that does not answer, naming it (password redacted) and the cause."""
    return StoreUnavailable(
        f"store {url} is unavailable ({type(exc).__name__}: {exc}); "
        "check that it is running and reachable, then retry"
    )


class UrlOptions:
    """The query options of a store URL (the last of a repeated one). Only the options the
    engine knows are accepted, so a typo never falls back to a default silently."""

    def __init__(self, url: str, known: Iterable[str]) -> None:
        self.url = redact(url)
        self.values = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
        unknown = sorted(set(self.values) - set(known))
        if unknown:
            raise InvalidArgument(
                f"unknown option {', '.join(unknown)} in {self.url}: "
                f"known options are {', '.join(sorted(known))}"
            )

    def get(self, name: str, default: str = "") -> str:
        return self.values.get(name) or default

    def number(self, name: str, kind: type[N], default: N, *, zero: bool = False) -> N:
        """The option as a `kind`, which must be positive (or zero, with `zero`); `default`
        when absent or blank."""
        raw = self.values.get(name)
        if not raw:
            return default
        try:
            value = kind(raw)
        except ValueError:
            value = None
        if value is None or not (value >= 0 if zero else value > 0):
            what = "an integer" if kind is int else "a number"
            sign = "zero or more" if zero else "positive"
            raise InvalidArgument(f"option {name}={raw!r} in {self.url}: give {what}, {sign}")
        return value


def must_reset(current: Revision | None, since: Revision, trimmed: int = 0) -> bool:
    """Whether a follower at `since` must reload instead of reading the change log on
    (docs/design.md §3, C8): the domain is gone while `since` is not EMPTY, its epoch differs,
    its counter went back, or the log lost entries of revision `trimmed`, after `since`."""
    if current is None:
        return since.epoch != ""
    return (
        current.epoch != since.epoch or current.counter < since.counter or trimmed > since.counter
    )


def reset_to(current: Revision | None) -> list[Change]:
    """What `changes` answers a follower that must reload: the revision to reload at."""
    return [Change(revision=current or EMPTY, op="reset")]


class Engine(ABC):
    """One store (memory, SQLite, Redis, etcd, a skillfs server). Thread-safe."""

    #: Blobs are stored in chunks of this size (etcd limits a request to 1.5 MiB).
    chunk_size: int = 4 * MiB
    #: At most this many ops fit in one atomic commit (etcd: 128 operations per transaction).
    max_ops: int | None = None
    #: How long a process's change feed (`store.changes.feed`) waits in one `changes_many`
    #: call while nothing changes, for a follower that must confirm its cache. A store's wait
    #: is cheap to repeat every second; a skillfs server's is a call it answers, so a grpc://
    #: engine waits longer and ends a wait early when a domain is added
    #: (`remote.hints.Hints.interrupt_wait`).
    watch_wait: float = 1.0
    #: Whether a store over this engine keeps big file tables in chunks
    #: (`skillfs.store.tables`, docs/design.md §2): a grpc:// engine says no, its server's
    #: store does, and the wire carries whole tables.
    table_chunks: bool = True

    def __init__(self, url: str) -> None:
        self.url = redact(url)

    @contextlib.contextmanager
    def unavailable(self, *errors: type[BaseException]) -> Iterator[None]:
        """Turn a client's connection errors into StoreUnavailable naming this store."""
        try:
            yield
        except errors as exc:
            raise self.unavailable_error(exc) from exc

    def unavailable_error(self, exc: BaseException) -> StoreUnavailable:
        return unavailable_error(self.url, exc)

    # --- blobs: content-addressed by SHA-256, immutable, stored as chunks 0..n-1

    @abstractmethod
    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        """Of `shas`, return those stored, refreshing their last-use time (GC's grace)."""

    @abstractmethod
    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float, domain: str = "") -> None:
        """Store a blob's chunks and its last-use time; idempotent. `domain`: the agent or
        market whose commit the blob is for, which a skillfs server charges the upload to
        the token's quota in (`grpc://`); a store itself keeps one blob for every domain."""

    def put_blobs(self, blobs: Mapping[str, Sequence[bytes]], now: float, domain: str = "") -> None:
        """`put_blob` of each blob (sha256 -> chunks): a grpc:// engine sends small ones
        in a few calls instead of one call each (docs/server.md, "Blobs and hashes")."""
        for sha, chunks in blobs.items():
            self.put_blob(sha, chunks, now, domain)

    @abstractmethod
    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """Chunks by (sha, index), in one round trip where the store allows; None if absent."""

    @abstractmethod
    def blob_shas(self) -> Iterator[str]:
        """Every stored blob, for GC's sweep."""

    @abstractmethod
    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        """Atomically delete the blob if its last-use time is before `cutoff`."""

    # --- manifests and history

    @abstractmethod
    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        """Every live manifest of a scope (tombstones included), in one round trip."""

    def entry_names(self, scope: Scope) -> list[str] | None:
        """Every entry of a scope (tombstones included), names alone: what the Committer's
        name rule looks for a new entry's look-alikes among. None: this engine leaves that
        rule to the server it sends commits to (`grpc://`). This default reads the scope;
        every engine here lists keys alone."""
        return list(self.load_scope(scope))

    @abstractmethod
    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        """The live manifests of some skills of a scope (absent ones left out)."""

    @abstractmethod
    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        """In one atomic step: check every op's `expect` and every check's (else
        VersionMismatch, nothing written) and every charge against its quota counter
        (`charged`: else QuotaExceeded, nothing written), move the replaced manifests to
        history, put the new ones, add the charges to their counters, advance the domain's
        revision (creating it with a fresh epoch) and append one change per op to the
        domain's bounded change log. Returns the new revision."""

    @abstractmethod
    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        """Replaced manifests of a skill, newest first (the live one is not included)."""

    @abstractmethod
    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        """Forget these versions of a skill's history (retention)."""

    def history_summaries(self, scope: Scope, skill: str) -> list[VersionSummary]:
        """`history` without the file tables, newest first: what listings, retention and a
        retried commit's search for its id read (a grpc:// engine asks the server for these
        alone, so their size does not grow with the skill's files)."""
        return [m.summary() for m in self.history(scope, skill)]

    def history_version(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        """One replaced version of a skill, whole; None when it is not kept."""
        return next((m for m in self.history(scope, skill) if m.version == version), None)

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        """`history` of several skills of one scope (GC's mark phase), newest first; skills
        without history are left out. One round trip where the store allows; this default
        asks per skill."""
        out = {skill: self.history(scope, skill) for skill in skills}
        return {skill: found for skill, found in out.items() if found}

    # --- quota counters: bytes a domain's scopes and tokens hold (docs/security.md, "Quotas")

    @abstractmethod
    def quota_used(self, domain: str) -> dict[str, int] | None:
        """Every quota counter of a domain (`Charge.key` -> bytes); None where the store
        keeps them out of reach (a skillfs server counts its own)."""

    @abstractmethod
    def charge_quota(self, domain: str, charge: Charge) -> None:
        """Add a charge made outside a commit (a token's upload, the usage counters it
        creates) to its counter, atomically checked against its quota (`charged`: else
        QuotaExceeded, nothing added)."""

    @abstractmethod
    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        """Add each delta to its counter, atomically per counter, never below 0 (GC's
        re-count)."""

    # --- revisions and the change log

    @abstractmethod
    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """The current revision of each domain, read together in one round trip
        (per Redis slot); None for a domain never written. Linearizable."""

    @abstractmethod
    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """Changes after `since`, in order, waiting up to `timeout` seconds for the first
        one. `[Change(op="reset", revision=current)]` when the log no longer reaches back
        to `since`, the epoch differs or the counter went back — also when the domain is
        gone (wiped, restored, failed over to an empty replica) while `since` is not EMPTY:
        then the reset carries EMPTY."""

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        """`changes` of many domains at once: for each domain of `since` that has changes
        after its revision (or a reset), those changes; waits up to `timeout` seconds for the
        first change of any, and answers `{}` when there is none. One store connection
        whatever the number of domains where the engine allows (Redis: one XREAD over their
        streams; etcd: one watch stream); this default looks at each domain in turn, then
        sleeps a little, for engines without a better way."""
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            out = {}
            for domain, rev in since.items():
                found = self.changes(domain, rev, 0)
                if found:
                    out[domain] = found
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            time.sleep(min(delay, left))
            delay = min(delay * 2, MANY_POLL)

    def wake_waits(self) -> None:  # noqa: B027 - engines whose waits end on their own keep this
        """Make every `changes`/`changes_many` wait in flight look once more and answer now,
        with what it finds (maybe nothing, which is then true up to that look): a closing
        change feed's threads end at once instead of at their timeout. Engines here that wait
        on their own condition do so; the others' waits end at their timeout (Redis blocks at
        most 80 % of its socket timeout at a time)."""

    # --- listings

    @abstractmethod
    def domains(self) -> list[str]:
        """Every domain ever written: `agents/<id>` and `markets/<id>`, sorted."""

    def stored_domains(self) -> list[str]:
        """Every domain holding data, for GC's mark: an engine whose domain index can be
        lost apart from the domains (Redis Cluster) finds them without it, so GC never
        sweeps the blobs of a domain the index forgot. Elsewhere the index is written with
        the data, atomically: `domains()`."""
        return self.domains()

    @abstractmethod
    def scopes(self, domain: str) -> list[Scope]:
        """The scopes of a domain that ever held a skill, sorted."""

    # --- usage counters (batched by the runtime)

    @abstractmethod
    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> set[tuple[str, str]]:
        """Add load counts keyed by (user, skill id), and move each key's last-used time to
        `last_used[key]` when that is later (never backwards; a key without one keeps its
        time). Returns the keys it created: what a token's charge for them keeps
        (docs/security.md, "Quotas")."""

    @abstractmethod
    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        """Load count and last-used time of an agent keyed by (user, skill id)."""

    @abstractmethod
    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        """Forget the counters of these (user, skill id) keys of an agent (absent ones are
        no error)."""

    def drop_usage(self, agent: str, drop: UsageDrop) -> UsageDrop:
        """An operator's drop (`store.usage.drop`) of the counters `drop` covers, as read
        now: the record kept first, as the counter of the reserved user `USAGE_DROPS` (no user
        id starts with `_`) whose skill is the record's JSON, then the counters forgotten; a
        crash between leaves a record of a drop that did not happen, never a drop without its
        record. A skillfs server does it whole from its own read, recording its token as the
        actor."""
        keys = sorted(
            k for k in self.usage_detail(agent) if k[0] != USAGE_DROPS and drop.covers(*k)
        )
        drop = drop.model_copy(update={"dropped": len(keys)})
        self.add_usage(agent, {(USAGE_DROPS, drop.model_dump_json()): 1}, {})
        self.delete_usage(agent, keys)
        return drop

    def usage_agents(self) -> list[str] | None:
        """Every agent with usage recorded, sorted (one that only loads market skills holds no
        skill of its own, so `domains` misses it); None where the store cannot list them (a
        skillfs server): callers then take the agents that hold skills."""
        return None

    def usage(self, agent: str) -> dict[tuple[str, str], int]:
        """Load counts of an agent keyed by (user, skill id)."""
        return {key: stat.count for key, stat in self.usage_detail(agent).items()}

    # --- audit

    def audit(
        self,
        target: str,
        *,
        since: float | None,
        until: float | None,
        actor: str | None,
        skill: str | None,
        limit: int,
    ) -> list[AuditEntry] | None:
        """`Store.audit` answered by the engine in one call (a skillfs server, within its
        token's read grants), or None: the store reads it from manifests and their history."""
        return None

    # --- garbage collection

    def gc(self, grace: float) -> GcReport | None:
        """Blob GC run in one call by the store behind this engine (a skillfs server's, which
        alone sees its file tables' chunks), or None: the store marks and sweeps itself."""
        return None

    # --- leases: one holder at a time across processes (docs/governance.md, "Curation")

    @abstractmethod
    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        """Take lease `name` for `holder` for `ttl` seconds when nobody holds it or its time
        ran out: True. False while anyone holds it, `holder` included (that one `renew`s).
        The store's clock (Redis, etcd) or the host's (SQLite, memory) decides expiry."""

    @abstractmethod
    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        """Make `holder`'s lease run `ttl` seconds from now: True; False when `holder` does not
        hold it (it expired, and maybe another took it) and nothing changes."""

    @abstractmethod
    def release_lease(self, name: str, holder: str) -> bool:
        """Give the lease up if `holder` holds it: True; False (nothing changes) otherwise."""

    # --- life cycle

    @abstractmethod
    def ping(self) -> None:
        """Raise StoreUnavailable unless the store answers."""

    def close(self) -> None:  # noqa: B027 - engines without connections keep this
        """Release connections."""
