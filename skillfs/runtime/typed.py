"""The typed readings of a view's skills (docs/validation.md, "Two readings").

A manifest written since the typed reading existed carries it; one stored before gets it
here on first serve, from its SKILL.md, read in one batch per layer and kept by the file's
digest (a file's bytes never change, so neither does its reading).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from skillfs.model import Typed
from skillfs.runtime.layers import Reader, SkillInfo
from skillfs.spec.skill_md import SKILL_MD, parse_skill_md
from skillfs.util.lru import Lru

#: Readings kept per store object: a SKILL.md's digest and its reading, a few hundred bytes.
CAPACITY = 8192


class TypedReadings:
    """Readings of stored SKILL.md files by digest; one per store object (`store.local`)."""

    def __init__(self, _store: object, _name: str) -> None:
        self._kept: Lru[str, Typed] = Lru(CAPACITY)

    def of(self, skills: Sequence[SkillInfo]) -> dict[str, Typed]:
        """Each skill's typed reading by skill id."""
        out: dict[str, Typed] = {}
        missing: dict[int, tuple[Reader, list[SkillInfo]]] = {}
        for s in skills:
            typed = s.typed or self._kept.get(s.files[SKILL_MD].sha256)
            if typed is not None:
                out[s.id] = typed
            else:
                missing.setdefault(id(s.reader), (s.reader, []))[1].append(s)
        for reader, group in missing.values():
            data = reader.read_entries([s.files[SKILL_MD] for s in group])
            for s in group:
                digest = s.files[SKILL_MD].sha256
                out[s.id] = self._kept.get(digest) or self._read(digest, data)
        return out

    def _read(self, digest: str, data: Mapping[str, bytes]) -> Typed:
        typed = parse_skill_md(data[digest]).typed or Typed(refused="its SKILL.md is unreadable")
        self._kept.put(digest, typed)
        return typed
