"""What the server and the `grpc://` engine share: conversions between the pydantic models and
the proto messages, the mapping of skillfs errors to gRPC status codes and back, and the
bounded LRU map both keep their caches in.

An error crosses the wire as its class's status code (`grpc_code`, skillfs.errors) with its
message, plus trailing metadata naming its class (and, for a conflict, the current version),
so the client raises the same `skillfs.errors` class the server caught.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import grpc
from pydantic import ValidationError

from skillfs.engines.base import VersionMismatch
from skillfs.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    InvalidPath,
    InvalidSkill,
    LiveEditAfterStage,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    ReplicationTimeout,
    ReviewRequired,
    SkillfsError,
    StoreFailed,
    StoreUnavailable,
    TooLarge,
)
from skillfs.model import AuditEntry, Change, Manifest, Revision, Scope, VersionSummary
from skillfs.remote.proto import skillfs_pb2 as pb

T = TypeVar("T")

#: Messages carrying file data are split at this size.
PIECE = 256 * 1024
#: The bytes of items one message of a bounded answer (protocol 2) carries at most, well under
#: gRPC's default limit of 4 MiB and under 1 MiB with the envelope (docs/server.md, "Bounded
#: messages"): no message grows with the number of skills, versions, files, domains or keys.
BUDGET = 512 * 1024
#: What a protocol 1 caller is answered in: one message, however large (the server's message
#: limit still applies).
UNBOUNDED = sys.maxsize
#: Names (skills, domains, blob proofs, usage counts, file ranges) one request carries at
#: most: a client sends more in several calls, and a server refuses more than `NAMES_MAX`.
NAMES = 500
NAMES_MAX = 10_000
#: An UploadBlobs call carries at most `NAMES` blobs and this many bytes of them; a blob over
#: `PIECE` goes alone through UploadBlob (docs/server.md, "Blobs and hashes").
UPLOAD_BATCH_BYTES = 4 * 1024 * 1024
#: The protocol this side speaks, and the metadata key a client declares it with.
PROTOCOL = 2
PROTOCOL_KEY = "skillfs-protocol"

ERROR_KEY = "skillfs-error"
VERSION_KEY = "skillfs-current-version"
SCOPE_KEY = "skillfs-scope"
SKILL_KEY = "skillfs-skill"

#: The errors a server's answer is read back as, by the class name in its metadata; another
#: name (a subclass this side does not know, like auth's Unauthenticated) is read by its code.
_CLASSES: dict[str, type[SkillfsError]] = {
    c.__name__: c
    for c in (
        InvalidArgument,
        InvalidSkill,
        InvalidPath,
        FailedPrecondition,
        ReviewRequired,
        LiveEditAfterStage,
        NotFound,
        TooLarge,
        QuotaExceeded,
        StoreUnavailable,
        StoreFailed,
        PermissionDenied,
        ReplicationTimeout,
    )
}
#: Status codes gRPC itself raises (no skillfs metadata), as the error a caller expects.
_BY_CODE: dict[grpc.StatusCode, type[SkillfsError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: TooLarge,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: StoreUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: StoreUnavailable,
}


def status_of(exc: SkillfsError | VersionMismatch) -> tuple[grpc.StatusCode, list[tuple[str, str]]]:
    """The status code and trailing metadata for an error raised while serving."""
    meta = [(ERROR_KEY, type(exc).__name__)]
    if isinstance(exc, VersionMismatch):  # an engine's signal, not a SkillfsError
        meta += [(SCOPE_KEY, str(exc.scope)), (SKILL_KEY, exc.skill)]
        meta += [(VERSION_KEY, str(exc.current))]
        return grpc.StatusCode.ABORTED, meta
    if isinstance(exc, Conflict):
        meta += [(SKILL_KEY, exc.skill), (VERSION_KEY, str(exc.current_version or 0))]
    return grpc.StatusCode[exc.grpc_code], meta


def error_from(exc: grpc.RpcError, where: str) -> SkillfsError | VersionMismatch:
    """The skillfs error a failed call stands for; `where` names the server for messages."""
    code: grpc.StatusCode = exc.code()
    details: str = exc.details() or code.name
    meta = dict(_metadata(exc))
    name = meta.get(ERROR_KEY)
    current = int(meta.get(VERSION_KEY, "0") or 0)
    if name == "Conflict":
        return Conflict(details, skill=meta.get(SKILL_KEY, ""), current_version=current)
    if name == "VersionMismatch":
        return VersionMismatch(Scope.parse(meta[SCOPE_KEY]), meta[SKILL_KEY], current)
    if name in _CLASSES:
        return _CLASSES[name](details)
    if name is not None and code in _BY_CODE:  # a skillfs error of a class not known here
        return _BY_CODE[code](details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return StoreUnavailable(
            f"skillfs server {where} is unavailable ({code.name}: {details}); "
            "check that it is running and reachable, then retry"
        )
    return _BY_CODE.get(code, SkillfsError)(f"{where}: {code.name}: {details}")


def _metadata(exc: grpc.RpcError) -> Iterable[tuple[str, str]]:
    trailing = getattr(exc, "trailing_metadata", None)
    items = trailing() if callable(trailing) else None
    return [(k, v if isinstance(v, str) else v.decode()) for k, v in items or ()]


def is_transport_failure(exc: grpc.RpcError) -> bool:
    """True when the server was not reached (or went away, or shed the call), as opposed to
    a server's answer: the call may be retried on another server.

    RESOURCE_EXHAUSTED without skillfs metadata is gRPC's own "Concurrent RPC limit
    exceeded" (the server is overloaded: try another), unless it is about a message over
    the size limit, which another server would refuse too. DEADLINE_EXCEEDED without it is
    the client's own deadline: the server hung (a write may have landed: the store's retry
    finds its commit id)."""
    code = exc.code()
    if any(k == ERROR_KEY for k, _ in _metadata(exc)):
        return False
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return "larger than max" not in (exc.details() or "")
    return code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    )


def never_sent(exc: grpc.RpcError) -> bool:
    """True when the call failed because no connection to the server could be made (gRPC's
    pick failing fast, as round_robin and pick_first word it): the request never left, so
    sending it again cannot repeat it."""
    return (exc.details() or "").startswith(
        ("connections to all backends failing", "failed to connect to all addresses")
    )


# ------------------------------------------------------------------ models <-> messages


def rev_to_pb(rev: Revision) -> pb.Revision:
    return pb.Revision(epoch=rev.epoch, counter=rev.counter)


def rev_from_pb(msg: pb.Revision) -> Revision:
    return Revision(epoch=msg.epoch, counter=msg.counter)


def revs_to_pb(revs: Mapping[str, Revision | None]) -> dict[str, pb.Revision]:
    return {d: rev_to_pb(r) for d, r in revs.items() if r is not None}


def revs_from_pb(
    domains: Sequence[str], revs: Mapping[str, pb.Revision]
) -> dict[str, Revision | None]:
    return {d: rev_from_pb(revs[d]) if d in revs else None for d in domains}


def change_to_pb(change: Change) -> pb.Change:
    return pb.Change(
        revision=rev_to_pb(change.revision),
        op=change.op,
        scope=str(change.scope) if change.scope else "",
        skill=change.skill or "",
        version=change.version or 0,
        actor=change.actor or "",
        message=change.message or "",
    )


def change_from_pb(msg: pb.Change) -> Change:
    return Change(
        revision=rev_from_pb(msg.revision),
        op=msg.op,  # pydantic checks the literal
        scope=Scope.parse(msg.scope) if msg.scope else None,
        skill=msg.skill or None,
        version=msg.version or None,
        actor=msg.actor or None,
        message=msg.message or None,
    )


def audit_to_pb(e: AuditEntry) -> pb.AuditRecord:
    return pb.AuditRecord(**e.model_dump(exclude={"scope"}), scope=str(e.scope))


def audit_from_pb(msg: pb.AuditRecord) -> AuditEntry:
    return AuditEntry(
        scope=Scope.parse(msg.scope),
        skill=msg.skill,
        version=msg.version,
        action=msg.action,
        actor=msg.actor,
        message=msg.message,
        committed_at=msg.committed_at,
        commit_id=msg.commit_id,
    )


def manifest_bytes(m: Manifest) -> bytes:
    return m.model_dump_json().encode()


def manifest_from(data: bytes) -> Manifest:
    return Manifest.from_json(data)


def manifest_request(data: bytes) -> Manifest:
    """A manifest a client sent: read strictly (a stored one that cannot be read is salvaged,
    a request that cannot be read is refused with what is wrong)."""
    try:
        return Manifest.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidArgument(
            f"the manifest sent is not valid{f' at {where}' if where else ''}: {first['msg']}; "
            "nothing was written"
        ) from None


@functools.lru_cache(maxsize=4096)
def scope_from(text: str) -> Scope:
    """A scope string from a request; a bad one is INVALID_ARGUMENT. Cached: scopes are few
    and immutable, and parsing one is a visible part of a cached read."""
    return Scope.parse(text)


def summary_from(data: bytes) -> VersionSummary:
    return VersionSummary.model_validate_json(data)


# ------------------------------------------------------------------ bounded messages


def protocol_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> int:
    """The protocol a call's metadata declares (1 when it declares none)."""
    for key, value in metadata or ():
        if key == PROTOCOL_KEY:
            text = value if isinstance(value, str) else value.decode()
            return int(text) if text.isdigit() else 1
    return 1


def packed(items: Iterable[bytes], budget: int = BUDGET) -> Iterator[tuple[list[bytes], bool]]:
    """`items` (JSON documents) in messages of at most `budget` bytes each: (the items of one
    message, whether its last item continues in the next message's first). An item larger
    than a message is cut into pieces; at least one message is made, empty when there is
    nothing to send (a protocol 1 caller reads exactly one)."""
    batch: list[bytes] = []
    size = 0
    sent = False
    for item in items:
        if batch and size + len(item) > budget and (len(item) <= budget or size >= budget):
            yield batch, False  # the item fits a message of its own, or this one is full
            batch, size, sent = [], 0, True
        while size + len(item) > budget:
            cut = budget - size
            batch.append(item[:cut])
            yield batch, True
            batch, size, sent, item = [], 0, True, item[cut:]
        batch.append(item)
        size += len(item)
    if batch or not sent:
        yield batch, False


def joined(messages: Iterable[tuple[Sequence[bytes], bool]]) -> list[bytes]:
    """The items `packed` sent, their pieces put back together."""
    out: list[bytes] = []
    carry: bytes | None = None
    for items, continued in messages:
        last = len(items) - 1
        for i, item in enumerate(items):
            if carry is not None:
                item, carry = carry + item, None
            if continued and i == last:
                carry = item
            else:
                out.append(item)
    if carry is not None:
        raise InvalidPath("the server's answer ended inside an item: retry")
    return out


def by_size(
    items: Iterable[T], size: Callable[[T], int], budget: int = BUDGET
) -> Iterator[list[T]]:
    """`items` in batches of at most `budget` bytes by `size` (an item is never cut; one
    larger than `budget` goes alone); at least one batch, empty when there are no items."""
    batch: list[T] = []
    total = 0
    sent = False
    for item in items:
        n = size(item) + 8  # a list entry's tag and length
        if batch and total + n > budget:
            yield batch
            batch, total, sent = [], 0, True
        batch.append(item)
        total += n
    if batch or not sent:
        yield batch


def chunked(items: Sequence[T], n: int = NAMES) -> Iterator[Sequence[T]]:
    """`items` in runs of at most `n`, for requests that name many things (at least one run)."""
    for i in range(0, max(len(items), 1), n):
        yield items[i : i + n]
