"""A store's blobs: written in the engine's chunks, read by byte range, cached whole by SHA-256.

Blobs are immutable, so the cache is always right and never invalidated (docs/design.md §2).
The `Store` owns one `Blobs`; the server reaches it through the Store's public operations.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import ParamSpec, Protocol, TypeVar

from skillfs.engines.base import Engine
from skillfs.errors import NotFound
from skillfs.model import FileEntry
from skillfs.remote.hints import hints_of
from skillfs.util.lru import Lru

T = TypeVar("T")
P = ParamSpec("P")

#: An unsized read asks for this many chunks at a time until the blob ends.
UNSIZED_STEP = 8
#: A small file: read ahead into the blob cache when its skill changes (a worker's follower,
#: the server's hub) and carried in watch events (docs/server.md, "The serving model").
SMALL_FILE_BYTES = 256 * 1024
#: At most this many bytes are read ahead after one batch of changes.
READ_AHEAD_BYTES = 8 * 1024 * 1024


def small_files(entries: Iterable[FileEntry], budget: int = READ_AHEAD_BYTES) -> list[FileEntry]:
    """The small files of `entries`, in order, each once, at most `budget` bytes in all: what
    is read ahead of a changed skill."""
    out: list[FileEntry] = []
    taken: set[str] = set()
    for e in entries:
        if e.size <= min(SMALL_FILE_BYTES, budget) and e.sha256 not in taken:
            taken.add(e.sha256)
            out.append(e)
            budget -= e.size
    return out


def chunked(data: bytes, size: int) -> list[bytes]:
    """A blob's bytes in chunks of `size` (an empty blob is one empty chunk)."""
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def sha256(data: bytes) -> str:
    """A blob's name: the hex SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


class Retrying(Protocol):
    """The store's retry of an idempotent engine call while the store is unavailable."""

    def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...


class Blobs:
    def __init__(self, engine: Engine, retrying: Retrying, cache_bytes: int) -> None:
        self._engine = engine
        self._retrying = retrying
        # a file over a quarter of the cache is not kept
        self._cache: Lru[str, bytes] = Lru(cache_bytes, len, cache_bytes // 4)

    def clear(self) -> None:
        self._cache.clear()

    def put(self, digest: str, data: bytes, now: float, domain: str = "") -> None:
        """Write one blob's bytes for a commit in `domain` (`put_many`)."""
        self.put_many({digest: data}, now, domain)

    def put_many(self, blobs: Mapping[str, bytes], now: float, domain: str = "") -> None:
        """Write blobs (digest -> bytes), each in the engine's chunks (an empty blob is one
        empty chunk), for a commit in `domain` (`Engine.put_blobs`)."""
        self._engine.put_blobs({digest: chunked(data, self._engine.chunk_size)
                                for digest, data in blobs.items()}, now, domain)  # fmt: skip

    def upload(
        self,
        blobs: Mapping[str, bytes],
        refs: set[str],
        now: float,
        domain: str = "",
        pay: Callable[[int], object] | None = None,
    ) -> set[str]:
        """Write the blobs the store lacks (for a commit in `domain`), once `pay` was given
        their bytes (it may refuse them: nothing is written), and refresh the last-use time
        of the ones it has and of the stored files kept by reference (that is GC's grace).
        Returns the digests written."""
        if not blobs and not refs:
            return set()
        present = self._retrying(self._engine.touch_blobs, [*blobs, *refs], now)
        lost = refs - present
        if lost:
            raise NotFound(
                f"the store no longer has blob {min(lost)}: a file kept by reference must "
                "still be stored; send its bytes instead"
            )
        fresh = {digest: data for digest, data in blobs.items() if digest not in present}
        if pay is not None and fresh:
            pay(sum(len(data) for data in fresh.values()))
        if fresh:
            tries = itertools.count()

            def put_rest() -> None:
                """`put_many`; tried again, only the blobs the store still lacks: the calls
                before the failure stored theirs, and a skillfs server charged the token for
                them (grpc:// uploads in batches)."""
                rest = fresh
                if next(tries):
                    held = self._engine.touch_blobs(list(fresh), now)
                    rest = {digest: data for digest, data in fresh.items() if digest not in held}
                self.put_many(rest, now, domain)

            self._retrying(put_rest)
        for digest, data in blobs.items():
            self._cache.put(digest, data)
        return set(fresh)

    def read_cached(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes | None:
        """`read` when the blob is in the cache, else None (never a store call)."""
        end = entry.size if end is None else max(start, min(end, entry.size))
        if start >= end:
            return b""
        cached = self._cache.get(entry.sha256)
        return None if cached is None else cached[start:end]

    def _held(self, digest: str) -> bytes | None:
        """A blob this process holds already: cached, or carried to the engine (a grpc://
        watch event's small files, `Hints.known_blob`), which is then cached."""
        data = self._cache.get(digest)
        if data is None:
            data = hints_of(self._engine).known_blob(digest)
            if data is not None:
                self._cache.put(digest, data)
        return data

    def read(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes:
        """A file's bytes (or the range [start, end)), reading only the chunks it covers."""
        end = entry.size if end is None else max(start, min(end, entry.size))
        if start >= end:
            return b""
        cached = self._held(entry.sha256)
        if cached is not None:
            return cached[start:end]
        whole = start == 0 and end == entry.size
        size = self._engine.chunk_size
        first, last = (
            (0, (entry.size - 1) // size) if whole else (start // size, max(start, end - 1) // size)
        )
        chunks = self._retrying(
            self._engine.get_chunks, [(entry.sha256, i) for i in range(first, last + 1)]
        )
        if any(c is None for c in chunks):
            raise NotFound(
                f"blob {entry.sha256} is missing from store {self._engine.url}: the store lost "
                "data or a GC ran with too short a grace; republish the skill"
            )
        data = b"".join(c for c in chunks if c is not None)
        if whole:
            self._cache.put(entry.sha256, data)
            return data
        offset = first * size
        return data[start - offset : end - offset]

    def read_many(self, entries: Iterable[FileEntry]) -> dict[str, bytes]:
        """Many files at once: cached ones from memory, the rest in one batched round trip."""
        wanted = {e.sha256: e for e in entries}
        out: dict[str, bytes] = {}
        keys: list[tuple[str, int]] = []
        for digest, e in wanted.items():
            cached = self._held(digest)
            if cached is not None:
                out[digest] = cached
            elif e.size == 0:
                out[digest] = b""
            else:
                keys += [(digest, i) for i in range((e.size - 1) // self._engine.chunk_size + 1)]
        if keys:
            chunks = self._retrying(self._engine.get_chunks, keys)
            parts: dict[str, list[bytes]] = {}
            for (digest, _), chunk in zip(keys, chunks, strict=True):
                if chunk is None:
                    raise NotFound(
                        f"blob {digest} is missing from store {self._engine.url}; "
                        "republish the skill"
                    )
                parts.setdefault(digest, []).append(chunk)
            for digest, chunk_list in parts.items():
                out[digest] = b"".join(chunk_list)
                self._cache.put(digest, out[digest])
        return out

    def read_unsized(self, sha: str, start: int = 0, end: int | None = None) -> bytes:
        """A range of a blob whose size is not known: chunks are read until one is missing."""
        size = self._engine.chunk_size
        first = start // size
        last = first + UNSIZED_STEP if end is None else max(start, end - 1) // size
        chunks = self._retrying(self._engine.get_chunks, [(sha, i) for i in range(first, last + 1)])
        if chunks[0] is None and (
            first == 0 or self._retrying(self._engine.get_chunks, [(sha, 0)])[0] is None
        ):
            raise NotFound(f"blob {sha} is not in the store: republish the skill that names it")
        parts: list[bytes] = []
        for c in chunks:
            if c is None:
                break
            parts.append(c)
        if end is None and len(parts) == len(chunks):  # longer than this step: read on
            parts.append(self.read_unsized(sha, (last + 1) * size, None))
        data = b"".join(parts)
        offset = start - first * size
        return data[offset : None if end is None else end - first * size]
