"""Every error skillfs raises is a SkillfsError; its message says what is wrong and what to do.

Each class carries the status it is answered with on each front door: the gRPC code (by name,
so this module needs no gRPC) and the HTTP status. The server and the console read these;
neither keeps a table of its own."""

from __future__ import annotations


class SkillfsError(Exception):
    """Base of all skillfs errors."""

    grpc_code = "INTERNAL"
    http_status = 500


class InvalidSkill(SkillfsError, ValueError):
    """A skill breaks the Agent Skills specification where the surface is strict."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400

    def __init__(self, message: str, findings: list[object] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


class InvalidPath(SkillfsError, ValueError):
    """An id or path breaks the naming rules of docs/design.md §1."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400


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
