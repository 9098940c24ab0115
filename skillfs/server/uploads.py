"""What an upload is held to, one blob (UploadBlob) or a batch (UploadBlobs) alike
(docs/server.md, "Blobs and hashes"): the token may write somewhere; each blob's size is within
`Limits.max_file_size`; the bytes are counted against the server's `UploadBudget` and charged
to the token's quota in its domain before any is read, and given back when they are not
stored; every blob is checked against its SHA-256 before any is stored, so a bad one stores
nothing of its call."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence

from skillfs.auth import Level, Principal
from skillfs.errors import InvalidArgument, PermissionDenied, TooLarge
from skillfs.remote import wire
from skillfs.server.backend import Backend
from skillfs.server.proofs import upload_domain
from skillfs.server.rpc import check_sha
from skillfs.store.blobs import sha256

#: A blob an upload names: (sha256, size).
Named = tuple[str, int]


class Uploads:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.store = backend.store

    def named(self, call: str, blobs: Sequence[Named]) -> list[Named]:
        """The blobs a call names, their hashes and sizes checked; a batch bounded in blobs
        and bytes (`remote.wire.NAMES`, `remote.wire.UPLOAD_BATCH_BYTES`)."""
        if len(blobs) > wire.NAMES:
            raise TooLarge(
                f"{call} names {len(blobs)} blobs: at most {wire.NAMES} per call; send them "
                "in several calls"
            )
        limit = self.store.limits.max_file_size
        checked = []
        for sha, size in blobs:
            sha = check_sha(sha)
            if size < 0 or size > limit:
                raise TooLarge(
                    f"blob of {size} bytes: files may hold 0 to {limit} bytes "
                    "(Limits.max_file_size)"
                )
            checked.append((sha, size))
        total = sum(size for _, size in checked)
        if len(checked) > 1 and total > wire.UPLOAD_BATCH_BYTES:
            raise TooLarge(
                f"{call} names {total} bytes of blobs: at most {wire.UPLOAD_BATCH_BYTES} per "
                f"call; send blobs over {wire.PIECE} bytes alone through UploadBlob"
            )
        return checked

    @contextlib.asynccontextmanager
    async def charged(
        self, principal: Principal, named_domain: str, blobs: Sequence[Named]
    ) -> AsyncIterator[str]:
        """Spend the blobs' bytes from the token's budget and charge them to its quota
        before the block reads them; given back if the block fails. Yields the domain the
        receipts name as charged ("": nothing was charged)."""
        total = sum(size for _, size in blobs)
        domain = upload_domain(principal, named_domain)
        self.backend.proofs.uploads.spend(principal, total)
        charge = await self.backend.run(self.store.charge_token, domain, total, "this upload")
        try:
            yield domain if charge is not None else ""
        except BaseException:
            if charge is not None:  # given back whatever ends the call (not awaited)
                refund = functools.partial(self.store.refund, domain, charge, total)
                asyncio.get_running_loop().run_in_executor(self.backend.executor, refund)
            raise

    async def gathered(self, call: str, pieces: AsyncIterator[bytes], size: int) -> bytes:
        """The bytes of a call's data messages as they arrive on the event loop (an idle
        stream holds no thread), refused as soon as they pass the `size` announced."""
        buf = bytearray()
        async for piece in pieces:
            buf += piece
            if len(buf) > size:
                raise InvalidArgument(f"{call}: more than the {size} bytes announced")
        if len(buf) < size:
            raise InvalidArgument(
                f"{call}: the stream ended after {len(buf)} of the {size} bytes announced; "
                "nothing was stored"
            )
        return bytes(buf)

    async def store_all(
        self,
        call: str,
        principal: Principal,
        blobs: Sequence[Named],
        data: bytes,
        now: float,
        charged_in: str,
    ) -> list[bytes]:
        """The blobs (their bytes concatenated in `data`) checked, then those the store lacks
        written; a receipt for each, naming the domain they were charged in."""
        stamp = self.backend.now(principal, now)
        await self.backend.run(self._stored, call, blobs, data, stamp)
        receipt = functools.partial(self.backend.tokens.receipt, principal, charged_in=charged_in)
        return [receipt(sha, size) for sha, size in blobs]

    def _stored(self, call: str, blobs: Sequence[Named], data: bytes, now: float) -> None:
        parts: dict[str, bytes] = {}
        at = 0
        for i, (sha, size) in enumerate(blobs):
            part = data[at : at + size]
            at += size
            if sha256(part) != sha:
                which = f"blob {i + 1} of {len(blobs)} " if len(blobs) > 1 else ""
                raise InvalidArgument(
                    f"{call}: the {size} bytes sent for {which}{sha} do not hash to it; "
                    "nothing was stored"
                )
            parts[sha] = part
        present = self.backend.engine.touch_blobs(list(parts), now)
        self.store.blobs.put_many({s: d for s, d in parts.items() if s not in present}, now)


def may_upload(principal: Principal) -> None:
    """Refuse a token that may write nowhere (not even drafts) before it sends anything."""
    if not any(g.level >= Level.propose for g in principal.grants):
        raise PermissionDenied(
            f"token {principal.name!r} may write nowhere (not even drafts), so it may not upload"
        )
