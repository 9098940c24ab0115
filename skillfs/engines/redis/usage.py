"""The Redis engine's usage counters (docs/engine-redis.md, "Usage counters"): per agent one
hash of counts (HINCRBY, saturating at USAGE_MAX) and one hash of last-used times, each
field a JSON `[user, skill]`; a time only moves forward (a script keeps the later one)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import cast

import redis.exceptions as rx

from skillfs.engines.redis.client import Client
from skillfs.model import USAGE_MAX, UsageStat, saturated

# KEYS: the times hash. ARGV: field, time, field, time, ...: each field set to its time unless
# it holds a later one already.
LATEST = """#!lua
for i = 1, #ARGV, 2 do
  local held = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0')
  if tonumber(ARGV[i + 1]) > held then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0
"""


def overflowed(reply: object) -> bool:
    """Whether a HINCRBY's reply is Redis refusing to go past a 64-bit integer."""
    return isinstance(reply, rx.ResponseError) and "overflow" in str(reply)


def add(
    client: Client,
    key: str,
    counts: Mapping[tuple[str, str], int],
    last_used: Mapping[tuple[str, str], float],
) -> set[tuple[str, str]]:
    """Add `counts` to the hash `key` and move the times in `key`/at forward to `last_used`;
    the keys created (HINCRBY answered what it added: the field held nothing before)."""
    if not counts:
        return set()
    fields = [json.dumps([user, skill]) for user, skill in counts]
    pipe = client.pipeline(transaction=False)
    for field, n in zip(fields, counts.values(), strict=True):
        pipe.hincrby(key, field, saturated(n))
    done = pipe.execute(raise_on_error=False)
    # HINCRBY refuses to overflow and changes nothing: the counter saturates instead
    full = [f for f, r in zip(fields, done, strict=True) if overflowed(r)]
    for r in done:
        if isinstance(r, Exception) and not overflowed(r):
            raise r
    if full:
        client.hset(key, mapping=dict.fromkeys(full, USAGE_MAX))
    times = [
        arg
        for field, k in zip(fields, counts, strict=True)
        if last_used.get(k, 0.0) > 0
        for arg in (field, repr(float(last_used[k])))
    ]
    if times:
        client.register_script(LATEST)(keys=[f"{key}/at"], args=times)
    return {k for (k, n), r in zip(counts.items(), done, strict=True) if n and r == saturated(n)}


def delete(client: Client, key: str, keys: Sequence[tuple[str, str]]) -> None:
    """Forget these (user, skill) counters of hash `key` and their times, in one MULTI."""
    fields = [json.dumps([user, skill]) for user, skill in keys]
    if not fields:
        return
    pipe = client.pipeline(transaction=True)
    pipe.hdel(key, *fields)
    pipe.hdel(f"{key}/at", *fields)
    pipe.execute()


def agents(client: Client, prefix: str, escaped: str) -> list[str]:
    """The agents with a counts hash under `prefix` (`<prefix>agents/{A}/usage`) by SCAN;
    `escaped`: the prefix with glob characters escaped."""
    start = len(prefix) + len("agents/{")
    keys = cast(list[bytes], list(client.scan_iter(match=f"{escaped}agents/{{*}}/usage")))
    return sorted({k.decode()[start : -len("}/usage")] for k in keys})


def read(client: Client, key: str) -> dict[tuple[str, str], UsageStat]:
    """The counts of hash `key` with the times of `key`/at (0.0 where none was recorded)."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(key)
    pipe.hgetall(f"{key}/at")
    counts, times = cast(list[dict[bytes, bytes]], pipe.execute())
    out: dict[tuple[str, str], UsageStat] = {}
    for field, n in counts.items():
        user, skill = json.loads(field)
        out[(user, skill)] = UsageStat(int(n), float(times.get(field, b"0")))
    return out
