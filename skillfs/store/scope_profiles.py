"""The host profiles a scope accepts (docs/validation.md, "Host profiles"): the one rule every
surface that judges a SKILL.md for a scope asks, the Committer first.

A scope names them in its setting `_settings/profiles`, whose live version holds the names
in its frontmatter (`{"profiles": [...]}`; a setting holds no files). While it is live it is
what the scope accepts; cleared (a tombstone) or never set, the store's own profiles apply
(`open_store(profiles=)`, else `$SKILLFS_PROFILES`, else `spec`). `spec` is always one. The
Committer reads the entry with the commit's entries and the engine compares its version with
the commit, so a setting changed meanwhile makes the commit read and judge again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from skillfs.engines.base import CommitOp
from skillfs.errors import FailedPrecondition, InvalidArgument
from skillfs.model import Manifest, Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.ops import Operation, SetProfiles
from skillfs.spec.profiles import PROFILES as KNOWN
from skillfs.spec.profiles import Profiles
from skillfs.store.steps import Attempt, Plan, Step

#: The entry of a scope's host profiles: live while the scope names its own.
PROFILES = EntryRef.setting("profiles").key
#: Where the setting's manifest holds the names.
FIELD = "profiles"


def named(held: Manifest | None) -> Profiles | None:
    """The profiles a setting's entry as read names (None: never set, or cleared). A name
    this skillfs does not know (written by a newer one) is left out, not an error: it would
    refuse every write to the scope."""
    if held is None or held.deleted or held.frontmatter is None:
        return None
    return Profiles.of([n for n in held.frontmatter.get(FIELD) or () if n in KNOWN])


def accepted(held: Manifest | None, store: Profiles) -> Profiles:
    """What a scope accepts: its setting's profiles while live, else the store's own."""
    own = named(held)
    return own if own is not None else store


def entries(scopes: Iterable[Scope]) -> list[tuple[Scope, str]]:
    """The setting's entry of each scope, read with the commit's entries (the same read)."""
    return [(scope, PROFILES) for scope in dict.fromkeys(scopes)]


def judged(ops: Sequence[CommitOp]) -> list[tuple[Scope, str]]:
    """The setting's entry of each scope where the commit writes files (a skill, a draft, a
    candidate): their findings were made under it, so the engine compares it with the commit
    (`Committer._checks`)."""
    return entries(
        op.scope
        for op in ops
        if not op.manifest.deleted
        and (op.manifest.files or op.manifest.candidate is not None)
        and EntryRef.parse(op.manifest.skill).kind is not EntryKind.SETTING
    )


def check_setting(op: CommitOp) -> None:
    """A profiles setting names known profiles and nothing else (a raw `Commit` through a
    skillfs server is held to it too); InvalidArgument lists the known ones."""
    m = op.manifest
    if m.skill != PROFILES or m.deleted:
        return
    fm = m.frontmatter or {}
    names = fm.get(FIELD)
    if set(fm) != {FIELD} or not isinstance(names, list | tuple):
        raise InvalidArgument(
            f"{op.scope}/{PROFILES} holds the host profiles the scope accepts as "
            f"{{{FIELD!r}: [names]}}; set it with `skillfs profiles` or store.host_profiles"
        )
    if not all(isinstance(n, str) for n in names):
        raise InvalidArgument(f"{op.scope}/{PROFILES}: profile names are strings")
    Profiles.of(names)


def plan(c: SetProfiles) -> Plan:
    """The scope's `_settings/profiles` entry: live, naming the profiles (`spec` first), while
    the scope names its own; a tombstone once cleared; each change a version the audit lists."""
    chosen = Profiles.of(c.profiles).names if c.profiles is not None else None

    def make(a: Attempt) -> Manifest:
        cur = a.live(c.scope, PROFILES)
        now = named(cur)
        if chosen is None:
            if cur is None:
                raise FailedPrecondition(
                    f"{c.scope} names no host profiles of its own: nothing to clear"
                )
            return cur.tombstone().did(Operation.CLEAR_PROFILES)
        if now is not None and now.names == chosen:
            raise FailedPrecondition(
                f"{c.scope} already accepts {', '.join(chosen)} (since version "
                f"{cur.version if cur else 0}): nothing to change"
            )
        held = Manifest.empty(PROFILES) if cur is None else cur
        return held.with_files({}, {FIELD: list(chosen)}, (), None).did(Operation.SET_PROFILES)

    message = (
        f"host profiles: {', '.join(chosen)}"
        if chosen is not None
        else "host profiles cleared: the store's own apply"
    )
    return Plan([Step(c.scope, PROFILES, c.expected_version, make)], [], message)
