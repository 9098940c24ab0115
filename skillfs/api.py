"""The store `open_store()` returns (docs/architecture.md, "The core and its namespaces"):
the core (`skillfs.store.core`: reads, commits, retention) with governed change above it as
namespaces — `store.edits` (rename, override, edit a file, import, delete, rollback),
`store.governance` (disable, enable, audit), `store.drafts`, `store.rollouts`, `store.labels`,
`store.archive`, `store.curation`, `store.usage`, `store.review` (the two-person rule),
`store.host_profiles` (the host profiles a scope accepts), and
the core's own `store.changes`. Each
service is built from the core's narrow protocols (`skillfs.governance.ports`), so the core
knows nothing of them and imports run one way."""

from __future__ import annotations

import inspect
from typing import Any

from skillfs.engines.base import Engine
from skillfs.governance.archive import Archive
from skillfs.governance.curation import Curation
from skillfs.governance.drafts import Drafts
from skillfs.governance.edits import Edits
from skillfs.governance.host_profiles import HostProfiles
from skillfs.governance.labels import Labels
from skillfs.governance.review import Review
from skillfs.governance.rollouts import Rollouts
from skillfs.governance.switch import Governance
from skillfs.governance.usage import Usage
from skillfs.store.core import StoreCore
from skillfs.store.opening import open_engine


class Store(StoreCore):
    """The core and its namespaces; options as `StoreCore` takes them."""

    def __init__(self, engine: Engine, **options: Any) -> None:
        super().__init__(engine, **options)
        self.governance = Governance(self, self)
        self.drafts = Drafts(self, self)
        self.rollouts = Rollouts(self)
        self.labels = Labels(self, self)
        self.archive = Archive(self)
        self.usage = Usage(self, self.committer.who, self)
        self.curation = Curation(self, self.archive, self.usage)
        self.edits = Edits(self, self)
        self.review = Review(self, self)
        self.host_profiles = HostProfiles(self, self, self.profiles)


#: The keyword options the store takes (the rest of open_store's options go to the engine).
_STORE_OPTIONS = frozenset(inspect.signature(StoreCore).parameters) - {"engine"}


def open_store(url: str | None = None, **options: Any) -> Store:
    """A store by URL (docs/design.md §2); `$SKILLFS_STORE` or the embedded SQLite file when
    None. Every surface opens its store here.

    Options go to the store (limits, history_policy, gc_grace, blob_cache_bytes, retry_for,
    clock, actor) or to the engine (e.g. `token` for grpc://)."""
    store_opts = {k: v for k, v in options.items() if k in _STORE_OPTIONS}
    engine_opts = {k: v for k, v in options.items() if k not in _STORE_OPTIONS}
    return Store(open_engine(url, **engine_opts), **store_opts)
