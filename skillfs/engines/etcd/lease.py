"""The etcd engine's leases (docs/engine-etcd.md, "Leases"): a key per lease holding its
holder, put on an etcd lease of the TTL in a transaction that requires the key absent, so etcd
expires it and decides who got it. Renewing moves the key to a fresh etcd lease and
releasing deletes it, each in a transaction that compares the holder first."""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING

from etcd3 import etcdrpc

from skillfs.engines.base import check_lease
from skillfs.engines.etcd import client as ec

if TYPE_CHECKING:
    from typing import Any


def _holds(key: bytes, holder: str) -> Any:
    """Compare: the key holds `holder` (false when the key is absent)."""
    return etcdrpc.Compare(
        key=key, target=etcdrpc.Compare.VALUE, result=etcdrpc.Compare.EQUAL, value=holder.encode()
    )


class EtcdLeases:
    """`acquire_lease`, `renew_lease` and `release_lease` of `EtcdEngine`. etcd counts a
    lease's time in whole seconds and grants at least its cluster's minimum TTL (about 2 s
    with default settings), so a shorter TTL is rounded up."""

    if TYPE_CHECKING:
        _etcd: ec.EtcdClient

        def _key(self, logical: str) -> bytes: ...

    def _lease_key(self, name: str) -> bytes:
        return self._key(f"leases/{name}")

    def _grant(self, ms: int) -> int:
        return self._etcd.grant_lease(max(1, math.ceil(ms / 1000)))[0]

    def _revoke(self, lease: int) -> None:
        """Drop an etcd lease no key needs any more; one already gone is fine."""
        if not lease:
            return
        request = etcdrpc.LeaseRevokeRequest(ID=lease)
        with contextlib.suppress(ec.LeaseGone):
            self._etcd.rpc(lambda ep, t, md: ep.lease.LeaseRevoke(request, timeout=t, metadata=md))

    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        key = self._lease_key(name)
        lease = self._grant(ms)
        response = self._etcd.txn(
            etcdrpc.TxnRequest(
                compare=[ec.absent(key)],
                success=[ec.put_op(key, holder.encode(), lease=lease)],
                failure=[ec.get_op(key)],
            )
        )
        if response.succeeded:
            return True
        held = ec.first_kv(response.responses[0])
        if held is not None and held.lease == lease:  # a retry of our own put, which landed
            return True
        self._revoke(lease)
        return False

    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        key = self._lease_key(name)
        lease = self._grant(ms)
        response = self._etcd.txn(
            etcdrpc.TxnRequest(
                compare=[_holds(key, holder)],
                success=[ec.put_op(key, holder.encode(), prev_kv=True, lease=lease)],
            )
        )
        if not response.succeeded:
            self._revoke(lease)
            return False
        self._revoke(response.responses[0].response_put.prev_kv.lease)
        return True

    def release_lease(self, name: str, holder: str) -> bool:
        check_lease(name, holder)
        key = self._lease_key(name)
        response = self._etcd.txn(
            etcdrpc.TxnRequest(
                compare=[_holds(key, holder)], success=[ec.get_op(key), ec.delete_op(key)]
            )
        )
        if not response.succeeded:
            return False
        held = ec.first_kv(response.responses[0])
        self._revoke(held.lease if held is not None else 0)
        return True
