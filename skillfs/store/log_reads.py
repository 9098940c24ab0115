"""The reads a follower of the change log makes, as the store answers them: one attempt each,
no retry, since the caller (a runtime follower inside a step's budget, the server's hub and
views) holds its own budget and retries at its next step. The runtime and the server read the
store's state through this surface and the store's own methods, never through its engine."""

from __future__ import annotations

from collections.abc import Sequence

from skillfs.engines.base import Engine
from skillfs.model import Change, Manifest, Revision, Scope
from skillfs.remote.hints import hints_of


class LogReads:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def revisions(self, domains: Sequence[str]) -> dict[str, Revision | None]:
        """Each domain's revision, read together (None: never written)."""
        return self._engine.revisions(domains)

    def changes(self, domain: str, since: Revision, wait: float) -> list[Change]:
        """The log after `since`, waiting up to `wait` seconds for its first change."""
        return self._engine.changes(domain, since, wait)

    def load_scope(self, scope: Scope) -> dict[str, Manifest]:
        """Every live manifest of a scope, tombstones included."""
        return self._engine.load_scope(scope)

    def load_skills(self, scope: Scope, skills: Sequence[str]) -> dict[str, Manifest]:
        """The live manifests of some skills of a scope (absent ones left out)."""
        return self._engine.load_skills(scope, skills)

    def known_manifest(self, scope: Scope, skill: str, version: int) -> Manifest | None:
        """The manifest of `skill` at `version` if the client holds it already (a grpc://
        watch's events carry them), else None."""
        return hints_of(self._engine).known_manifest(scope, skill, version)
