"""skillfs: Agent Skills in a key-value store, served fresh to every agent worker."""

from __future__ import annotations

from skillfs import errors
from skillfs.api import Store, open_store
from skillfs.governance.curation_report import CuratedSkill, CurationReport, DuplicatePair, SkillRef
from skillfs.model import (
    Change,
    CommitResult,
    File,
    FileEntry,
    Finding,
    GcReport,
    Manifest,
    Origin,
    Put,
    Remove,
    Revision,
    Rollout,
    Scope,
    UsageStat,
)
from skillfs.model.ops import WriteOptions
from skillfs.model.pins import Pins
from skillfs.runtime import (
    FsspecDir,
    GitRepo,
    HostTool,
    LocalDir,
    Market,
    PromptOptions,
    Skills,
    Snapshot,
)
from skillfs.store.limits import Limits
from skillfs.store.opening import default_url
from skillfs.store.retention import HistoryPolicy

__all__ = [
    "Change",
    "CommitResult",
    "CuratedSkill",
    "CurationReport",
    "DuplicatePair",
    "File",
    "FileEntry",
    "Finding",
    "FsspecDir",
    "GcReport",
    "GitRepo",
    "HistoryPolicy",
    "HostTool",
    "Limits",
    "LocalDir",
    "Manifest",
    "Market",
    "Origin",
    "Pins",
    "PromptOptions",
    "Put",
    "Remove",
    "Revision",
    "Rollout",
    "Scope",
    "SkillRef",
    "Skills",
    "Snapshot",
    "Store",
    "UsageStat",
    "WriteOptions",
    "default_url",
    "errors",
    "open_store",
]
