"""What a scope keeps one manifest for (docs/governance.md): a skill, a draft of one
(`_drafts/<name>`), an archived one (`.archive/<name>`) or one of the scope's settings
(`_settings/review`), parsed once into an `EntryRef` instead of from its key wherever it is
met."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum

from skillfs.errors import InvalidPath
from skillfs.model.names import ARCHIVE, DRAFTS, SETTINGS, check_live_name, check_skill_name

#: The settings a scope may hold: `review`, the two-person rule (docs/governance.md, "The
#: two-person rule"), on while its entry is live; `profiles`, the host profiles the scope
#: accepts (docs/validation.md, "Host profiles"), named by its live entry; `names`, the
#: register the store moves with each commit that creates a name (`store.name_register`).
KNOWN_SETTINGS = ("review", "profiles", "names")


class EntryKind(StrEnum):
    SKILL = "skill"
    DRAFT = "draft"
    ARCHIVED = "archived"
    SETTING = "setting"
    #: The single `_drafts` or `.archive` manifest an older skillfs wrote (`split_legacy`).
    LEGACY = "legacy"


_DIRS = {EntryKind.DRAFT: DRAFTS, EntryKind.ARCHIVED: ARCHIVE, EntryKind.SETTING: SETTINGS}


@dataclass(frozen=True, slots=True)
class EntryRef:
    """One entry of a scope: its kind and the skill name it holds (a legacy side manifest's
    name is its directory)."""

    kind: EntryKind
    name: str

    @classmethod
    def skill(cls, name: str) -> EntryRef:
        return cls(EntryKind.SKILL, name)

    @classmethod
    def draft(cls, name: str) -> EntryRef:
        return cls(EntryKind.DRAFT, check_live_name(name))

    @classmethod
    def archived(cls, name: str) -> EntryRef:
        return cls(EntryKind.ARCHIVED, check_live_name(name))

    @classmethod
    def setting(cls, name: str) -> EntryRef:
        return cls(EntryKind.SETTING, name)

    @staticmethod
    def parse(key: str) -> EntryRef:
        """The entry a stored key names (`x`, `_drafts/x`, `.archive/x`, `_drafts`), checked
        as every key a store keeps is: InvalidPath otherwise."""
        return _parse(key)

    @property
    def key(self) -> str:
        """The entry's key in its scope (what engines store the manifest under)."""
        where = _DIRS.get(self.kind)
        return self.name if where is None else f"{where}/{self.name}"

    @property
    def is_skill(self) -> bool:
        return self.kind is EntryKind.SKILL

    def __str__(self) -> str:
        return self.key


@functools.lru_cache(maxsize=8192)
def _parse(key: str) -> EntryRef:
    if isinstance(key, str) and "/" in key:
        where, _, name = key.partition("/")
        if where == SETTINGS:
            if name not in KNOWN_SETTINGS:
                raise InvalidPath(
                    f"unknown setting {key!r}: a scope's settings are "
                    + ", ".join(f"{SETTINGS}/{n}" for n in KNOWN_SETTINGS)
                )
            return EntryRef(EntryKind.SETTING, name)
        for kind, folder in _DIRS.items():
            if where == folder:
                return EntryRef(kind, check_live_name(name))
        raise InvalidPath(
            f"invalid skill directory {key!r}: a skill is one directory name; only drafts and "
            f"archived skills have two ({DRAFTS}/<name>, {ARCHIVE}/<name>)"
        )
    check_skill_name(key)
    if key in (DRAFTS, ARCHIVE):
        return EntryRef(EntryKind.LEGACY, key)
    return EntryRef(EntryKind.SKILL, key)
