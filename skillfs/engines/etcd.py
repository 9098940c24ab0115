"""`etcd://host:port[,host:port…]`: etcd v3, the strongly consistent production engine.

This module is the key layout and the engine's primitives on it; talking to etcd (endpoints,
auth, TLS, rotation, retries, paging, watches) is `skillfs/engines/etcd_client.py`. Layout,
epochs and limits: docs/engine-etcd.md.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from etcd3 import etcdrpc

from skillfs.engines import etcd_client as ec
from skillfs.engines import etcd_watch
from skillfs.engines.base import (
    CommitOp,
    Engine,
    MiB,
    UrlOptions,
    VersionMismatch,
)
from skillfs.errors import InvalidPath, StoreUnavailable, TooLarge
from skillfs.model import Change, Manifest, Revision, Scope

#: Seconds a usage batch's marker lives (see `add_usage`): far longer than its retries take.
USAGE_MARK_TTL = 600
CHUNKS_PER_READ = 32  # chunk reads per transaction: responses stay under 32 MiB
PARTIAL = b"partial "  # last-use value of a blob still being uploaded
COMPLETE_BELOW = b"p"  # a complete blob's last-use value (decimal text) sorts below this


_epoch = etcd_watch.epoch
_revision = etcd_watch.revision


def _stamp(value: bytes) -> float:
    return float(value.removeprefix(PARTIAL))


class EtcdEngine(Engine):
    """etcd v3 through `EtcdClient`; see the module docstring."""

    chunk_size = 1 * MiB
    #: A commit's success list holds 2 puts per op (manifest, history copy) plus the rev key.
    max_ops = (ec.MAX_TXN_OPS - 1) // 2

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
        options = UrlOptions(url, ("prefix", "timeout", *ec.TLS_QUERY))
        self._prefix = options.get("prefix").encode()
        self._etcd = ec.EtcdClient(
            url,
            {k: v for k, v in options.values.items() if k in ec.TLS_QUERY},
            timeout=options.number("timeout", float, timeout),
            retry_for=retry_for,
            page_size=page_size,
            max_response_bytes=max_response_bytes,
        )
        #: (lease id, time.monotonic() it expires) for usage-batch markers
        self._usage_lease: tuple[int, float] | None = None
        self._log = etcd_watch.ChangeLog(self._etcd, self._key)
        self._indexed: set[str] = set()  # domains this engine put in the domain index

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
        present: set[str] = set()
        for part in ec.batches(list(dict.fromkeys(shas)), ec.MAX_TXN_OPS):
            ops = [
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
                )
                for sha in part
            ]
            response = self._etcd.txn(etcdrpc.TxnRequest(success=ops))
            present.update(
                sha
                for sha, r in zip(part, response.responses, strict=True)
                if r.response_txn.succeeded
            )
        return present

    def put_blob(self, sha: str, chunks: Sequence[bytes], now: float) -> None:
        """Marker first, chunks next, then the marker turns complete if nobody (GC) removed it
        meanwhile; a crashed upload leaves a dated marker that GC can collect with its chunks."""
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

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        kvs = self._etcd.get_many([self._manifest_key(scope, s) for s in skills])
        return {
            s: Manifest.from_json(kv.value)
            for s, kv in zip(skills, kvs, strict=True)
            if kv is not None
        }

    def commit(self, domain: str, ops: Sequence[CommitOp]) -> Revision:
        """Read the current manifests (their bytes go to history), then one transaction:
        compare each key's mod_revision with what was read, copy the old manifests to
        history, put the new ones and the rev key. A failed compare returns the current
        manifests in the same round trip, for the VersionMismatch the Store retries on."""
        self._index(domain)
        keys = [self._manifest_key(op.scope, op.manifest.skill) for op in ops]
        current = self._etcd.get_many(keys)
        self._check_versions(ops, current)
        request = etcdrpc.TxnRequest(
            compare=[
                ec.mod_is(k, kv.mod_revision if kv is not None else 0)
                for k, kv in zip(keys, current, strict=True)
            ],
            success=[
                *(
                    ec.put_op(
                        self._history_prefix(op.scope, op.manifest.skill) + b"%010d" % op.expect,
                        kv.value,
                    )
                    for op, kv in zip(ops, current, strict=True)
                    if kv is not None
                ),
                *(
                    ec.put_op(k, op.manifest.model_dump_json().encode())
                    for k, op in zip(keys, ops, strict=True)
                ),
                ec.put_op(self._rev_key(domain), ops[0].manifest.commit_id.encode(), prev_kv=True),
            ],
            failure=[ec.get_op(k) for k in keys],
        )
        try:
            response = self._etcd.txn(request)
        except ec.RequestTooLarge as exc:
            one = ops[0].manifest
            fix = (
                "commit fewer skills at once"
                if len(ops) > 1
                else f"{one.skill} lists {len(one.files)} files; an update carries the old "
                "and the new file table, so keep a skill under about 5,000 files"
            )
            raise TooLarge(
                f"a commit of {len(ops)} skill(s) is one etcd transaction of "
                f"{request.ByteSize()} bytes (new manifests and history copies), over the "
                f"server's --max-request-bytes (1.5 MiB by default): {fix} ({exc})"
            ) from exc
        if not response.succeeded:
            now = [ec.first_kv(r) for r in response.responses]
            self._check_versions(ops, now)
            # rewritten at the same version between our read and the transaction
            first = ops[0]
            raise VersionMismatch(first.scope, first.manifest.skill, first.expect)
        rev_put = response.responses[-1].response_put
        created = (
            rev_put.prev_kv.create_revision
            if rev_put.HasField("prev_kv")
            else response.header.revision
        )
        return Revision(
            epoch=_epoch(response.header.cluster_id, created), counter=response.header.revision
        )

    @staticmethod
    def _check_versions(ops: Sequence[CommitOp], current: Sequence[Any]) -> None:
        """VersionMismatch for the first op whose skill is not at the version it expects."""
        for op, kv in zip(ops, current, strict=True):
            version = Manifest.from_json(kv.value).version if kv is not None else 0
            if version != op.expect:
                raise VersionMismatch(op.scope, op.manifest.skill, version)

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        kvs = self._etcd.scan(self._history_prefix(scope, skill))
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
        for part in ec.batches(list(versions), ec.MAX_TXN_OPS):
            self._etcd.txn(
                etcdrpc.TxnRequest(success=[ec.delete_op(prefix + b"%010d" % v) for v in part])
            )

    # ------------------------------------------------------------------ revisions and changes

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """All rev keys in one read-only transaction (linearizable, one round trip)."""
        out: dict[str, Revision | None] = {}
        for part in ec.batches(list(domains), ec.MAX_TXN_OPS):
            response = self._etcd.txn(
                etcdrpc.TxnRequest(success=[ec.get_op(self._rev_key(d)) for d in part])
            )
            cluster = response.header.cluster_id
            for domain, r in zip(part, response.responses, strict=True):
                out[domain] = _revision(cluster, ec.first_kv(r))
        return out

    def changes(self, domain: str, since: Revision, timeout: float) -> list[Change]:
        """Caught up by range reads, waiting on the engine's one watch stream; see
        `skillfs.engines.etcd_watch`."""
        return self._log.changes_many({domain: since}, timeout).get(domain, [])

    def changes_many(
        self, since: Mapping[str, Revision], timeout: float
    ) -> dict[str, list[Change]]:
        return self._log.changes_many(since, timeout)

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

    def add_usage(self, agent: str, counts: Mapping[tuple[str, str], int]) -> None:
        """One counter key per (user, skill), bumped by compare-and-swap on its mod_revision;
        a batch is one transaction per 127 keys, retried while others bump the same keys.

        Exactly once: the transaction also puts a marker key unique to the batch (on a lease,
        so markers expire by themselves), and a failed compare reads it back. When a retry
        finds its own marker, an earlier attempt landed and only its answer was lost."""
        prefix = self._usage_prefix(agent)
        items = [
            (prefix + f"{quote(user, safe='')}/{quote(skill, safe='')}".encode(), n)
            for (user, skill), n in counts.items()
            if n
        ]
        for part in ec.batches(items, ec.MAX_TXN_OPS - 1):  # the marker is one more op
            try:
                self._add_usage(agent, part, self._lease_for_marks())
            except ec.LeaseGone:
                self._usage_lease = None
                self._add_usage(agent, part, self._lease_for_marks())

    def _add_usage(self, agent: str, part: Sequence[tuple[bytes, int]], lease: int) -> None:
        keys = [k for k, _ in part]
        mark = self._key(f"usage/batches/{uuid.uuid4().hex}")
        current = self._etcd.get_many(keys)
        end = time.monotonic() + self._etcd.retry_for
        while True:
            request = etcdrpc.TxnRequest(
                compare=[
                    ec.mod_is(k, kv.mod_revision if kv is not None else 0)
                    for k, kv in zip(keys, current, strict=True)
                ],
                success=[
                    *(
                        ec.put_op(k, b"%d" % (n + (int(kv.value) if kv is not None else 0)))
                        for (k, n), kv in zip(part, current, strict=True)
                    ),
                    ec.put_op(mark, b"", lease=lease),
                ],
                failure=[*(ec.get_op(k) for k in keys), ec.get_op(mark)],
            )
            response = self._etcd.txn(request)
            if response.succeeded or ec.first_kv(response.responses[-1]) is not None:
                return  # done now, or by an attempt whose answer was lost
            if time.monotonic() > end:
                raise StoreUnavailable(
                    f"usage counters of agent {agent} on {self.url} stayed contended for "
                    f"{self._etcd.retry_for:.0f}s; retry"
                )
            current = [ec.first_kv(r) for r in response.responses[:-1]]

    def _lease_for_marks(self) -> int:
        """The lease of this engine's usage-batch markers: one grant serves many batches, and a
        new one is granted when less than half of its time is left."""
        ttl = max(USAGE_MARK_TTL, int(6 * self._etcd.retry_for))
        held = self._usage_lease
        if held is not None and held[1] - time.monotonic() > ttl / 2:
            return held[0]
        started = time.monotonic()
        lease, granted = self._etcd.grant_lease(ttl)
        self._usage_lease = (lease, started + granted)
        return lease

    def usage(self, agent: str) -> dict[tuple[str, str], int]:
        prefix = self._usage_prefix(agent)
        out: dict[tuple[str, str], int] = {}
        for kv in self._etcd.scan(prefix):
            user, _, skill = kv.key[len(prefix) :].decode().partition("/")
            out[(unquote(user), unquote(skill))] = int(kv.value)
        return out

    # ------------------------------------------------------------------ life cycle

    def ping(self) -> None:
        """A linearizable read: answered only by a member that is part of a quorum."""
        self._etcd.range(etcdrpc.RangeRequest(key=self._key("rev"), count_only=True))

    def close(self) -> None:
        self._log.close()
        self._etcd.close()
