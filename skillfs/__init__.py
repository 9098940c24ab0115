"""skillfs: Agent Skills in a key-value store, served fresh to every agent worker."""

from __future__ import annotations

import inspect
from typing import Any

from skillfs import errors
from skillfs.engines import default_url, open_engine
from skillfs.model import (
    Change,
    CommitResult,
    File,
    FileEntry,
    Finding,
    Manifest,
    Put,
    Remove,
    Revision,
    Scope,
)
from skillfs.runtime import GitRepo, LocalDir, Market, Skills, Snapshot
from skillfs.store import GcReport, HistoryPolicy, Limits, Store

__all__ = [
    "Change",
    "CommitResult",
    "File",
    "FileEntry",
    "Finding",
    "GcReport",
    "GitRepo",
    "HistoryPolicy",
    "Limits",
    "LocalDir",
    "Manifest",
    "Market",
    "Put",
    "Remove",
    "Revision",
    "Scope",
    "Skills",
    "Snapshot",
    "Store",
    "default_url",
    "errors",
    "open_store",
]


#: The keyword options `Store` takes (the rest of open_store's options go to the engine).
_STORE_OPTIONS = frozenset(inspect.signature(Store).parameters) - {"engine"}


def open_store(url: str | None = None, **options: Any) -> Store:
    """A store by URL (DESIGN §2); `$SKILLFS_STORE` or the embedded SQLite file when None.

    Options go to `Store` (limits, history_policy, gc_grace, blob_cache_bytes, retry_for)
    or to the engine (e.g. `token` for grpc://)."""
    store_opts = {k: v for k, v in options.items() if k in _STORE_OPTIONS}
    engine_opts = {k: v for k, v in options.items() if k not in _STORE_OPTIONS}
    return Store(open_engine(url, **engine_opts), **store_opts)
