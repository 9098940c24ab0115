"""A scope's register of names (docs/validation.md, "Names that look alike"): what holds the
look-alike rule between writers that create names in one scope at the same instant.

The rule reads the scope's names before the engine's compare-and-set, which compares only the
entries a commit writes and the entries it checks: two commits creating `pdf` and `PDF` would
both land. So a commit that makes an entry live where none was also writes its scope's register,
`_settings/names`, at the version it read before the names (in the same read as its entries):
of two such commits the engine takes one, the other finds the register moved
(`VersionMismatch`), reads again and is refused by the rule, naming its twin. A commit that
creates nothing leaves the register alone: edits never conflict on it.

The register holds nothing but its version (no files, no frontmatter). Only the Committer
writes it: a commit that names it is refused (`check_not_written`). Listings leave it out
(`hidden`), the audit with them; its history is cut short (`KEPT_VERSIONS`, retention); quotas
do not count it (one small manifest per scope: the store's own bookkeeping, not a writer's);
the change log records its versions like any entry's, which a follower reads as a side
entry's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidArgument
from skillfs.model import Manifest, Scope
from skillfs.model.entry import EntryRef

#: The register's entry in each scope.
NAMES = EntryRef.setting("names").key
#: Versions of the register history keeps at most once pruned (they hold nothing; retention
#: keeps no more whatever their age).
KEPT_VERSIONS = 10

V = TypeVar("V")


def entries(scopes: Iterable[Scope]) -> list[tuple[Scope, str]]:
    """The register of each scope, read with the commit's entries (the same read of each
    scope), before the scope's names."""
    return [(scope, NAMES) for scope in dict.fromkeys(scopes)]


def is_register(entry: str) -> bool:
    return entry == NAMES


def hidden(found: Mapping[str, V]) -> dict[str, V]:
    """A scope's entries without its register: what every listing shows."""
    return {k: v for k, v in found.items() if k != NAMES}


def room(max_ops: int | None) -> int | None:
    """The entries a caller may put in one commit to one scope, on an engine that commits
    `max_ops` atomically: one is the scope's register's."""
    return None if max_ops is None else max(max_ops - 1, 1)


def claims(
    scopes: Iterable[Scope],
    current: Mapping[tuple[Scope, str], Manifest],
    *,
    stamp: Manifest,
) -> list[CommitOp]:
    """The register's next version in each of `scopes` (where the commit creates an entry),
    expecting the version `current` read, stamped as the commit's (`stamp`, one of its
    manifests: its id, time and actor)."""
    out = []
    for scope in dict.fromkeys(scopes):
        held = current.get((scope, NAMES))
        version = held.version if held is not None else 0
        m = Manifest.empty(NAMES).stamped(
            version=version + 1,
            commit_id=stamp.commit_id,
            committed_at=stamp.committed_at,
            actor=stamp.actor,
            message="",
        )
        out.append(CommitOp(scope=scope, manifest=m, expect=version))
    return out


def check_not_written(ops: Sequence[CommitOp]) -> None:
    """No command writes the register: the Committer does, after every rule (a raw `Commit`
    through a skillfs server is held to this too)."""
    for op in ops:
        if is_register(op.manifest.skill):
            raise InvalidArgument(
                f"{op.scope}/{NAMES} is the scope's register of names, written by the store "
                "itself with each commit that creates a skill; nothing was written: leave it "
                "out of the commit"
            )
