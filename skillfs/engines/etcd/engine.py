"""`etcd://host:port[,host:port…]`: etcd v3, the strongly consistent production engine.

This module is the key layout and the engine's primitives on it; talking to etcd (endpoints,
auth, TLS, rotation, retries, paging, watches) is `skillfs/engines/etcd/client.py`. Layout,
epochs and limits: docs/engine-etcd.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from etcd3 import etcdrpc

from skillfs.engines.base import (
    Charge,
    Check,
    CommitOp,
    Engine,
    MiB,
    UrlOptions,
    VersionMismatch,
    charged,
    check_current,
    check_unchanged,
)
from skillfs.engines.etcd import client as ec
from skillfs.engines.etcd import watch as etcd_watch
from skillfs.engines.etcd.gateway import GatewayReads
from skillfs.engines.etcd.lease import EtcdLeases
from skillfs.engines.etcd.space import SPACE_QUERY, SpaceGuard
from skillfs.engines.etcd.usage import EtcdUsage
from skillfs.errors import InvalidPath, StoreUnavailable, TooLarge
from skillfs.model import Change, Manifest, Revision, Scope, UsageStat

#: What a manifest may not use of half the request budget: the keys and the rev key put
#: beside it in a commit (docs/engine-etcd.md, "Limits").
KEYS_RESERVE = 8 * 1024
#: Reads and transactions a commit tries while only a quota counter or a checked entry moved
#: under it (commits of other skills of the agent charging the same counters).
COUNTER_RETRIES = 20
CHUNKS_PER_READ = 32  # chunk reads per transaction: responses stay under 32 MiB
PARTIAL = b"partial "  # last-use value of a blob still being uploaded
COMPLETE_BELOW = b"p"  # a complete blob's last-use value (decimal text) sorts below this


#: The URL's options for the cluster's limits, when they differ from etcd's defaults.
LIMITS_QUERY = ("max_txn_ops", "max_request_bytes")

_epoch = etcd_watch.epoch
_revision = etcd_watch.revision


def _stamp(value: bytes) -> float:
    return float(value.removeprefix(PARTIAL))


class EtcdEngine(EtcdLeases, Engine):
    """etcd v3 through `EtcdClient`; see the module docstring."""

    chunk_size = 1 * MiB

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        retry_for: float = 10.0,
        page_size: int = 256,
        max_response_bytes: int = 64 * MiB,
    ) -> None:
        super().__init__(url)
        if urlsplit(url).scheme != "etcd":
            raise InvalidPath(f"not an etcd URL: {self.url!r}; use etcd://host:port[,host:port]")
        options = UrlOptions(url, ("prefix", "timeout", *LIMITS_QUERY, *SPACE_QUERY, *ec.TLS_QUERY))
        self._prefix = options.get("prefix").encode()
        request_bytes = options.number("max_request_bytes", int, ec.MAX_REQUEST_BYTES)
        if request_bytes < self.chunk_size + 64 * 1024:
            raise InvalidPath(
                f"max_request_bytes={request_bytes} in {self.url}: a blob chunk is "
                f"{self.chunk_size} bytes, so give at least {self.chunk_size + 64 * 1024}"
            )
        tls = {k: v for k, v in options.values.items() if k in ec.TLS_QUERY}
        self._etcd = ec.EtcdClient(
            url,
            tls,
            timeout=options.number("timeout", float, timeout),
            retry_for=retry_for,
            page_size=page_size,
            max_response_bytes=max_response_bytes,
            max_txn_ops=options.number("max_txn_ops", int, ec.MAX_TXN_OPS),
            max_request_bytes=request_bytes,
        )
        #: A commit's success list holds 2 puts per op (manifest, history copy), the rev key
        #: and its quota counters (two for a commit to one scope: the scope's, the token's);
        #: max_ops >= 1 needs max_txn_ops >= 5.
        self.max_ops = max(1, (self._etcd.max_txn_ops - 3) // 2)
        self._space = SpaceGuard(self._etcd, options)
        #: A manifest fits half a request, so an update (old and new manifest in one
        #: transaction) fits whenever the creation did.
        self.max_manifest_bytes = self._etcd.request_budget // 2 - KEYS_RESERVE
        self._usage = EtcdUsage(self._etcd, self._prefix, self.url)
        self._log = etcd_watch.ChangeLog(self._etcd, self._key)
        self._indexed: set[str] = set()  # domains this engine put in the domain index
        self._gateway = GatewayReads(self._etcd, self._rev_key, tls)

    # ------------------------------------------------------------------ keys

    def _key(self, logical: str) -> bytes:
        return self._prefix + logical.encode()

    def _manifest_key(self, scope: Scope, skill: str) -> bytes:
        return self._key(scope.prefix + skill)

    def _history_prefix(self, scope: Scope, skill: str) -> bytes:
        return self._key(f"history/{scope.prefix}{skill}/")

    def _rev_key(self, domain: str) -> bytes:
        return self._key(f"{domain}/rev")

    def _use_key(self, sha: str) -> bytes:
        return self._key(f"blobs/{sha}")

    def _usage_prefix(self, agent: str) -> bytes:
        return self._key(f"usage/agents/{agent}/")

    # ------------------------------------------------------------------ blobs

    def touch_blobs(self, shas: Sequence[str], now: float) -> set[str]:
        """One nested transaction per blob: refresh last-use only where the blob is complete
        (its value sorts below b"p"; an absent key or a `partial` marker does not)."""
        stamp = repr(now).encode()
        touches = [
            (
                sha,
                etcdrpc.RequestOp(
                    request_txn=etcdrpc.TxnRequest(
                        compare=[
                            etcdrpc.Compare(
                                key=self._use_key(sha),
                                target=etcdrpc.Compare.VALUE,
                                result=etcdrpc.Compare.LESS,
                                value=COMPLETE_BELOW,
                            )
                        ],
                        success=[ec.put_op(self._use_key(sha), stamp)],
                    )
                ),
            )
            for sha in dict.fromkeys(shas)
        ]
        present: set[str] = set()
        # etcd counts a nested transaction's own operation against the limit too
        for part in self._etcd.packed(touches, lambda t: t[1].ByteSize(), reserve_ops=1):
            response = self._etcd.txn(etcdrpc.TxnRequest(success=[op for _, op in part]))
            present.update(
                sha
                for (sha, _), r in zip(part, response.responses, strict=True)
                if r.response_txn.succeeded
            )
        return present

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float, domain: str = "") -> None:
        """Marker first, chunks next, then the marker turns complete if nobody (GC) removed it
        meanwhile; a crashed upload leaves a dated marker that GC can collect with its chunks.
        Refused while the backend is near its quota (`SpaceGuard`)."""
        self._space.check()
        use = self._use_key(sha)
        stamp = repr(now).encode()
        for _ in range(3):
            response = self._etcd.txn(
                etcdrpc.TxnRequest(
                    compare=[ec.absent(use)],
                    success=[ec.put_op(use, PARTIAL + stamp)],
                    failure=[ec.get_op(use)],
                )
            )
            if response.succeeded:
                marker = response.header.revision
            else:
                kv = ec.first_kv(response.responses[0])
                if kv is None:
                    continue
                if not kv.value.startswith(PARTIAL):
                    if sha in self.touch_blobs([sha], now):
                        return
                    continue  # GC swept it between the read and the touch: upload it
                marker = kv.mod_revision  # another upload of the same bytes: share its marker
            for i, chunk in enumerate(chunks):
                self._etcd.txn(
                    etcdrpc.TxnRequest(success=[ec.put_op(self._key(f"blobs/{sha}/{i}"), chunk)])
                )
                self._space.note(len(chunk))
            response = self._etcd.txn(
                etcdrpc.TxnRequest(
                    compare=[ec.mod_is(use, marker)],
                    success=[ec.put_op(use, stamp)],
                    failure=[ec.get_op(use)],
                )
            )
            if response.succeeded:
                return
            kv = ec.first_kv(response.responses[0])
            if kv is not None and not kv.value.startswith(PARTIAL):
                return  # the other upload finished first
        raise StoreUnavailable(
            f"blob {sha} was garbage-collected three times while it was uploaded to {self.url}; "
            "is the GC grace shorter than an upload?"
        )

    def get_chunks(self, keys: Sequence[tuple[str, int]]) -> list[bytes | None]:
        kvs = self._etcd.get_many([self._key(f"blobs/{s}/{i}") for s, i in keys], CHUNKS_PER_READ)
        return [None if kv is None else bytes(kv.value) for kv in kvs]

    def blob_shas(self) -> Iterator[str]:
        return self._etcd.children(self._key("blobs/"))

    def delete_blob_if_idle(self, sha: str, cutoff: float) -> bool:
        use = self._use_key(sha)
        chunks = self._key(f"blobs/{sha}/")
        kv = self._etcd.get_many([use])[0]
        if kv is None:  # chunks left by an upload whose marker GC removed: garbage
            response = self._etcd.txn(
                etcdrpc.TxnRequest(
                    compare=[ec.absent(use)], success=[ec.delete_op(chunks, ec.prefix_end(chunks))]
                )
            )
            return bool(response.succeeded and response.responses[0].response_delete_range.deleted)
        if _stamp(kv.value) >= cutoff:
            return False
        response = self._etcd.txn(
            etcdrpc.TxnRequest(
                compare=[ec.mod_is(use, kv.mod_revision)],
                success=[ec.delete_op(use), ec.delete_op(chunks, ec.prefix_end(chunks))],
            )
        )
        return bool(response.succeeded)

    # ------------------------------------------------------------------ manifests and history

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        prefix = self._manifest_key(scope, "")
        return {
            kv.key[len(prefix) :].decode(): Manifest.from_json(kv.value)
            for kv in self._etcd.scan(prefix)
        }

    def entry_names(self, scope: Scope) -> list[str]:
        prefix = self._manifest_key(scope, "")
        return [kv.key[len(prefix) :].decode() for kv in self._etcd.scan(prefix, keys_only=True)]

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        kvs = self._etcd.get_many([self._manifest_key(scope, s) for s in skills])
        return {
            s: Manifest.from_json(kv.value)
            for s, kv in zip(skills, kvs, strict=True)
            if kv is not None
        }

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        """Read the current manifests (their bytes go to history), the checked ones and the
        quota counters charged, then one transaction: compare each key's mod_revision with
        what was read, copy the old manifests to history, put the new ones, the counters and
        the rev key. A failed compare returns the current manifests in the same round trip:
        one that moved is the VersionMismatch the Store retries on; otherwise a check or a
        counter moved (another commit of the agent), and the engine reads and tries again.
        Refused while the backend is near its quota (`SpaceGuard`)."""
        self._space.check()
        self._index(domain)
        keys = [self._manifest_key(op.scope, op.manifest.skill) for op in ops]
        checked = [self._manifest_key(c.scope, c.skill) for c in checks]
        counters = [self._quota_key(domain, c.key) for c in charges]
        bodies = [self._manifest_body(op) for op in ops]
        for _ in range(COUNTER_RETRIES):
            read = self._etcd.get_many(keys + checked + counters)
            current = read[: len(keys)]
            held = read[len(keys) : len(keys) + len(checked)]
            used = read[len(keys) + len(checked) :]
            self._check_versions(ops, current)
            for c, kv in zip(checks, held, strict=True):
                check_unchanged(c, Manifest.from_json(kv.value).version if kv is not None else 0)
            counted = [
                charged(domain, c, int(kv.value) if kv is not None else 0)
                for c, kv in zip(charges, used, strict=True)
            ]
            request = etcdrpc.TxnRequest(
                compare=[
                    ec.mod_is(k, kv.mod_revision if kv is not None else 0)
                    for k, kv in zip(keys + checked + counters, read, strict=True)
                ],
                success=[
                    *(
                        ec.put_op(
                            self._history_prefix(op.scope, op.manifest.skill)
                            + b"%010d" % op.expect,
                            kv.value,
                        )
                        for op, kv in zip(ops, current, strict=True)
                        if kv is not None
                    ),
                    *(ec.put_op(k, body) for k, body in zip(keys, bodies, strict=True)),
                    *(ec.put_op(k, b"%d" % n) for k, n in zip(counters, counted, strict=True)),
                    ec.put_op(
                        self._rev_key(domain), ops[0].manifest.commit_id.encode(), prev_kv=True
                    ),
                ],
                failure=[ec.get_op(k) for k in keys],
            )
            self._check_request(ops, request)
            response = self._etcd.txn(request)
            self._space.note(request.ByteSize())
            if response.succeeded:
                rev_put = response.responses[-1].response_put
                created = (
                    rev_put.prev_kv.create_revision
                    if rev_put.HasField("prev_kv")
                    else response.header.revision
                )
                return Revision(
                    epoch=_epoch(response.header.cluster_id, created),
                    counter=response.header.revision,
                )
            self._check_versions(ops, [ec.first_kv(r) for r in response.responses])
        # rewritten at the same version between our read and the transaction, or counters
        # that kept moving
        first = ops[0]
        raise VersionMismatch(first.scope, first.manifest.skill, first.expect)

    def _check_request(self, ops: Sequence[CommitOp], request: Any) -> None:
        """TooLarge, nothing written, for a commit over one request's operations or bytes."""
        size, puts, compares = request.ByteSize(), len(request.success), len(request.compare)
        if size > self._etcd.request_budget or max(puts, compares) > self._etcd.max_txn_ops:
            scopes = len({op.scope for op in ops})
            raise TooLarge(
                f"a commit of {len(ops)} skill(s) in {scopes} scope(s) is one etcd "
                f"transaction of {size} bytes, {puts} writes (new manifests, the history copies "
                f"of the old ones, the quota counters) and {compares} compares (those keys and "
                "each scope's checked entries), over the limit of "
                f"{self._etcd.request_budget} bytes (--max-request-bytes "
                f"{self._etcd.max_request_bytes} less etcd's envelope) or "
                f"{self._etcd.max_txn_ops} operations per request: commit fewer skills, or "
                "fewer scopes, at once; nothing was written"
            )

    def _quota_key(self, domain: str, counter: str) -> bytes:
        return self._key(f"quota/{domain}/{quote(counter, safe='')}")

    def quota_used(self, domain: str) -> dict[str, int]:
        prefix = self._quota_key(domain, "")
        return {
            unquote(kv.key[len(prefix) :].decode()): int(kv.value) for kv in self._etcd.scan(prefix)
        }

    def charge_quota(self, domain: str, charge: Charge) -> None:
        """Refused like a commit while the backend is near its quota (`SpaceGuard`)."""
        self._space.check()
        if not self._move_counter(domain, charge.key, lambda n: charged(domain, charge, n)):
            raise StoreUnavailable(
                f"the quota counter {charge.key} of {domain} on {self.url} kept moving; retry"
            )

    def adjust_quota(self, domain: str, deltas: Mapping[str, int]) -> None:
        for counter, n in deltas.items():
            self._move_counter(domain, counter, functools.partial(_plus_at_least_0, n))

    def _move_counter(self, domain: str, counter: str, to: Callable[[int], int]) -> bool:
        """A counter set to `to(its bytes)` by compare-and-swap, read again while another
        write moves it; False when it kept moving."""
        key = self._quota_key(domain, counter)
        for _ in range(COUNTER_RETRIES):
            kv = self._etcd.get_many([key])[0]
            n = to(int(kv.value) if kv is not None else 0)
            response = self._etcd.txn(
                etcdrpc.TxnRequest(
                    compare=[ec.mod_is(key, kv.mod_revision if kv is not None else 0)],
                    success=[ec.put_op(key, b"%d" % n)],
                )
            )
            if response.succeeded:
                return True
        return False

    def _manifest_body(self, op: CommitOp) -> bytes:
        """The manifest's JSON, refused when over `max_manifest_bytes`: creation and update
        have the same limit (docs/engine-etcd.md, "Limits")."""
        body = op.manifest.model_dump_json().encode()
        if len(body) > self.max_manifest_bytes:
            m = op.manifest
            staged = f" (and a candidate of {len(m.candidate.files)})" if m.candidate else ""
            raise TooLarge(
                f"{op.scope}/{m.skill}: its manifest of {len(m.files)} files{staged} is "
                f"{len(body)} bytes, over etcd's limit of {self.max_manifest_bytes} bytes per "
                "manifest (half a request, so that an update, which also moves the old manifest "
                "to history, fits whenever the creation did): keep fewer files or shorter paths "
                "(a file costs about 130 bytes plus its path; a staged candidate's count too), "
                "or raise the cluster's --max-request-bytes and give it as max_request_bytes= "
                "in the URL; nothing "
                "was written"
            )
        return body

    @staticmethod
    def _check_versions(ops: Sequence[CommitOp], current: Sequence[Any]) -> None:
        """The rules of `check_current` for each op, given the keys' current values."""
        for op, kv in zip(ops, current, strict=True):
            m = Manifest.from_json(kv.value) if kv is not None else None
            check_current(op, m.version if m else 0, m is not None and not m.deleted)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        """The keys right under `history/<scope>/<skill>/`: those of a legacy `_drafts`
        manifest's prefix also hold its entries' (`_drafts/<name>/<v>`), which are not its."""
        prefix = self._history_prefix(scope, skill)
        kvs = [kv for kv in self._etcd.scan(prefix) if b"/" not in kv.key[len(prefix) :]]
        return [Manifest.from_json(kv.value) for kv in reversed(kvs)]

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        """One paged range read of the scope's history keys (`history/<scope>/<skill>/<v>`)."""
        prefix = self._key(f"history/{scope.prefix}")
        wanted = set(skills)
        out: dict[str, list[Manifest]] = {}
        for kv in reversed(self._etcd.scan(prefix)):  # newest version first
            skill = kv.key[len(prefix) :].decode().rpartition("/")[0]
            if skill in wanted:
                out.setdefault(skill, []).append(Manifest.from_json(kv.value))
        return out

    def drop_history(self, scope: Scope, skill: str, versions: Sequence[int]) -> None:
        prefix = self._history_prefix(scope, skill)
        deletes = [ec.delete_op(prefix + b"%010d" % v) for v in versions]
        for part in self._etcd.packed(deletes, lambda op: op.ByteSize()):
            self._etcd.txn(etcdrpc.TxnRequest(success=part))

    # ------------------------------------------------------------------ revisions and changes

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """All rev keys in one read-only transaction (linearizable, one round trip); one
        domain, the per-step check, in one range read (less work than a transaction, for
        etcd and for the client). Over etcd's JSON gateway where it answers, a quarter of a
        gRPC call's CPU (`skillfs.engines.etcd.gateway`), else over gRPC."""
        found = self._gateway.revisions(domains)
        if found is not None:
            return found
        out: dict[str, Revision | None] = {}
        if len(domains) == 1:
            reply = self._etcd.range(etcdrpc.RangeRequest(key=self._rev_key(domains[0])))
            kv = reply.kvs[0] if reply.kvs else None
            return {domains[0]: _revision(reply.header.cluster_id, kv)}
        for part in self._etcd.packed(domains, lambda d: len(self._rev_key(d))):
            response = self._etcd.txn(
                etcdrpc.TxnRequest(success=[ec.get_op(self._rev_key(d)) for d in part])
            )
            cluster = response.header.cluster_id
            for domain, r in zip(part, response.responses, strict=True):
                out[domain] = _revision(cluster, ec.first_kv(r))
        return out

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """Caught up by range reads, waiting on the engine's one watch stream; see
        `skillfs.engines.etcd.watch`."""
        return self._log.changes_many({domain: since}, timeout).get(domain, [])

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        return self._log.changes_many(since, timeout)

    def wake_waits(self) -> None:
        self._log.wake_waits()

    # ------------------------------------------------------------------ listings

    def domains(self) -> list[str]:
        """The domain index (`domains/<domain>`, keys only): one range per 256 domains."""
        found = etcd_watch.indexed_domains(self._etcd, self._key)
        if found is not None:
            return found
        agents = [f"agents/{a}" for a in self._etcd.children(self._key("agents/"))]
        markets = [f"markets/{m}" for m in self._etcd.children(self._key("markets/"))]
        return etcd_watch.build_index(self._etcd, self._key, sorted(agents + markets))

    def _index(self, domain: str) -> None:
        """Put the domain in the index before its first commit by this engine (so a listing
        never misses a domain with a commit; it may show one whose only commit failed)."""
        if domain not in self._indexed:
            self._etcd.txn(etcd_watch.index_request(self._key, domain))
            self._indexed.add(domain)

    def scopes(self, domain: str) -> list[Scope]:
        kind, _, ident = domain.partition("/")
        if kind == "markets":
            market = Scope.market(ident)
            return [market] if self._etcd.exists(self._manifest_key(market, "")) else []
        shared = Scope.shared(ident)
        out = [shared] if self._etcd.exists(self._manifest_key(shared, "")) else []
        out += [Scope.user(ident, u) for u in self._etcd.children(self._key(f"{domain}/users/"))]
        return sorted(out, key=str)

    # ------------------------------------------------------------------ usage counters

    def add_usage(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> set[tuple[str, str]]:
        return self._usage.add(agent, counts, last_used or {})

    def usage_detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        return self._usage.read(agent)

    def delete_usage(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        self._usage.delete(agent, keys)

    def usage_agents(self) -> list[str]:
        return sorted(self._etcd.children(self._key("usage/agents/")))

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        """A linearizable read: answered only by a member that is part of a quorum."""
        self._etcd.range(etcdrpc.RangeRequest(key=self._key("rev"), count_only=True))

    def close(self) -> None:
        self._log.close()
        self._gateway.close()
        self._etcd.close()


def _plus_at_least_0(delta: int, held: int) -> int:
    return max(0, held + delta)
