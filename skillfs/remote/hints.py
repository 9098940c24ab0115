"""What a client of a skillfs server knows, or can do, that an engine over a store itself has
no use for: the manifests and small files the server's watch events carried, a wait it can
cut short, the grants of its token. The store's parts ask for them where they help
(`hints_of`); an engine over a store is not made to answer them."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from skillfs.model import Access, Manifest, Scope


@runtime_checkable
class Hints(Protocol):
    def known_manifest(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        """The manifest of `skill` at exactly `version` if a watch event carried it: a
        follower takes it instead of loading the skill (a version's manifest never changes)."""

    def known_blob(self, sha: str) -> bytes | None:
        """A small file's bytes if a watch event carried them (checked against their
        SHA-256): the store's blob reads take them instead of reading the server."""

    def interrupt_wait(self, thread: int) -> None:
        """End the `changes_many` wait of thread `thread` early, answering `{}`."""

    def access(self, scope: Scope) -> Access:
        """What the token may do in `scope`, asked before work a refusal would waste."""


class _NoHints:
    """An engine over a store itself: nothing carried, waits end on their own, no grants."""

    def known_manifest(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        return None

    def known_blob(self, sha: str) -> bytes | None:
        return None

    def interrupt_wait(self, thread: int) -> None:
        return None

    def access(self, scope: Scope) -> Access:
        return Access(scope=scope)  # no tokens: everything


NO_HINTS: Hints = _NoHints()


def hints_of(engine: object) -> Hints:
    """The engine's hints if it is a client of a skillfs server, else none."""
    return engine if isinstance(engine, Hints) else NO_HINTS
