"""The agent runtime (docs/design.md §4): layered skills, a fresh snapshot per reasoning step, the
`<available_skills>` prompt block and the skill tools."""

from __future__ import annotations

from skillfs.runtime.layers import GitRepo, LocalDir, Market, Problem, SkillInfo
from skillfs.runtime.skills import Skills
from skillfs.runtime.snapshot import Snapshot

__all__ = ["GitRepo", "LocalDir", "Market", "Problem", "SkillInfo", "Skills", "Snapshot"]
