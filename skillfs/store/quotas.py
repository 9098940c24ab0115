"""Byte quotas that hold fleet-wide (docs/security.md, "Quotas"): what a commit adds to the
bytes its scopes, and the token it is made for, hold — its manifests (each kept in history
once replaced) and the blobs its versions bring that the versions they replace did not hold
— charged by the engine's atomic commit against persisted counters, so two servers cannot
both pass a quota. GC re-counts each counter from what is kept (`recount`).

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar

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


def scope_key(scope: Scope) -> str:
    return f"scope:{scope}"


def token_key(name: str) -> str:
    return f"token:{name}"


def brought(m: Manifest, before: Manifest | None) -> dict[str, int]:
    """The files (live and staged) a version holds that the version it replaces did not:
    SHA-256 -> size."""
    held = {e.sha256 for _, e in before.all_files()} if before is not None else set()
    return {e.sha256: e.size for _, e in m.all_files() if e.sha256 not in held}


def added(m: Manifest, before: Manifest | None) -> int:
    """What a version adds: its manifest's bytes, and the bytes of the files it brings."""
    return len(m.model_dump_json()) + sum(brought(m, before).values())


def charges(
    ops: Sequence[CommitOp],
    current_entries: Mapping[tuple[Scope, str], Manifest],
    limits: Limits,
    credential: Credential | None,
) -> list[Charge]:
    """A commit's charges: one per scope it writes, and one for its token, if any, less the
    blobs its uploads paid for already (each once)."""
    per_scope: dict[Scope, int] = {}
    new: dict[str, int] = {}
    for op in ops:
        before = current_entries.get((op.scope, op.manifest.skill))
        files = brought(op.manifest, before)
        new.update(files)
        n = len(op.manifest.model_dump_json()) + sum(files.values())
        per_scope[op.scope] = per_scope.get(op.scope, 0) + n
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

    def skill(self, scope: Scope, versions: Sequence[Manifest]) -> None:
        """A skill's kept versions, oldest first."""
        before: Manifest | None = None
        for m in versions:
            n = added(m, before)
            for key in (scope_key(scope), token_key(m.actor)):
                self.counts[key] = self.counts.get(key, 0) + n
            before = m

    def usage(self, scope: Scope, n: int) -> None:
        self.counts[scope_key(scope)] = self.counts.get(scope_key(scope), 0) + n

    def deltas(self, before: Mapping[str, int]) -> dict[str, int]:
        """What brings the counters read `before` the mark to the recount: every scope's,
        and the tokens' that had a counter (an actor without one wrote with the store's
        credentials). A commit during the mark is counted by its charge and, when the mark
        read it, again here, until the next GC: the count errs upward, never down."""
        keys = set(before) | {k for k in self.counts if k.startswith("scope:")}
        out = {k: self.counts.get(k, 0) - before.get(k, 0) for k in keys}
        return {k: d for k, d in out.items() if d}
