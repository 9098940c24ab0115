"""What the governance services need of the store, as narrow protocols: each service is
built from these, not from the store class, so it can be built and tested alone and the core
knows nothing of it (docs/architecture.md, "The core and its namespaces")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ParamSpec, Protocol, TypeVar

from skillfs.engines.base import Charge, Engine
from skillfs.model import CommitResult, FileEntry, Manifest, Scope
from skillfs.model.ops import DEFAULT, Command, WriteOptions

T = TypeVar("T")
P = ParamSpec("P")


class Commits(Protocol):
    """Writes: every one ends in the store's Committer, which holds it to every rule."""

    def commit(
        self,
        changes: Sequence[Command],
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult: ...

    def rollback(
        self,
        scope: Scope,
        skill: str,
        version: int,
        *,
        options: WriteOptions = DEFAULT,
        strict: bool = False,
    ) -> CommitResult: ...


class TokenCharges(Protocol):
    """What a token writes outside a commit, charged to it (`Committer.charge_token`)."""

    def charge_token(self, domain: str, n: int, write: str) -> Charge | None: ...

    def refund(self, domain: str, charge: Charge, n: int) -> None: ...

    def settle_usage(self, domain: str, charge: Charge, used: int) -> None: ...

    def forget_usage(self, domain: str) -> None: ...


class Reads(Protocol):
    """Reads of manifests, listings and file bytes, retried through an outage."""

    @property
    def engine(self) -> Engine: ...

    @property
    def retry_for(self) -> float: ...

    @property
    def max_ops(self) -> int | None: ...

    def clock(self) -> float: ...

    def retrying(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T: ...

    def entries(self, scope: Scope) -> dict[str, Manifest]: ...

    def manifests(
        self, scope: Scope, skills: Sequence[str] | None = None, *, deleted: bool = False
    ) -> dict[str, Manifest]: ...

    def manifest(self, scope: Scope, skill: str, version: int | None = None) -> Manifest: ...

    def resolve(self, scope: Scope, skill: str) -> tuple[Scope, Manifest] | None: ...

    def agents(self) -> list[str]: ...

    def markets(self) -> list[str]: ...

    def read_entry(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes: ...

    def read_entries(self, entries: Iterable[FileEntry]) -> dict[str, bytes]: ...
