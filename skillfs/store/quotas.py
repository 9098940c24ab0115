"""Byte quotas that hold fleet-wide (docs/security.md, "Quotas"): what a commit adds to the
bytes its scopes, and the token it is made for, hold — its manifests as stored (each kept in
history once replaced), the file table chunks and the blobs its versions bring that the
versions they replace did not hold — charged by the engine's atomic commit against persisted
counters, so two servers cannot both pass a quota. GC re-counts each counter from what is
kept (`Recount`), version by version with the same `added`.

A token, at the store level, is the credential a skillfs server authenticated the write
with: the server (gRPC and the console) names it for the call (`acting_as`), the way a
step's budget travels (`skillfs.util.deadline`), so every write it makes, whatever the
operation, is charged to it. A writer holding the store's credentials has none: only its
scopes' quotas apply.

A token is also charged for what it writes outside commits, each when it writes it
(`token_charge`, applied by `Committer.charge_token`): the bytes it uploads, and the usage
counters it creates (`usage_bytes`). A blob its upload paid for is `prepaid` in a commit of
the same domain, which charges it to the scopes but not to the token again."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from skillfs.engines.base import Charge, CommitOp
from skillfs.model import Manifest, Scope
from skillfs.store.limits import Limits


class Credential(BaseModel):
    """The token a write is made for: its name (its counter's) and its own quota (None: the
    store's `Limits.token_quota`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    quota_bytes: int | None = None
    #: Blobs this token's uploads were charged for in the domain of the commit made now (a
    #: skillfs server reads it off their receipts): not charged to the token again.
    prepaid: frozenset[str] = frozenset()

    def limit(self, limits: Limits) -> int | None:
        return self.quota_bytes or limits.token_quota


_CREDENTIAL: ContextVar[Credential | None] = ContextVar("skillfs_credential", default=None)


@contextlib.contextmanager
def acting_as(credential: Credential | None) -> Iterator[None]:
    """Every commit made inside is charged to `credential` too (None: to no token)."""
    token = _CREDENTIAL.set(credential)
    try:
        yield
    finally:
        # A streaming call's async generator may be closed by another task (a client that
        # went away): that task's context never held the credential, so nothing to restore.
        with contextlib.suppress(ValueError):
            _CREDENTIAL.reset(token)


def current() -> Credential | None:
    return _CREDENTIAL.get()


@contextlib.contextmanager
def prepaid(blobs: frozenset[str]) -> Iterator[None]:
    """The acting token's commits inside do not charge it again for these blobs: its
    uploads paid for them in the commit's domain (a skillfs server reads their receipts)."""
    credential = current()
    if credential is None or not blobs:
        yield
        return
    with acting_as(credential.model_copy(update={"prepaid": credential.prepaid | blobs})):
        yield


#: The prefixes of a domain's quota counters: a scope's, a token's, and what a token's usage
#: counters took (`usage_key`).
_SCOPE, _TOKEN, _USAGE = "scope:", "token:", "usage:"


def scope_key(scope: Scope) -> str:
    return f"{_SCOPE}{scope}"


def token_key(name: str) -> str:
    return f"{_TOKEN}{name}"


def usage_key(token: str) -> str:
    """The counter of what a token's usage counters took of its quota, by its counter's key
    (`token:<name>` -> `usage:<name>`): GC keeps it, as a usage key records no token."""
    return _USAGE + token.removeprefix(_TOKEN)


def settled(charge: Charge, used: int) -> dict[str, int]:
    """The deltas that settle a charge for a batch of usage counters of which `used` bytes
    were new: the rest given back to the token, the used part remembered (`usage_key`)."""
    return {charge.key: used - charge.bytes, usage_key(charge.key): used}


def usage_forgotten(used: Mapping[str, int]) -> dict[str, int]:
    """The deltas that give every token back what its usage counters took (`usage_key`):
    once an operator dropped all of an agent's usage."""
    out: dict[str, int] = {}
    for key, n in used.items():
        if key.startswith(_USAGE) and n > 0:
            out[key] = -n
            out[token_key(key.removeprefix(_USAGE))] = -n
    return out


@dataclass(frozen=True)
class Footprint:
    """What one version holds in the store: its manifest as stored (a big file table there is
    a list of chunk digests), the chunks its stored tables are kept in, and the files it
    holds (live, staged, labelled). `skillfs.store.tables.Tables` makes the footprints of
    versions whose tables are stored in chunks."""

    manifest: int  #: the stored manifest's JSON bytes
    chunks: Mapping[str, int]  #: digest -> bytes of each table chunk it references
    files: Mapping[str, int]  #: SHA-256 -> bytes of each file it holds

    @classmethod
    def of(cls, stored: Manifest, whole: Manifest, chunks: Mapping[str, int]) -> Footprint:
        """A version as `stored`, as `whole` (its tables read back), and the chunks its
        stored tables are kept in."""
        files = {e.sha256: e.size for _, e in whole.all_files()}
        return cls(manifest=len(stored.model_dump_json()), chunks=chunks, files=files)


def inline(m: Manifest) -> Footprint:
    """The footprint of a manifest stored as it is: its file tables inline, no chunks."""
    return Footprint.of(m, m, {})


def brought(now: Footprint, before: Footprint | None) -> Mapping[str, int]:
    """The files (live, staged, labelled) a version holds that the version it replaces did
    not: SHA-256 -> size."""
    if before is None:
        return now.files
    return {sha: n for sha, n in now.files.items() if sha not in before.files}


def added(now: Footprint, before: Footprint | None) -> int:
    """What a version adds to the store: its stored manifest's bytes, and the bytes of the
    chunks it references and the files it brings that the version it replaces did not."""
    held = before.chunks if before is not None else {}
    chunks = sum(n for d, n in now.chunks.items() if d not in held)
    return now.manifest + chunks + sum(brought(now, before).values())


def charges(
    ops: Sequence[CommitOp],
    current_entries: Mapping[tuple[Scope, str], Manifest],
    limits: Limits,
    credential: Credential | None,
    footprint: Callable[[Manifest], Footprint],
) -> list[Charge]:
    """A commit's charges: one per scope it writes, and one for its token, if any, less the
    blobs its uploads paid for already (each once); each version, and the one it replaces,
    as `footprint` says they are stored."""
    per_scope: dict[Scope, int] = {}
    new: dict[str, int] = {}
    for op in ops:
        cur = current_entries.get((op.scope, op.manifest.skill))
        before = footprint(cur) if cur is not None else None
        now = footprint(op.manifest)
        new.update(brought(now, before))
        per_scope[op.scope] = per_scope.get(op.scope, 0) + added(now, before)
    out = [
        Charge(key=scope_key(s), bytes=n, limit=limits.scope_quota) for s, n in per_scope.items()
    ]
    if credential is not None:
        paid = sum(size for sha, size in new.items() if sha in credential.prepaid)
        n = sum(per_scope.values()) - paid
        out.append(Charge(key=token_key(credential.name), bytes=n, limit=credential.limit(limits)))
    return out


def token_charge(credential: Credential, limits: Limits, n: int, write: str) -> Charge:
    """A charge of `n` bytes to the token outside a commit (`Engine.charge_quota`)."""
    limit = credential.limit(limits)
    return Charge(key=token_key(credential.name), bytes=n, limit=limit, write=write)


#: What a usage counter costs besides its user and skill: its count, time and framing.
USAGE_KEY_BYTES = 32


def usage_bytes(keys: Iterable[tuple[str, str]]) -> int:
    """What usage counters keyed by (user, skill id) hold (GC's recount, a token's charge)."""
    return sum(len(u.encode()) + len(s.encode()) + USAGE_KEY_BYTES for u, s in keys)


class Recount:
    """The counters of one domain as what it keeps says (GC's mark reads it all): per scope
    what the kept versions of its skills hold — each version's `added` relative to the kept
    version before it — and its usage counters' bytes; per actor what the versions it
    committed added (a token's counter is its name's)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def skill(self, scope: Scope, versions: Sequence[tuple[Manifest, Footprint]]) -> None:
        """A skill's kept versions, oldest first, with their footprints."""
        before: Footprint | None = None
        for m, held in versions:
            n = added(held, before)
            for key in (scope_key(scope), token_key(m.actor)):
                self.counts[key] = self.counts.get(key, 0) + n
            before = held

    def usage(self, scope: Scope, n: int) -> None:
        self.counts[scope_key(scope)] = self.counts.get(scope_key(scope), 0) + n

    def deltas(self, before: Mapping[str, int]) -> dict[str, int]:
        """What brings the counters read `before` the mark to the recount: every scope's,
        and the tokens' that had a counter (an actor without one wrote with the store's
        credentials). A commit during the mark is counted by its charge and, when the mark
        read it, again here, until the next GC: the count errs upward, never down. What a
        token's usage counters took (`usage_key`) stays in its counter, and is kept: no
        usage key says which token made it."""
        keys = {k for k in before if not k.startswith(_USAGE)}
        keys |= {k for k in self.counts if k.startswith(_SCOPE)}
        out: dict[str, int] = {}
        for k in keys:
            kept = before.get(usage_key(k), 0) if k.startswith(_TOKEN) else 0
            out[k] = self.counts.get(k, 0) + kept - before.get(k, 0)
        return {k: d for k, d in out.items() if d}
