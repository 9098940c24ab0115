"""Every error skillfs raises is a SkillfsError; its message says what is wrong and what to do.

    SkillfsError                  INTERNAL             500
    ├── InvalidArgument           INVALID_ARGUMENT     400  a value no state would accept
    │   ├── InvalidPath                                     an id, name or path
    │   └── InvalidSkill                                    a skill a strict surface refuses
    ├── FailedPrecondition        FAILED_PRECONDITION  409  the right request in the wrong
    │   │                                                   state (disable what is disabled)
    │   ├── ReviewRequired                                  the two-person rule: propose it
    │   └── LiveEditAfterStage                              promote would drop a live edit
    ├── Conflict                  ABORTED              409  changed since you read it
    │   └── EditConflict                                    both changed the same lines
    ├── NotFound                  NOT_FOUND            404
    ├── TooLarge                  RESOURCE_EXHAUSTED   413
    │   └── QuotaExceeded                                   a scope's or a token's bytes
    ├── PermissionDenied          PERMISSION_DENIED    403
    ├── StoreUnavailable          UNAVAILABLE          503  the store did not answer: retry
    ├── StoreFailed               FAILED_PRECONDITION  500  it answered but cannot until
    │                                                       someone acts (a full disk)
    └── ReplicationTimeout        DEADLINE_EXCEEDED    504  Redis `?wait=N` not confirmed

Each class carries the status it is answered with on each front door: the gRPC code (by name,
so this module needs no gRPC) and the HTTP status; `code` tells a 409 of a wrong state from a
409 of a conflict in an HTTP answer. The server and the console read these; neither keeps a
table of its own. The store's own compare-and-set signal (`VersionMismatch`) never leaves it.
"""

from __future__ import annotations


class SkillfsError(Exception):
    """Base of all skillfs errors."""

    grpc_code = "INTERNAL"
    http_status = 500

    @property
    def code(self) -> str:
        """The error's name on the wire (gRPC metadata, an HTTP answer's `code` field)."""
        return type(self).__name__


class InvalidArgument(SkillfsError, ValueError):
    """A value that no state of the store would accept: fix the request, not the store."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400


class InvalidSkill(InvalidArgument):
    """A skill breaks the Agent Skills specification where the surface is strict."""

    def __init__(self, message: str, findings: list[object] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


class InvalidPath(InvalidArgument):
    """An id, name or path breaks the naming rules of docs/design.md §1."""


class FailedPrecondition(SkillfsError):
    """The request is well formed but the skill is not in a state it applies to (already
    disabled, nothing staged, still disabled, ...): the message says what to do first."""

    grpc_code = "FAILED_PRECONDITION"
    http_status = 409


class ReviewRequired(FailedPrecondition):
    """A scope's two-person rule refused a write (docs/governance.md, "The two-person rule"):
    a live change there goes through a draft another person approves. A surface that can
    propose instead (the console's New skill) catches this one."""


class LiveEditAfterStage(FailedPrecondition):
    """Promote refused: a live save landed after the candidate was staged, and promoting
    would drop it (docs/governance.md, "Promote guards a later live edit"). A surface that
    offers "promote anyway" (the console) catches this one."""


class Conflict(SkillfsError):
    """Someone else changed the skill since the version the caller edited."""

    grpc_code = "ABORTED"
    http_status = 409

    def __init__(
        self, message: str, *, skill: str = "", current_version: int | None = None
    ) -> None:
        super().__init__(message)
        self.skill = skill
        self.current_version = current_version


class EditConflict(Conflict):
    """An edit of one file met another writer's change to the same lines (the merge policy,
    `store.edits.edit_file`): `merged` holds the file with conflict markers to resolve."""

    def __init__(
        self, message: str, *, skill: str, current_version: int | None, merged: bytes
    ) -> None:
        super().__init__(message, skill=skill, current_version=current_version)
        self.merged = merged


class NotFound(SkillfsError, KeyError):
    """The skill, file, version or blob does not exist."""

    grpc_code = "NOT_FOUND"
    http_status = 404

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TooLarge(SkillfsError, ValueError):
    """A file, skill or request is over a configured limit."""

    grpc_code = "RESOURCE_EXHAUSTED"
    http_status = 413


class QuotaExceeded(TooLarge):
    """A commit would take the bytes a scope or a token holds past its quota, or a store
    past the share of its own quota skillfs may fill (docs/security.md, "Quotas"): the
    message names the quota, what it holds, its limit and how to raise it."""


class StoreUnavailable(SkillfsError, ConnectionError):
    """The store did not answer; the message names it without its password."""

    grpc_code = "UNAVAILABLE"
    http_status = 503


class StoreFailed(SkillfsError):
    """The store answered, but cannot do this until someone acts on it: its file is corrupt
    or not a database, its disk is full, it is read-only or out of this user's reach, it was
    written by a newer skillfs. Waiting would not help, so nothing retries it; the message
    says what is wrong and what to do. (`StoreUnavailable` is a store that did not answer,
    which the store retries.)"""

    grpc_code = "FAILED_PRECONDITION"
    http_status = 500


class PermissionDenied(SkillfsError, PermissionError):
    """The caller may not do this (a token's grants, or a shared-only path from a user scope)."""

    grpc_code = "PERMISSION_DENIED"
    http_status = 403


class ReplicationTimeout(SkillfsError):
    """A commit reached fewer replicas than asked (Redis `?wait=N`) in time.

    Not a StoreUnavailable: retrying would find the commit live on the primary and report
    success although no replica confirmed it. The commit is not rolled back (Redis cannot);
    it may be lost if the primary fails before a replica copies it."""

    grpc_code = "DEADLINE_EXCEEDED"
    http_status = 504
