"""Records only (docs/architecture.md): names and path rules, scopes, files, manifests and
their summaries, revisions, changes, what a commit returns and the writes a commit takes.
This face hands on the records every layer uses."""

from skillfs.model.file_entry import FileEntry
from skillfs.model.lean import Finding, Typed, error_findings
from skillfs.model.manifest import (
    MTIME_MAX,
    MTIME_MIN,
    Candidate,
    CandidateSummary,
    Labelled,
    LiveEdit,
    Manifest,
    Origin,
    VersionSummary,
)
from skillfs.model.ops import Put, Remove
from skillfs.model.records import (
    USAGE_MAX,
    Access,
    AuditEntry,
    Change,
    CommitResult,
    File,
    GcReport,
    Revision,
    Scope,
    UsageDrop,
    UsageStat,
    same_revision,
    saturated,
    target_domain,
    usage_by_skill,
)
from skillfs.model.rollout import Rollout

__all__ = [
    "MTIME_MAX",
    "MTIME_MIN",
    "USAGE_MAX",
    "Access",
    "AuditEntry",
    "Candidate",
    "CandidateSummary",
    "Change",
    "CommitResult",
    "File",
    "FileEntry",
    "Finding",
    "GcReport",
    "Labelled",
    "LiveEdit",
    "Manifest",
    "Origin",
    "Put",
    "Remove",
    "Revision",
    "Rollout",
    "Scope",
    "Typed",
    "UsageDrop",
    "UsageStat",
    "VersionSummary",
    "error_findings",
    "same_revision",
    "saturated",
    "target_domain",
    "usage_by_skill",
]
