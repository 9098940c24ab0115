"""What the reader and admin services share: the store, the tokens, the one executor that
blocking store calls run in, the hub and the views it feeds, the caches of immutable things
and the caps on open streams. The server holds no other state, so any number of servers can
run over one store (docs/server.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from skillfs.api import Store
from skillfs.auth import Principal, Tokens
from skillfs.model import Manifest, Scope
from skillfs.server.hub import QUEUE, Hub
from skillfs.server.metrics import Metrics
from skillfs.server.proofs import BlobProofs, ManifestIndex
from skillfs.server.revisions import SharedReads
from skillfs.server.rpc import CALL_END, Busy
from skillfs.server.views import Views
from skillfs.store.blobs import small_files
from skillfs.store.quotas import Credential, acting_as, current
from skillfs.util.deadline import budget

T = TypeVar("T")
MiB = 1024 * 1024
#: Seconds between two looks at the tokens config for open Watch streams: a revoked token's
#: stream ends within this plus the config's own re-check interval (`Tokens.RECHECK_SECONDS`).
TOKENS_CHECK = 1.0


class Caps(BaseModel):
    """The server's limits on what callers hold open (docs/server.md, "Limits"). A call over
    one is answered RESOURCE_EXHAUSTED at once, naming the cap, and the `grpc://` engine
    tries the next server."""

    model_config = ConfigDict(frozen=True)

    #: Open Watch streams, in all and per token: a whole fleet on one token fits.
    max_watches: int = 20_000
    max_watches_per_token: int = 10_000
    #: Other open streams (ReadFile, UploadBlob, Publish, ListBlobs), in all and per token:
    #: a fleet on one token prefetches a publish's files at once (one ReadFile per worker),
    #: so as many as its Watch streams (each holds the range it reads until sent).
    max_streams: int = 20_000
    max_streams_per_token: int = 10_000
    #: Events a Watch stream may have waiting before it is told to reload.
    watch_queue: int = QUEUE
    #: Estimated memory of the view caches (Snapshot, Prompt, LoadSkillThroughPath).
    view_cache_mib: int = 256


class Slots:
    """Open streams of one kind, capped in all and per token."""

    def __init__(self, kind: str, total: int, per_token: int, names: tuple[str, str]) -> None:
        self.kind = kind
        self.total = max(1, total)
        self.per_token = max(1, min(per_token, self.total))
        self.names = names
        self.open = 0
        self._by_token: Counter[str] = Counter()

    @contextlib.contextmanager
    def hold(self, principal: Principal) -> Iterator[None]:
        """One slot for the call's duration (only the event loop calls this: no lock)."""
        key = principal.token_sha256
        if self.open >= self.total:
            raise Busy(
                f"this server is at its cap of {self.total} open {self.kind} ({self.names[0]}): "
                "retry later or on another server"
            )
        if self._by_token[key] >= self.per_token:
            raise Busy(
                f"token {principal.name!r} is at its cap of {self.per_token} open {self.kind} "
                f"on this server ({self.names[1]}): retry later or on another server"
            )
        self.open += 1
        self._by_token[key] += 1
        try:
            yield
        finally:
            self.open -= 1
            self._by_token[key] -= 1
            if not self._by_token[key]:
                del self._by_token[key]


class Backend:
    def __init__(
        self,
        store: Store,
        tokens: Tokens,
        metrics: Metrics,
        threads: int = 64,
        caps: Caps | None = None,
    ) -> None:
        caps = caps or Caps()
        self.store = store
        self.engine = store.engine
        self.tokens = tokens
        self.metrics = metrics
        self.caps = caps
        self.proofs = BlobProofs(tokens, ManifestIndex(store))
        #: The one pool of threads blocking store calls run in, no larger than the store's
        #: connection pool (the server sizes that pool from the same setting).
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="skillfs-store")
        self.hub = Hub(
            store.changes.feed, self.engine, self.run, queue=caps.watch_queue, seen=self.seen
        )
        self.shared_reads = SharedReads(lambda domains: self.run(self.engine.revisions, domains))
        self.views = Views(store, caps.view_cache_mib * MiB)
        self.watches = Slots(
            "watches", caps.max_watches, caps.max_watches_per_token,
            ("max_watches", "max_watches_per_token"),
        )  # fmt: skip
        self.streams = Slots(
            "streams", caps.max_streams, caps.max_streams_per_token,
            ("max_streams", "max_streams_per_token"),
        )  # fmt: skip
        self.stopping = asyncio.Event()
        self._tokens_task: asyncio.Task[None] | None = None

    def seen(self, written: Sequence[tuple[Scope, Manifest]]) -> None:
        """The manifests a batch of the log wrote (the hub loaded them for its events): index
        them for blob proofs and read their small files into the blob cache in one round trip
        (`store.blobs.small_files`, as a worker's follower reads them ahead), so the events
        carry them and the fleet's ReadFile calls are answered from memory on the loop."""
        for scope, m in written:
            self.proofs.index.remember(scope, m)
        # a staged candidate's files too: its workers read them
        small = small_files(e for _, m in written for _, e in m.all_files())
        if small:
            self.store.read_entries(small)

    def start(self) -> None:
        """Start the hub and the check of the tokens config (on the running loop)."""
        self.hub.start()
        self._tokens_task = asyncio.get_running_loop().create_task(self._watch_tokens())

    async def _watch_tokens(self) -> None:
        """Every TOKENS_CHECK seconds, look whether the tokens config changed (a stat of the
        file, re-read when it changed: `Tokens.config`); if it did, wake every Watch stream
        to check its token again. One timer for the server, however many streams are open
        (each stream woke every second before: 53-67 % of a core at 10,000 idle streams)."""
        seen = self.tokens.config
        while True:
            await asyncio.sleep(TOKENS_CHECK)
            config = self.tokens.config
            if config is not seen:
                seen = config
                self.hub.wake_all()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the executor: the event loop never blocks on the store. Served for
        a call with a deadline, it runs within what is left of it (`util.deadline.budget`):
        the store's retries give up when the client no longer waits. Its commits are
        charged to the call's token (`store.quotas.acting_as`)."""
        loop = asyncio.get_running_loop()
        work = functools.partial(_within, CALL_END.get(), current(), functools.partial(fn, *args))
        return await loop.run_in_executor(self.executor, work)

    def now(self, principal: Principal, given: float) -> float:
        """The caller's clock for global admins (tools, tests), the server's for others, so a
        writer cannot age another writer's blobs into GC or pin them forever."""
        return given if given and principal.is_global_admin else time.time()

    async def close(self) -> None:
        """End the streams (cleanly: clients resume elsewhere) and stop following."""
        self.stopping.set()
        if self._tokens_task is not None:
            self._tokens_task.cancel()
        await self.hub.close()
        await self.run(self.views.close)


def _within(end: float | None, credential: Credential | None, work: Callable[[], T]) -> T:
    with acting_as(credential):
        if end is None:
            return work()
        with budget(max(0.0, end - time.monotonic())):
            return work()
