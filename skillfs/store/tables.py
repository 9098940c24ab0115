"""Big file tables kept in content-addressed chunks (docs/design.md §2, "File tables"), once,
above every engine: a version of a skill of many files stores the few chunks its change
touched and a short list of digests, not its whole table again.

`Tables` is the engine a store works through. Before a commit it turns every file table
over `INLINE_MAX` rows (a manifest's, a staged candidate's) into a tree of chunks of at most
`FANOUT` entries, written like blobs; its reads give every manifest back whole. Chunk
boundaries are content-defined (a row ends a chunk where its path's hash says so), so a
change of one file rewrites a chunk or two and the one chunk above them, whatever the file's
place in the table. Chunks are immutable and named by their SHA-256, so an in-process cache
keeps them parsed: a reload, or a version that changed a file, reads only the chunks it has
not seen."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from skillfs.engines.base import Charge, Check, CommitOp, Engine
from skillfs.errors import InvalidArgument
from skillfs.model import FileEntry, Finding, Manifest, Revision, Scope
from skillfs.model.table import TableChunk, TableRef
from skillfs.store.blobs import chunked
from skillfs.store.quotas import Footprint
from skillfs.util.lru import Lru

log = logging.getLogger(__name__)
K = TypeVar("K")
T = TypeVar("T")

#: A file table of more rows than this is stored in chunks; a smaller one stays in its
#: manifest, so a scope of ordinary skills still loads in one round trip.
INLINE_MAX = 256
#: The most entries a chunk holds (file rows, or digests of the chunks below), and the most
#: digests a manifest's `table` lists: a taller table gets another level.
FANOUT = 64
#: About one entry in this many ends its chunk: a row whose path's SHA-256 starts with a
#: byte divisible by it, a digest that does (chunks of ~16 entries on average).
BOUNDARY = 16
#: Entries (rows and digests) the parsed-chunk cache holds: the tables of some 50
#: skills of 4,000 files, sharing their rows with the manifests a worker holds anyway.
CACHE_ENTRIES = 200_000
#: Bytes of serialized chunks kept by their content, so that a commit serializes only the
#: chunks its change touched (the tables of a few skills of 4,000 files).
MADE_BYTES = 16 * 1024 * 1024
#: Bytes of chunks of the manifests last priced for a commit's quota charge (`footprint`),
#: kept with the manifests until their commit stores them: a few skills of 4,000 files.
PRICED_BYTES = 4 * 1024 * 1024


@functools.lru_cache(maxsize=65536)
def _ends_at(path: str) -> bool:
    return hashlib.sha256(path.encode()).digest()[0] % BOUNDARY == 0


def _path_ends(row: tuple[str, FileEntry]) -> bool:
    return _ends_at(row[0])


def _digest_ends(digest: str) -> bool:
    return int(digest[:2], 16) % BOUNDARY == 0


def _runs(items: Sequence[T], ends: Callable[[T], bool]) -> Iterator[list[T]]:
    """`items` cut into runs of at most FANOUT, each ending where `ends` says or at FANOUT."""
    run: list[T] = []
    for item in items:
        run.append(item)
        if len(run) == FANOUT or ends(item):
            yield run
            run = []
    if run:
        yield run


def _tables(m: Manifest) -> list[TableRef]:
    """The stored tables a manifest holds: its own, its staged candidate's, its labelled
    versions'."""
    found = [m.table] if m.table is not None else []
    if m.candidate is not None and m.candidate.table is not None:
        found.append(m.candidate.table)
    found.extend(held.table for held in m.labels.values() if held.table is not None)
    return found


def _weight(chunk: TableChunk) -> int:
    return len(chunk.files) + len(chunk.chunks)


def _made_size(made: tuple[str, bytes]) -> int:
    return len(made[1])


def _priced_size(priced: tuple[Manifest, Manifest, dict[str, bytes]]) -> int:
    return sum(len(data) for data in priced[2].values())


class MissingChunk(Exception):
    """A stored table names a chunk the store does not have (or holds other bytes under)."""

    def __init__(self, digest: str) -> None:
        super().__init__(digest)
        self.digest = digest


class _Inner:
    """A method of `Tables` that is its inner engine's, unchanged: the inner's own bound
    method, so a call costs what a call of the inner engine does."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, tables: Tables | None, owner: type | None = None) -> Any:
        return self if tables is None else getattr(tables.inner, self.name)


class Tables(Engine):
    """An engine whose big file tables are kept in chunks, over the engine that stores them
    (`inner`). Every primitive is the inner engine's; commits and manifest reads convert.
    What else the inner engine has (its client, its own helpers) is reached through this
    object too."""

    table_chunks = False  # over an engine whose tables are already whole: not again

    def __init__(self, inner: Engine, clock: Callable[[], float]) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.chunk_size = inner.chunk_size
        self.max_ops = inner.max_ops
        self.watch_wait = inner.watch_wait
        self._clock = clock
        self._chunks: Lru[str, TableChunk] = Lru(CACHE_ENTRIES, _weight)
        #: A chunk's entries -> its digest and bytes, for the chunks commits made.
        self._made: Lru[tuple[Any, ...], tuple[str, bytes]] = Lru(MADE_BYTES, _made_size)
        #: The manifests `footprint` chunked, by identity (each kept alive here, so its id
        #: is its own), with their stored form and chunks: the commit that follows its
        #: charge stores them without chunking them again.
        self._priced: Lru[int, tuple[Manifest, Manifest, dict[str, bytes]]] = Lru(
            PRICED_BYTES, _priced_size
        )

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy, an unpickled object): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ writing tables

    def commit(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        checks: Sequence[Check] = (),
        charges: Sequence[Charge] = (),
    ) -> Revision:
        """The inner commit of `ops` with their big tables in chunks, written first."""
        written: dict[str, bytes] = {}
        stored = [self._packed(op, written) for op in ops]
        if written:
            self._upload(stored, written)
        return self.inner.commit(domain, stored, checks, charges)

    def _packed(self, op: CommitOp, written: dict[str, bytes]) -> CommitOp:
        m = op.manifest
        if _tables(m):
            raise InvalidArgument(
                f"{op.scope}/{m.skill}: a manifest to commit gives its files, not a stored "
                "table of chunks (the store makes those); nothing was written"
            )
        priced = self._priced.get(id(m))
        if priced is not None and priced[0] is m:
            stored = priced[1]
            written.update(priced[2])
        else:
            stored = self._stored(m, written)
        if stored is m:
            return op
        return CommitOp(scope=op.scope, manifest=stored, expect=op.expect)

    def _stored(self, m: Manifest, written: dict[str, bytes]) -> Manifest:
        """`m` as it is stored: its file tables (its own, its staged candidate's, its labelled
        versions') over INLINE_MAX rows in chunks, added to `written`."""
        if len(m.files) > INLINE_MAX:
            m = dataclasses.replace(m, files={}, table=self._table(m.files, written))
        c = m.candidate
        if c is not None and len(c.files) > INLINE_MAX:
            staged = dataclasses.replace(c, files={}, table=self._table(c.files, written))
            m = dataclasses.replace(m, candidate=staged)
        if any(len(held.files) > INLINE_MAX for held in m.labels.values()):
            labels = {
                name: dataclasses.replace(held, files={}, table=self._table(held.files, written))
                if len(held.files) > INLINE_MAX
                else held
                for name, held in m.labels.items()
            }
            m = dataclasses.replace(m, labels=labels)
        return m

    def footprint(self, m: Manifest) -> Footprint:
        """What `m`, a manifest with its tables whole (one to commit, or one read back),
        holds once stored (its quota charge, `store.quotas`): its tables chunked as a
        commit chunks them, from this object's cache of the chunks it made (no chunk is
        read), and kept for the commit that stores `m` next."""
        written: dict[str, bytes] = {}
        stored = self._stored(m, written)
        if written:
            self._priced.put(id(m), (m, stored, written))
        return Footprint.of(stored, m, {d: len(data) for d, data in written.items()})

    def _table(self, files: Mapping[str, FileEntry], written: dict[str, bytes]) -> TableRef:
        """The chunks of a file table (added to `written`) and the reference to them."""
        rows = sorted(files.items())
        refs = [self._chunk(tuple(run), written) for run in _runs(rows, _path_ends)]
        while len(refs) > FANOUT:
            refs = [self._chunk(tuple(run), written) for run in _runs(refs, _digest_ends)]
        size = sum(e.size for _, e in rows)
        return TableRef(chunks=tuple(refs), count=len(rows), size=size)

    def _chunk(
        self,
        entries: tuple[tuple[str, FileEntry], ...] | tuple[str, ...],
        written: dict[str, bytes],
    ) -> str:
        """The digest of the chunk of these entries, rows or digests (added to `written`),
        made and serialized only when this object has not made it before."""
        made = self._made.get(entries)
        if made is None:
            chunk = (
                TableChunk(chunks=entries)
                if isinstance(entries[0], str)
                else TableChunk(files=dict(entries))
            )
            data = chunk.model_dump_json().encode()
            made = (hashlib.sha256(data).hexdigest(), data)
            self._made.put(entries, made)
            self._chunks.put(made[0], chunk)
        written[made[0]] = made[1]
        return made[0]

    def _upload(self, ops: Sequence[CommitOp], written: Mapping[str, bytes]) -> None:
        """Store the chunks the versions these ops replace do not already reference. Those
        are touched (a chunk stored before, maybe unreferenced, gets GC's grace again) or
        written; the others are safe from GC as it is: its mark reads the live version,
        which holds them before the commit and after it (docs/architecture.md, "Blob GC")."""
        kept: set[str] = set()
        by_scope: dict[Scope, list[CommitOp]] = {}
        for op in ops:
            if op.expect and _tables(op.manifest):
                by_scope.setdefault(op.scope, []).append(op)
        for scope, some in by_scope.items():
            current = self.inner.load_skills(scope, [op.manifest.skill for op in some])
            for op in some:
                cur = current.get(op.manifest.skill)
                if cur is not None and cur.version == op.expect:
                    roots = [d for t in _tables(cur) for d in t.chunks]
                    kept.update(d for d, c in self._trees(roots).items() if c is not None)
        fresh = [d for d in written if d not in kept]
        stamp = self._clock()
        present = self.inner.touch_blobs(fresh, stamp) if fresh else set()
        size = self.inner.chunk_size
        missing = {d: chunked(written[d], size) for d in fresh if d not in present}
        self.inner.put_blobs(missing, stamp)

    # ------------------------------------------------------------------ reading tables

    def _trees(self, roots: Iterable[str]) -> dict[str, TableChunk | None]:
        """Every chunk below `roots` by digest (None: missing or damaged), cached ones from
        memory, the rest read one level at a time, each level in one round trip."""
        found: dict[str, TableChunk | None] = {}
        level = list(dict.fromkeys(roots))
        while level:
            cold = []
            for digest in level:
                cached = self._chunks.get(digest)
                if cached is None:
                    cold.append(digest)
                else:
                    found[digest] = cached
            found.update(self._read(cold))
            below = (d for digest in level if (c := found[digest]) for d in c.chunks)
            level = [d for d in dict.fromkeys(below) if d not in found]
        return found

    def _read(self, digests: Sequence[str]) -> dict[str, TableChunk | None]:
        """Chunks from the store, checked against their digests, and cached."""
        if not digests:
            return {}
        size = self.inner.chunk_size
        out: dict[str, TableChunk | None] = {}
        for digest, first in zip(digests, self.inner.get_chunks([(d, 0) for d in digests]),
                                 strict=True):  # fmt: skip
            data = first
            index = 1
            while data is not None and len(data) == size * index:  # over one blob piece
                more = self.inner.get_chunks([(digest, index)])[0]
                if more is None:
                    break
                data += more
                index += 1
            out[digest] = self._parsed(digest, data)
        return out

    def _parsed(self, digest: str, data: bytes | None) -> TableChunk | None:
        if data is None or hashlib.sha256(data).hexdigest() != digest:
            return None
        try:
            chunk = TableChunk.model_validate_json(data)
        except ValidationError:
            return None
        self._chunks.put(digest, chunk)
        return chunk

    def _whole(self, manifests: Mapping[K, Manifest]) -> dict[K, Manifest]:
        """The manifests with their stored tables read back into `files`."""
        roots = [d for m in manifests.values() for t in _tables(m) for d in t.chunks]
        if not roots:
            return dict(manifests)
        chunks = self._trees(roots)
        return {k: _expanded(m, chunks) for k, m in manifests.items()}

    def whole(self, manifests: Sequence[Manifest]) -> list[Manifest]:
        """Stored manifests with their tables read back."""
        return list(self._whole(dict(enumerate(manifests))).values())

    def footprints(self, stored: Sequence[Manifest]) -> list[Footprint]:
        """What stored manifests hold (GC's quota recount, `store.quotas.Recount`): each
        one's bytes as stored, the chunks of its tables (a chunk's bytes are its JSON, whose
        SHA-256 names it) and the files listed there. A chunk that cannot be read counts
        nothing, and neither do the files it would list."""
        roots = [d for m in stored for t in _tables(m) for d in t.chunks]
        chunks = self._trees(roots)
        sizes: dict[str, int] = {}
        out = []
        for m in stored:
            below = [found for t in _tables(m) for found in _tree(t, chunks)]
            for digest, chunk in below:
                if digest not in sizes:
                    sizes[digest] = len(chunk.model_dump_json())
            out.append(Footprint.of(m, _expanded(m, chunks), {d: sizes[d] for d, _ in below}))
        return out

    def references(self, manifests: Iterable[Manifest], into: set[str]) -> None:
        """Every blob stored manifests reference, their tables' chunks and the files listed
        there included, added to `into` (GC's mark; a top chunk marked already, shared with
        a version seen before, is not walked again)."""
        held = list(manifests)
        for m in held:
            into.update(e.sha256 for _, e in m.all_files())
        roots = [d for m in held for t in _tables(m) for d in t.chunks]
        for digest, chunk in self._trees(d for d in roots if d not in into).items():
            if chunk is None:
                log.warning("GC: the file table chunk %s is missing; its files are unreachable",
                            digest)  # fmt: skip
                continue
            into.add(digest)
            into.update(e.sha256 for e in chunk.files.values())

    # ------------------------------------------------------------------ manifests

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        return self._whole(self.inner.load_scope(scope))

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        return self._whole(self.inner.load_skills(scope, skills))

    def history(self, scope: Scope, skill: str) -> list[Manifest]:
        return self.whole(self.inner.history(scope, skill))

    def history_version(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        found = self.inner.history_version(scope, skill, version)
        return None if found is None else self._whole({0: found})[0]

    def scope_history(self, scope: Scope, skills: Sequence[str]) -> dict[str, list[Manifest]]:
        found = self.inner.scope_history(scope, skills)
        flat = self._whole({(s, i): m for s, ms in found.items() for i, m in enumerate(ms)})
        return {s: [flat[(s, i)] for i in range(len(ms))] for s, ms in found.items()}

    # ------------------------------------------------------------------ the rest: the inner's

    # Every other primitive is the inner engine's own method (an `Engine` default inherited
    # here would run over this object instead: `usage_agents` would answer None). The
    # history summaries are its too: they carry their tables' counts and sizes, no chunk read.
    entry_names = _Inner()
    history_summaries = _Inner()
    drop_history = _Inner()
    quota_used = _Inner()
    charge_quota = _Inner()
    adjust_quota = _Inner()
    touch_blobs = _Inner()
    put_blob = _Inner()
    put_blobs = _Inner()
    get_chunks = _Inner()
    blob_shas = _Inner()
    delete_blob_if_idle = _Inner()
    revisions = _Inner()
    changes = _Inner()
    changes_many = _Inner()
    wake_waits = _Inner()
    domains = _Inner()
    stored_domains = _Inner()
    scopes = _Inner()
    add_usage = _Inner()
    usage_detail = _Inner()
    delete_usage = _Inner()
    drop_usage = _Inner()
    usage_agents = _Inner()
    usage = _Inner()
    audit = _Inner()
    gc = _Inner()
    acquire_lease = _Inner()
    renew_lease = _Inner()
    release_lease = _Inner()
    ping = _Inner()
    close = _Inner()


def _expanded(m: Manifest, chunks: Mapping[str, TableChunk | None]) -> Manifest:
    """`m` with its stored tables read back; a table that cannot be read leaves the version
    without files and with an error finding (like a manifest that cannot be parsed)."""
    if not _tables(m):
        return m
    try:
        if m.table is not None:
            m = dataclasses.replace(m, files=_rows(m.table, chunks), table=None)
        c = m.candidate
        if c is not None and c.table is not None:
            staged = dataclasses.replace(c, files=_rows(c.table, chunks), table=None)
            m = dataclasses.replace(m, candidate=staged)
        if any(held.table is not None for held in m.labels.values()):
            labels = {
                name: held
                if held.table is None
                else dataclasses.replace(held, files=_rows(held.table, chunks), table=None)
                for name, held in m.labels.items()
            }
            m = dataclasses.replace(m, labels=labels)
    except MissingChunk as exc:
        return _unreadable(m, exc.digest)
    return m


def _rows(table: TableRef, chunks: Mapping[str, TableChunk | None]) -> dict[str, FileEntry]:
    files: dict[str, FileEntry] = {}
    pending = list(reversed(table.chunks))
    while pending:
        digest = pending.pop()
        chunk = chunks.get(digest)
        if chunk is None:
            raise MissingChunk(digest)
        files.update(chunk.files)
        pending.extend(reversed(chunk.chunks))
    if len(files) != table.count:
        raise MissingChunk(table.chunks[0] if table.chunks else "")
    return files


def _tree(table: TableRef, chunks: Mapping[str, TableChunk | None]) -> list[tuple[str, TableChunk]]:
    """Every chunk of a stored table that could be read, with its digest."""
    found: list[tuple[str, TableChunk]] = []
    pending = list(table.chunks)
    while pending:
        digest = pending.pop()
        chunk = chunks.get(digest)
        if chunk is not None:
            found.append((digest, chunk))
            pending.extend(chunk.chunks)
    return found


def _unreadable(m: Manifest, digest: str) -> Manifest:
    log.warning("the file table of %s (version %s) is unreadable: chunk %s", m.skill, m.version,
                digest)  # fmt: skip
    finding = Finding(
        severity="error",
        rule="manifest-unreadable",
        message=(
            f"the file table of version {m.version} cannot be read (its chunk {digest} is "
            "missing from the store or damaged): publish the skill again (or delete it) to "
            "repair it"
        ),
    )
    return dataclasses.replace(
        m, files={}, table=None, candidate=None, labels={}, frontmatter=None, findings=(finding,)
    )
