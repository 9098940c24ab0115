"""The etcd engine's usage counters (docs/engine-etcd.md, "Usage counters"): one key per
(agent, user, skill) holding `COUNT LAST_USED` (decimal; a key written before last-used times
holds only the count), bumped by compare-and-swap, each batch counted exactly once through a
marker key on a lease, each counter saturating at USAGE_MAX, each time only moving forward."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from urllib.parse import quote, unquote

from etcd3 import etcdrpc

from skillfs.engines.etcd import client as ec
from skillfs.errors import StoreUnavailable
from skillfs.model import UsageStat, saturated

#: Seconds a usage batch's marker lives: far longer than its retries take.
USAGE_MARK_TTL = 600
#: Bytes a counter costs in a batch besides its key three times (compare, put, read back):
#: its value (a count and a time) twice and the framing.
_COUNTER_BYTES = 96


class EtcdUsage:
    """The counters under `P usage/`, `P` being the engine's key prefix."""

    def __init__(self, etcd: ec.EtcdClient, prefix: bytes, url: str) -> None:
        self._etcd = etcd
        self._prefix = prefix
        self._url = url
        #: (lease id, time.monotonic() it expires) for usage-batch markers
        self._lease: tuple[int, float] | None = None

    def _agent_prefix(self, agent: str) -> bytes:
        return self._prefix + f"usage/agents/{agent}/".encode()

    def add(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float],
    ) -> set[tuple[str, str]]:
        """One transaction per batch `EtcdClient.packed` cuts (the marker is one more op),
        retried while others bump the same keys; the keys created (absent when the
        transaction that landed compared them).

        Exactly once: the transaction also puts a marker key unique to the batch (on a lease,
        so markers expire by themselves), and a failed compare reads it back. When a retry
        finds its own marker, an earlier attempt landed and only its answer was lost."""
        keys = {self._key(agent, user, skill): (user, skill) for user, skill in counts}
        items = [
            (
                self._key(agent, user, skill),
                UsageStat(n, last_used.get((user, skill), 0.0)),
            )
            for (user, skill), n in counts.items()
            if n
        ]
        created: set[bytes] = set()
        marker_bytes = len(self._prefix) + 2 * _COUNTER_BYTES
        for part in self._etcd.packed(
            items,
            lambda item: 3 * len(item[0]) + _COUNTER_BYTES,
            reserve_ops=1,
            reserve_bytes=marker_bytes,
        ):
            try:
                created |= self._add(agent, part, self._lease_for_marks())
            except ec.LeaseGone:
                self._lease = None
                created |= self._add(agent, part, self._lease_for_marks())
        return {keys[k] for k in created}

    def _add(self, agent: str, part: Sequence[tuple[bytes, UsageStat]], lease: int) -> set[bytes]:
        keys = [k for k, _ in part]
        mark = self._prefix + f"usage/batches/{uuid.uuid4().hex}".encode()
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
                        ec.put_op(k, _encode(_plus(_decode(kv.value) if kv else None, n)))
                        for (k, n), kv in zip(part, current, strict=True)
                    ),
                    ec.put_op(mark, b"", lease=lease),
                ],
                failure=[*(ec.get_op(k) for k in keys), ec.get_op(mark)],
            )
            response = self._etcd.txn(request)
            if response.succeeded or ec.first_kv(response.responses[-1]) is not None:
                # done now, or by an attempt whose answer was lost
                return {k for k, kv in zip(keys, current, strict=True) if kv is None}
            if time.monotonic() > end:
                raise StoreUnavailable(
                    f"usage counters of agent {agent} on {self._url} stayed contended for "
                    f"{self._etcd.retry_for:.0f}s; retry"
                )
            current = [ec.first_kv(r) for r in response.responses[:-1]]

    def _lease_for_marks(self) -> int:
        """The lease of this engine's usage-batch markers: one grant serves many batches, and a
        new one is granted when less than half of its time is left."""
        ttl = max(USAGE_MARK_TTL, int(6 * self._etcd.retry_for))
        held = self._lease
        if held is not None and held[1] - time.monotonic() > ttl / 2:
            return held[0]
        started = time.monotonic()
        lease, granted = self._etcd.grant_lease(ttl)
        self._lease = (lease, started + granted)
        return lease

    def delete(self, agent: str, keys: Sequence[tuple[str, str]]) -> None:
        """Delete these counters, in as few transactions as `EtcdClient.packed` cuts."""
        deletes = [ec.delete_op(self._key(agent, user, skill)) for user, skill in keys]
        for part in self._etcd.packed(deletes, lambda op: op.ByteSize()):
            self._etcd.txn(etcdrpc.TxnRequest(success=part))

    def _key(self, agent: str, user: str, skill: str) -> bytes:
        tail = f"{quote(user, safe='')}/{quote(skill, safe='')}"
        return self._agent_prefix(agent) + tail.encode()

    def read(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        prefix = self._agent_prefix(agent)
        out: dict[tuple[str, str], UsageStat] = {}
        for kv in self._etcd.scan(prefix):
            user, _, skill = kv.key[len(prefix) :].decode().partition("/")
            out[(unquote(user), unquote(skill))] = _decode(kv.value)
        return out


def _decode(value: bytes) -> UsageStat:
    count, _, when = value.partition(b" ")
    return UsageStat(saturated(int(count)), float(when) if when else 0.0)


def _encode(stat: UsageStat) -> bytes:
    return b"%d %r" % (stat.count, stat.last_used) if stat.last_used else b"%d" % stat.count


def _plus(held: UsageStat | None, add: UsageStat) -> UsageStat:
    return (held or UsageStat(0, 0.0)).plus(add)
