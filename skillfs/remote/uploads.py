"""A grpc:// engine's blob uploads on the wire (docs/server.md, "Blobs and hashes"): a big blob
alone in an UploadBlob stream of pieces; small ones in UploadBlobs batches, since one call each
costs more than their bytes (a 2,000-file skill of small files: 2,000 calls)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from skillfs.remote import wire
from skillfs.remote.proto import skillfs_pb2 as pb

#: A blob of a batch: (sha256, its bytes).
Small = tuple[str, bytes]


def blob_messages(
    sha: str, chunks: Sequence[bytes], now: float, domain: str
) -> Iterator[pb.UploadBlobRequest]:
    """One blob's UploadBlob stream: its header, then its bytes in pieces."""
    size = sum(len(c) for c in chunks)
    header = pb.UploadBlobHeader(sha256=sha, size=size, now=now, domain=domain)
    yield pb.UploadBlobRequest(header=header)
    for chunk in chunks:
        for off in range(0, len(chunk), wire.PIECE):
            yield pb.UploadBlobRequest(data=chunk[off : off + wire.PIECE])


def split(
    blobs: Mapping[str, Sequence[bytes]],
) -> tuple[dict[str, Sequence[bytes]], list[list[Small]]]:
    """The blobs over `wire.PIECE` bytes, sent alone, and the others in batches of at most
    `wire.NAMES` blobs and `wire.UPLOAD_BATCH_BYTES`."""
    alone: dict[str, Sequence[bytes]] = {}
    batches: list[list[Small]] = []
    held = 0
    for sha, chunks in blobs.items():
        if sum(len(c) for c in chunks) > wire.PIECE:
            alone[sha] = chunks  # (not joined: sent in its own pieces)
            continue
        data = b"".join(chunks)
        if (
            not batches
            or len(batches[-1]) == wire.NAMES
            or held + len(data) > wire.UPLOAD_BATCH_BYTES
        ):
            batches.append([])
            held = 0
        batches[-1].append((sha, data))
        held += len(data)
    return alone, batches


def batch_messages(batch: Sequence[Small], now: float, domain: str) -> list[pb.UploadBlobsRequest]:
    """One batch's UploadBlobs stream: the blobs named first, then their bytes concatenated,
    in messages of at most `wire.BUDGET` bytes (under a 1 MiB message limit)."""
    data = b"".join(d for _, d in batch)
    first = pb.UploadBlobsRequest(
        blobs=[pb.BlobSize(sha256=sha, size=len(d)) for sha, d in batch], now=now, domain=domain
    )
    pieces = (data[i : i + wire.BUDGET] for i in range(0, len(data), wire.BUDGET))
    return [first, *(pb.UploadBlobsRequest(data=p) for p in pieces)]
