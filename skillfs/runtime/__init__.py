"""The agent runtime (docs/design.md §4): layered skills, a fresh snapshot per reasoning step, the
`<available_skills>` prompt block and the skill tools."""

from __future__ import annotations

from skillfs.runtime.bound_tools import HostTool
from skillfs.runtime.fsspec_dir import FsspecDir
from skillfs.runtime.git_repo import GitRepo
from skillfs.runtime.layers import Market, Problem, SkillInfo
from skillfs.runtime.local_dir import LocalDir
from skillfs.runtime.prompt import PromptOptions
from skillfs.runtime.skills import Skills
from skillfs.runtime.snapshot import Snapshot

__all__ = [
    "FsspecDir",
    "GitRepo",
    "HostTool",
    "LocalDir",
    "Market",
    "Problem",
    "PromptOptions",
    "SkillInfo",
    "Skills",
    "Snapshot",
]
