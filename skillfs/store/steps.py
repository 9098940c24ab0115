"""What a plan of a commit is made of (docs/architecture.md, "The Committer"): the entries it
writes (`Step`, each with its next content as a function of what an attempt read), the
entries it reads besides (`Plan`), and what an attempt gives it (`Attempt`, `Prepared`). The
plans of each command are `skillfs.store.plans`; the Committer runs them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from skillfs.errors import NotFound
from skillfs.model import FileEntry, Finding, Manifest, Scope, Typed
from skillfs.model.ops import Command, Propose, Put, Stage


@dataclass(frozen=True)
class Prepared:
    """A command's files: a file table of checked, hashed entries, and what its SKILL.md
    says under the profiles of its scope."""

    files: dict[str, FileEntry]
    frontmatter: dict[str, Any] | None
    findings: tuple[Finding, ...]
    typed: Typed | None


class Attempt(Protocol):
    """What one attempt of a commit read and knows, for its plans."""

    commit_id: str
    actor: str
    now: float
    #: The admin surfaces' policy: a skill with error findings is refused.
    strict: bool

    def live(self, scope: Scope, entry: str) -> Manifest | None:
        """The entry's live manifest as this attempt read it (None: absent or deleted)."""

    def kept(self, scope: Scope, entry: str, version: int) -> Manifest | None:
        """A version of the entry kept in its history (None: never written, or pruned)."""

    def prepared(self, command: Command) -> Prepared:
        """The checked files of a command that carries some, judged under the host profiles
        its scope accepts as this attempt read them (strict: refused on errors)."""

    def missing(self, scope: Scope, entry: str, *, below: bool = False) -> NotFound:
        """The NotFound of an entry a command acts on that is not there, naming what is
        (`below`: the lower layers were looked at too)."""

    def held_below(self, scope: Scope, skill: str) -> bool:
        """Whether a lower layer of a user's scope holds `skill` live: the agent's shared
        scope, or a market."""

    def renamed(self, scope: Scope, skill: str, files: dict[str, FileEntry], old: str) -> Prepared:
        """`files` as skill `skill`'s in `scope`: SKILL.md's `name` changed from `old` where
        it said so (stored anew), what it says inspected again under the scope's profiles."""

    def refuse_errors(self, skill: str, findings: Sequence[Finding]) -> None:
        """Under the strict policy, refuse a skill with error findings."""


@dataclass(frozen=True)
class Step:
    """One entry a command writes: the caller's expected version of it (C6) and its next
    content from the attempt (`make`, which raises when the command does not apply; the
    operation to record is the result's `operation`)."""

    scope: Scope
    entry: str
    expected: int | None
    make: Callable[[Attempt], Manifest]
    #: The command whose files this entry's version holds (its commit id names them).
    payload: Put | Stage | Propose | None = None
    #: A plain removal: the version its commit id names is a tombstone.
    removes: bool = False


@dataclass(frozen=True)
class Plan:
    steps: list[Step]
    #: Entries of the commit's domain read but not written, whose versions the commit
    #: compares all the same (a draft's live skill, a copy's origin).
    reads: list[tuple[Scope, str]]
    #: The message the commit records when the caller gives none.
    message: str = ""
