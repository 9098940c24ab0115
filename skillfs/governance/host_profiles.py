"""`store.host_profiles` (docs/validation.md, "Host profiles"): the host profiles a scope
accepts — what every surface judging a SKILL.md for that scope asks (`of`), as the Committer
judges its commits (`store.scope_profiles`, the one rule) — and the scope's setting naming
them, changed by `accept` and `clear` (each one commit the audit lists; over `grpc://` an
admin grant on the scope)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skillfs.governance.ports import Commits, Reads
from skillfs.model import CommitResult, Manifest, Scope
from skillfs.model.ops import DEFAULT, SetProfiles, WriteOptions
from skillfs.spec.profiles import Profiles
from skillfs.store.scope_profiles import PROFILES, accepted, named


@dataclass(frozen=True)
class ProfilesSetting:
    """What a scope accepts (`profiles`), whether its own setting says so (`own`; else the
    store's profiles apply), and the version of the setting that said so last: who changed
    it, when and why (version 0: never set)."""

    scope: Scope
    profiles: Profiles
    own: bool
    version: int = 0
    actor: str = ""
    message: str = ""
    changed_at: float = 0.0

    @classmethod
    def of(cls, scope: Scope, held: Manifest | None, store: Profiles) -> ProfilesSetting:
        """The setting its entry as read says (None: never set), over the store's own."""
        if held is None:
            return cls(scope, store, own=False)
        return cls(
            scope,
            accepted(held, store),
            own=named(held) is not None,
            version=held.version,
            actor=held.actor,
            message=held.message,
            changed_at=held.committed_at,
        )


class HostProfiles:
    """A scope's host profiles: read, named, cleared."""

    def __init__(self, reads: Reads, commits: Commits, store: Profiles) -> None:
        self._reads = reads
        self._commits = commits
        #: The store's own: what a scope without a setting accepts.
        self._store = store

    def of(self, scope: Scope) -> Profiles:
        """The profiles a SKILL.md written to `scope` is judged under now (one read)."""
        return self.setting(scope).profiles

    def setting(self, scope: Scope) -> ProfilesSetting:
        """The scope's setting as stored now (one read of one entry)."""
        reads = self._reads
        held = reads.retrying(reads.engine.load_skills, scope, [PROFILES]).get(PROFILES)
        return ProfilesSetting.of(scope, held, self._store)

    def accept(
        self, scope: Scope, names: Iterable[str], *, options: WriteOptions = DEFAULT
    ) -> CommitResult:
        """From this commit on, `scope` accepts the profiles `names` (and `spec`), whatever
        the store's own; an unknown name is an InvalidArgument listing the known ones."""
        return self._set(scope, tuple(names), options)

    def clear(self, scope: Scope, *, options: WriteOptions = DEFAULT) -> CommitResult:
        """The scope names no profiles of its own: the store's apply again."""
        return self._set(scope, None, options)

    def _set(
        self, scope: Scope, names: tuple[str, ...] | None, options: WriteOptions
    ) -> CommitResult:
        command = SetProfiles(
            scope=scope, profiles=names, expected_version=options.expected_version
        )
        return self._commits.commit([command], options=options)
