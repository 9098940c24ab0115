"""The Redis engine's leases (docs/engine-redis.md, "Leases"): a key per lease holding its
holder, taken with `SET NX PX` and expired by Redis itself; renewing and releasing compare the
holder first, in one Lua script, so a holder whose lease ran out never touches another's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skillfs.engines.base import check_lease

if TYPE_CHECKING:
    from skillfs.engines.redis.client import Client

# KEYS: the lease. ARGV: holder, milliseconds. Extend only the holder's own lease.
RENEW = """#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS: the lease. ARGV: holder. Delete only the holder's own lease (also over maxmemory).
RELEASE = """#!lua flags=allow-oom
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLeases:
    """`acquire_lease`, `renew_lease` and `release_lease` of `RedisEngine`."""

    if TYPE_CHECKING:
        prefix: str
        _guard: Any

        @property
        def _client(self) -> Client: ...

    def _lease_key(self, name: str) -> str:
        """`<prefix>leases/{name}`: its own hash tag, any slot of a Cluster."""
        return f"{self.prefix}leases/{{{name}}}"

    def acquire_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        with self._guard:
            return bool(self._client.set(self._lease_key(name), holder, nx=True, px=ms))

    def renew_lease(self, name: str, holder: str, ttl: float) -> bool:
        ms = check_lease(name, holder, ttl)
        with self._guard:
            done = self._client.register_script(RENEW)(
                keys=[self._lease_key(name)], args=[holder, ms]
            )
        return bool(done)

    def release_lease(self, name: str, holder: str) -> bool:
        check_lease(name, holder)
        with self._guard:
            done = self._client.register_script(RELEASE)(
                keys=[self._lease_key(name)], args=[holder]
            )
        return bool(done)
