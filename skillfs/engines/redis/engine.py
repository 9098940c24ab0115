"""`redis://`, `rediss://`, `redis+cluster://`, `redis+sentinel://`: Redis 7 as a production store.

Every key of one agent (or market) carries the hash tag `{agentId}` (`{market}`), so Redis
Cluster keeps them in one slot and one Lua script commits atomically. The physical layout, the
durability settings and the limits are in docs/engine-redis.md.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit

import redis
import redis.exceptions as rx
from redis.cluster import RedisCluster
from redis.commands.core import Script

from skillfs.engines.base import (
    LOG_LIMIT,
    Charge,
    Check,
    CommitOp,
    Engine,
    UrlOptions,
    charged,
    check_current,
    check_unchanged,
)
from skillfs.engines.redis import lease as redis_lease
from skillfs.engines.redis import scripts
from skillfs.engines.redis import usage as redis_usage
from skillfs.engines.redis import watch as redis_watch
from skillfs.engines.redis.client import (
    SOCKET_TIMEOUT,
    Client,
    client_factory,
    client_kwargs,
    client_query,
)
from skillfs.errors import InvalidPath, PermissionDenied, ReplicationTimeout
from skillfs.model import Change, Manifest, Revision, Scope, UsageStat
from skillfs.model.names import check_domain

WAIT_TIMEOUT_MS = 1000
#: The URL's options for the engine; the others go to redis-py.
_OWN_QUERY = ("prefix", "wait", "wait_timeout", "log_limit")
#: Commits a `changes()` call returns at most; the caller asks again from the last one.
CHANGES_BATCH = redis_watch.CHANGES_BATCH
_MAX_SEQ = redis_watch.MAX_SEQ
#: Error replies redis-py has no class for that mean "not now" rather than "wrong": too few
#: replicas (min-replicas-to-write), a long script running, writes stopped because the last
#: RDB save failed (stop-writes-on-bgsave-error). Other ResponseErrors are raised as is.
_TRANSIENT_REPLIES = ("NOREPLICAS ", "BUSY ", "MISCONF ")
#: What redis-py puts before the server's reply: in a pipeline, "Command # N (ARGS) of
#: pipeline caused error: "; in a MULTI that Redis aborted, "Transaction discarded because
#: of: " (EXECABORT's reason).
_PIPELINE_ERROR = " of pipeline caused error: "
_EXECABORT_REASON = "Transaction discarded because of: "


def _is_transient(exc: rx.ResponseError) -> bool:
    """Whether an error reply, however redis-py wrapped it, is one of `_TRANSIENT_REPLIES`."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while isinstance(error, rx.ResponseError) and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if text.startswith("Command # ") and _PIPELINE_ERROR in text:
            text = text.rpartition(_PIPELINE_ERROR)[2]
        text = text.removeprefix(_EXECABORT_REASON)
        if text.startswith(_TRANSIENT_REPLIES):
            return True
        # an EXECABORT without its reason: the error of a queued command caused it
        error = error.__cause__ or error.__context__
    return False


class _Connected(NamedTuple):
    client: Client
    commit: Script
    changes: Script
    delete_blob: Script
    charge: Script
    adjust: Script


class _Transient(rx.RedisError):
    """An error reply that means the server cannot serve now (see `_TRANSIENT_REPLIES`)."""


_UNAVAILABLE: tuple[type[BaseException], ...] = (
    rx.ConnectionError,  # includes BusyLoadingError, MasterNotFoundError, MaxConnectionsError
    rx.TimeoutError,
    rx.ClusterError,  # includes ClusterDownError, MasterDownError
    rx.ReadOnlyError,  # a demoted primary
    rx.TryAgainError,
    rx.OutOfMemoryError,
    rx.SlotNotCoveredError,
    # A Cluster client that reaches no node (every one down): raised by an existing client
    # too, not only when it is made
    rx.RedisClusterException,
    _Transient,
)


class _Guard:
    """Connection trouble -> StoreUnavailable; bad credentials -> PermissionDenied.

    A class rather than a generator context manager: it wraps the per-step revision check,
    where a generator's few microseconds show against one loopback round trip."""

    def __init__(self, engine: RedisEngine) -> None:
        self.engine = engine

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            return
        if isinstance(exc, rx.AuthenticationError | rx.AuthorizationError | rx.NoPermissionError):
            raise PermissionDenied(
                f"store {self.engine.url} refused the credentials ({type(exc).__name__}: {exc}); "
                "check the user and password in the URL"
            ) from exc
        if isinstance(exc, rx.ResponseError) and str(exc).startswith("DB index is out of range"):
            raise InvalidPath(
                f"store {self.engine.url}: the Redis server has no such database ({exc}); "
                "give one it has (0 to its `databases` setting - 1)"
            ) from None
        if isinstance(exc, _UNAVAILABLE) or (
            isinstance(exc, rx.ResponseError) and _is_transient(exc)
        ):
            raise self.engine.unavailable_error(exc) from exc


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


class RedisEngine(redis_lease.RedisLeases, Engine):
    """Redis standalone (`redis://`, `rediss://`), Cluster (`redis+cluster://`) or Sentinel
    (`redis+sentinel://`); options are passed on to the redis-py client."""

    #: A commit is one Lua script, which blocks the server for every other client while it
    #: runs: this bounds its work (docs/engine-redis.md, "Limits").
    max_ops = 64

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url)
        scheme = urlsplit(url).scheme
        query = UrlOptions(url, (*_OWN_QUERY, *client_query(scheme)))
        self.prefix = query.get("prefix")
        if "{" in self.prefix or "}" in self.prefix:
            raise InvalidPath(
                f"key prefix {self.prefix!r} may not contain '{{' or '}}': they make hash tags"
            )
        self.wait = query.number("wait", int, 0, zero=True)
        self.wait_timeout = query.number("wait_timeout", int, WAIT_TIMEOUT_MS)
        self.log_limit = query.number("log_limit", int, LOG_LIMIT)
        self.cluster = scheme.endswith("+cluster")
        kwargs = client_kwargs(options)
        passed = {k: v for k, v in query.values.items() if k not in _OWN_QUERY}
        self._open = client_factory(url, passed, kwargs)
        self._guard = _Guard(self)
        self._rev_keys: dict[str, str] = {}
        self._lock = threading.Lock()
        self._conn: _Connected | None = None
        self._wake = redis_watch.Wake(self)  # Cluster: the change notices, started when used
        self.wakes = 0  # `wake_waits` calls: a wait that sees it move answers
        # XREAD BLOCK must return before the socket times out.
        self.socket_timeout = float(
            passed.get("socket_timeout") or kwargs.get("socket_timeout") or SOCKET_TIMEOUT
        )

    @property
    def _c(self) -> _Connected:
        """The client, made on first use: a Cluster client needs a reachable node to exist, and
        an engine opened while its store is down must start working once the store is up."""
        conn = self._conn
        if conn is None:
            with self._lock:
                if self._conn is None:
                    with self.unavailable(*_UNAVAILABLE):
                        client = self._open()
                    self._conn = _Connected(
                        client,
                        client.register_script(scripts.COMMIT),
                        client.register_script(scripts.CHANGES),
                        client.register_script(scripts.DELETE_BLOB),
                        client.register_script(scripts.CHARGE),
                        client.register_script(scripts.ADJUST),
                    )
                conn = self._conn
        return conn

    @property
    def _client(self) -> Client:
        return self._c.client

    # ------------------------------------------------------------------ keys

    def _domain_key(self, domain: str) -> str:
        """`agents/A` -> `<prefix>agents/{A}`: the hash tag keeps a domain's keys in one slot."""
        kind, _, ident = check_domain(domain).partition("/")
        return f"{self.prefix}{kind}/{{{ident}}}"

    def _rev_key(self, domain: str) -> str:
        """Checked once per domain and remembered: the per-step check skips the id rules."""
        key = self._rev_keys[domain] = f"{self._domain_key(domain)}/rev"
        return key

    def _scope_base(self, scope: Scope) -> str:
        base = self._domain_key(scope.domain)
        if scope.kind == "shared":
            return f"{base}/shared"
        if scope.kind == "user":
            return f"{base}/users/{scope.user_id}"
        return base

    def _skills_key(self, scope: Scope) -> str:
        return f"{self._scope_base(scope)}/skills"

    def _history_key(self, scope: Scope, skill: str) -> str:
        return f"{self._scope_base(scope)}/history/{skill}"

    def _blob_key(self, sha: str, part: int | str) -> str:
        return f"{self.prefix}blobs/{{{sha}}}/{part}"

    @property
    def _domains_key(self) -> str:
        return f"{self.prefix}domains"

    # ------------------------------------------------------------------ blobs

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        if not shas:
            return set()
        with self._guard:
            pipe = self._client.pipeline(transaction=False)
            for sha in shas:
                pipe.set(self._blob_key(sha, "meta"), repr(now), xx=True)
            found = pipe.execute()
        return {sha for sha, ok in zip(shas, found, strict=True) if ok}

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float, domain: str = "") -> None:
        """Chunks and last-use in one MULTI: a blob with a meta key always has all its chunks."""
        with self._guard:
            pipe = self._client.pipeline(transaction=True)
            for i, chunk in enumerate(chunks):
                pipe.set(self._blob_key(sha, i), bytes(chunk))
            pipe.set(self._blob_key(sha, "meta"), repr(now))
            pipe.execute()

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        if not keys:
            return []
        with self._guard:
            pipe = self._client.pipeline(transaction=False)
            for sha, i in keys:
                pipe.get(self._blob_key(sha, i))
            return cast(list[bytes | None], pipe.execute())

    def blob_shas(self) -> Iterator[str]:
        start = len(self.prefix) + len("blobs/{")
        pattern = _glob_escape(self.prefix) + "blobs/{*}/meta"
        with self._guard:
            keys = cast(list[bytes], list(self._client.scan_iter(match=pattern, count=1000)))
        return iter(sorted(k.decode()[start : -len("}/meta")] for k in keys))

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        with self._guard:
            done = self._c.delete_blob(
                keys=[self._blob_key(sha, "meta")], args=[repr(cutoff), self._blob_key(sha, "")]
            )
        return bool(done)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        with self._guard:
            raw = cast(dict[bytes, bytes], self._client.hgetall(self._skills_key(scope)))
        return {k.decode(): Manifest.from_json(v) for k, v in raw.items()}

    def entry_names(self, scope: Scope) -> list[str]:
        with self._guard:
            keys = cast(list[bytes], self._client.hkeys(self._skills_key(scope)))
        return [k.decode() for k in keys]

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        if not skills:
            return {}
        with self._guard:
            raw = cast(list[bytes | None], self._client.hmget(self._skills_key(scope), skills))
        return {s: Manifest.from_json(v) for s, v in zip(skills, raw, strict=True) if v}

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        base = self._domain_key(domain)
        fixed = [f"{base}/rev", f"{base}/log", f"{base}/scopes"]
        if not self.cluster:  # one slot only matters in Cluster; elsewhere the script lists it
            fixed.append(self._domains_key)
        keys = list(fixed)
        args: list[str | int] = [
            uuid.uuid4().hex, self.log_limit, len(fixed), domain, len(checks), len(charges),
        ]  # fmt: skip
        for op in ops:
            m = op.manifest
            keys += [self._skills_key(op.scope), self._history_key(op.scope, m.skill)]
            args += [
                m.skill, op.expect, m.model_dump_json(), str(op.scope),
                "remove" if m.deleted else "put", m.version, m.actor, m.message,
            ]  # fmt: skip
        for c in checks:
            keys.append(self._skills_key(c.scope))
            args += [c.skill, c.expect]
        if charges:
            keys.append(self._quota_key(domain))
            for q in charges:
                args += [q.key, q.bytes, -1 if q.limit is None else q.limit]
        if self.cluster:  # after the ops: the channel that wakes `changes_many`'s waiters
            args.append(self._wake.channel)
        with self._guard:
            if self.cluster:  # the domain set has its own slot: add first, so listings never miss
                self._client.sadd(self._domains_key, domain)
            result = self._run_commit(keys, args)
        if result[0] == 3:  # a check found its entry moved
            check_unchanged(checks[int(result[1]) - 1], int(result[2]))
        if result[0] == 4:  # a charge past its quota
            charged(domain, charges[int(result[1]) - 1], int(result[2]))
        if result[0] != 1:  # the script applied `check_current`: raise what it found
            op = ops[int(result[1]) - 1]
            check_current(op, int(result[2]), live=result[0] != 2)
        return Revision(epoch=result[2].decode(), counter=int(result[1]))

    def _run_commit(self, keys: list[str], args: list[str | int]) -> list[Any]:
        """The commit script; with `?wait=N`, followed by WAIT on the same connection."""
        if not self.wait:
            return cast(list[Any], self._c.commit(keys=keys, args=args))
        node: redis.Redis
        if isinstance(self._client, RedisCluster):
            slot_node = self._client.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            node = self._client.get_redis_connection(slot_node)
        else:
            node = self._client
        for _ in range(2):
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(self._c.commit.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", self.wait, self.wait_timeout)  # type: ignore[no-untyped-call]
            result, acked = pipe.execute(raise_on_error=False)
            if isinstance(result, rx.NoScriptError):
                node.script_load(scripts.COMMIT)
                continue
            if isinstance(result, rx.AskError) and isinstance(self._client, RedisCluster):
                # The slot moved (resharding, failover): nothing ran. Learn the new slot map
                # and let the store retry on the right node.
                self._client.nodes_manager.initialize()
                raise _Transient(f"{type(result).__name__}: {result}")
            if isinstance(result, BaseException):
                raise result
            if result[0] == 1 and int(acked) < self.wait:
                raise ReplicationTimeout(
                    f"commit {result[2].decode()}:{result[1]} is applied on the primary of "
                    f"{self.url} but only {acked} of {self.wait} replicas confirmed it within "
                    f"{self.wait_timeout} ms; it is not rolled back and may be lost if the primary "
                    "fails now: check the replicas"
                )
            return cast(list[Any], result)
        raise rx.NoScriptError("the commit script could not be loaded")

    def _quota_key(self, domain: str) -> str:
        return f"{self._domain_key(domain)}/quota"

    def quota_used(self, domain: str) -> dict[str, int]:
        with self._guard:
            raw = cast(dict[bytes, bytes], self._client.hgetall(self._quota_key(domain)))
        return {k.decode(): int(v) for k, v in raw.items()}

    def charge_quota(self, domain: str, charge: Charge) -> None:
        limit = -1 if charge.limit is None else charge.limit
        with self._guard:
            held = self._c.charge(
                keys=[self._quota_key(domain)], args=[charge.key, charge.bytes, limit]
            )
        if held is not None:  # past its quota: nothing added
            charged(domain, charge, int(cast(int, held)))

    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        if deltas:
            args = [x for key, n in deltas.items() for x in (key, n)]
            with self._guard:
                self._c.adjust(keys=[self._quota_key(domain)], args=args)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        with self._guard:
            raw = cast(dict[bytes, bytes], self._client.hgetall(self._history_key(scope, skill)))
        return [Manifest.from_json(raw[v]) for v in sorted(raw, key=int, reverse=True)]

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        """One pipeline of HGETALLs: one round trip (a scope's keys share one slot)."""
        if not skills:
            return {}
        with self._guard:
            pipe = self._client.pipeline(transaction=False)
            for skill in skills:
                pipe.hgetall(self._history_key(scope, skill))
            rows = cast(list[dict[bytes, bytes]], pipe.execute())
        return {
            skill: [Manifest.from_json(raw[v]) for v in sorted(raw, key=int, reverse=True)]
            for skill, raw in zip(skills, rows, strict=True)
            if raw
        }

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        if versions:
            with self._guard:
                self._client.hdel(self._history_key(scope, skill), *map(str, versions))

    # ------------------------------------------------------------------ revisions, change log

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """One pipeline of HMGETs: one round trip (per node in Cluster)."""
        if not domains:
            return {}
        keys = [self._rev_keys.get(d) or self._rev_key(d) for d in domains]
        with self._guard:
            if len(keys) == 1:  # the common per-step check: skip the pipeline's overhead
                rows = [cast(list[bytes | None], self._client.hmget(keys[0], "epoch", "counter"))]
            else:
                pipe = self._client.pipeline(transaction=False)
                for key in keys:
                    pipe.hmget(key, "epoch", "counter")
                rows = cast(list[list[bytes | None]], pipe.execute())
        out: dict[str, Revision | None] = {}
        for d, (epoch, counter) in zip(domains, rows, strict=True):
            if epoch is None or counter is None:
                out[d] = None
            else:
                out[d] = Revision(epoch=epoch.decode(), counter=int(counter))
        return out

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """Checked and read atomically by a script; waits with XREAD BLOCK when nothing is new."""
        base = self._domain_key(domain)
        keys = [f"{base}/rev", f"{base}/log"]
        deadline = time.monotonic() + timeout
        while True:
            with self._guard:
                result = self._c.changes(
                    keys=keys, args=[since.epoch, since.counter, CHANGES_BATCH]
                )
            found = self._parse_changes(cast(list[Any], result))
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            # Blocks until an entry after `since` exists; stays under the socket timeout.
            block = min(remaining, self.socket_timeout * 0.8)
            with self._guard:
                self._client.xread({keys[1]: f"{since.counter}-{_MAX_SEQ}"}, count=1,
                                   block=max(1, int(block * 1000)))  # fmt: skip

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        """One pipelined look, then one blocking XREAD over every stream (Cluster: a wait
        for the commit script's notice); see `skillfs.engines.redis.watch`."""
        return redis_watch.changes_many(self, since, timeout)

    def wake_waits(self) -> None:
        """A Cluster's waits answer now; a single server's after the XREAD out (at most
        80 % of the socket timeout)."""
        self.wakes += 1
        self._wake.bump()

    @staticmethod
    def _parse_changes(result: list[Any]) -> list[Change]:
        if result[0] == 0:
            return []
        epoch = result[1].decode()
        if result[0] == 2:
            return [Change(revision=Revision(epoch=epoch, counter=int(result[2])), op="reset")]
        out = []
        for entry_id, flat in result[3]:
            f = dict(zip(flat[::2], flat[1::2], strict=True))
            out.append(Change(
                revision=Revision(epoch=epoch, counter=int(entry_id.split(b"-")[0])),
                op=f[b"op"].decode(), scope=Scope.parse(f[b"scope"].decode()),
                skill=f[b"skill"].decode(), version=int(f[b"version"]),
                actor=f.get(b"actor", b"").decode(), message=f.get(b"message", b"").decode(),
            ))  # fmt: skip
        return out

    # ------------------------------------------------------------------ listings

    def domains(self) -> list[str]:
        with self._guard:
            raw = cast(set[bytes], self._client.smembers(self._domains_key))
        return sorted(d.decode() for d in raw)

    def stored_domains(self) -> list[str]:
        """In Cluster the index is one key on one node: a node restarted without persistence
        loses it while the domains on the other nodes stay. Each domain's revision key is
        found by SCAN there (GC only; listings read the index, which the next commit of each
        domain restores)."""
        found = set(self.domains())
        if self.cluster:
            for kind in ("agents", "markets"):
                start = len(self.prefix) + len(kind) + len("/{")
                pattern = f"{_glob_escape(self.prefix)}{kind}/{{*}}/rev"
                with self._guard:
                    keys = cast(
                        list[bytes], list(self._client.scan_iter(match=pattern, count=1000))
                    )
                found |= {f"{kind}/{k.decode()[start : -len('}/rev')]}" for k in keys}
        return sorted(found)

    def scopes(self, domain: str) -> list[Scope]:
        key = f"{self._domain_key(domain)}/scopes"
        with self._guard:
            raw = cast(set[bytes], self._client.smembers(key))
        return sorted((Scope.parse(s.decode()) for s in raw), key=str)

    # ------------------------------------------------------------------ usage counters

    def _usage_key(self, agent: str) -> str:
        return f"{self._domain_key(f'agents/{agent}')}/usage"

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> set[tuple[str, str]]:
        with self._guard:
            return redis_usage.add(self._client, self._usage_key(agent), counts, last_used or {})

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        with self._guard:
            return redis_usage.read(self._client, self._usage_key(agent))

    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        with self._guard:
            redis_usage.delete(self._client, self._usage_key(agent), keys)

    def usage_agents(self) -> list[str]:
        with self._guard:
            return redis_usage.agents(self._client, self.prefix, _glob_escape(self.prefix))

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        with self._guard:
            self._client.ping()

    def close(self) -> None:
        self._wake.close()
        if self._conn is not None:
            self._conn.client.close()
