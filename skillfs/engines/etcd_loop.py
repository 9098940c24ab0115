"""The etcd client's reads on the running event loop (docs/engine-etcd.md, "On the server's
event loop"): the server's per-step revision check, read without a thread hand-off."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from etcd3 import etcdrpc

from skillfs.engines.etcd_client import EtcdClient, Metadata, channel
from skillfs.engines.etcd_failover import Attempts


class LoopClient:
    """An `EtcdClient`'s reads on the running event loop: `grpc.aio` channels to the same
    members, the same failover, auth token and limits. The server reads the per-step
    revision check with it: a blocking gRPC call handed to a thread costs that server about
    twice the CPU of this one (docs/engine-etcd.md, "On the server's event loop"). Bound to
    the loop it was made on; close it there."""

    def __init__(self, client: EtcdClient) -> None:
        self._client = client
        self._channels = [
            channel(grpc.aio, ep.target, client.credentials, client.options)
            for ep in client.endpoints
        ]
        self._kv = [etcdrpc.KVStub(c) for c in self._channels]
        self._auth = [etcdrpc.AuthStub(c) for c in self._channels]

    async def _metadata(self, index: int, timeout: float) -> Metadata:
        """`EtcdClient._metadata` over this loop's channel (the token is the endpoint's)."""
        if self._client.user is None:
            return None
        ep = self._client.endpoints[index]
        if ep.token is None:
            reply = await self._auth[index].Authenticate(self._client.login, timeout=timeout)
            ep.token = str(reply.token)
        return (("token", ep.token),)

    async def _rpc(self, method: str, request: Any) -> Any:
        attempts = Attempts(self._client, None)
        while attempts.next():
            index, timeout = attempts.index, attempts.timeout
            try:
                call = getattr(self._kv[index], method)
                return await call(
                    request, timeout=timeout, metadata=await self._metadata(index, timeout)
                )
            except grpc.RpcError as exc:
                await asyncio.sleep(attempts.failed(exc))
        raise attempts.exhausted()

    async def range(self, request: Any) -> Any:
        return await self._rpc("Range", request)

    async def txn(self, request: Any) -> Any:
        self._client.check_txn(request)
        return await self._rpc("Txn", request)

    async def close(self) -> None:
        for c in self._channels:
            await c.close()
