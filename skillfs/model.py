"""The things that cross the wire or the disk: scopes, files, manifests, revisions, changes."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillfs.errors import InvalidPath, PermissionDenied
from skillfs.names import check_id

log = logging.getLogger(__name__)

#: The file times a manifest may hold: years 1 to 9999, what every platform's clock and
#: `os.utime` accept (docs/validation.md).
MTIME_MIN, MTIME_MAX = -62135596800.0, 253402300799.0


class Scope(BaseModel):
    """A set of skills stored in the KV store (docs/design.md §1).

    Its ids are checked however it is built, so a scope can never name a key outside its own
    prefix."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["shared", "user", "market"]
    agent_id: str | None = None
    user_id: str | None = None
    market_id: str | None = None

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.check()

    def check(self) -> Scope:
        """Raise InvalidPath unless the ids are valid and exactly those of the kind are set."""
        wanted = {"shared": ("agent",), "user": ("agent", "user"), "market": ("market",)}
        for kind in ("agent", "user", "market"):
            value = getattr(self, f"{kind}_id")
            if kind in wanted[self.kind]:
                check_id(kind, value)
            elif value is not None:
                raise InvalidPath(f"a {self.kind} scope has no {kind} id (got {value!r})")
        return self

    @classmethod
    def shared(cls, agent: str) -> Scope:
        return cls(kind="shared", agent_id=agent)

    @classmethod
    def user(cls, agent: str, user: str) -> Scope:
        return cls(kind="user", agent_id=agent, user_id=user)

    @classmethod
    def market(cls, market: str) -> Scope:
        return cls(kind="market", market_id=market)

    @classmethod
    def parse(cls, text: str) -> Scope:
        """`shared:AGENT`, `user:AGENT/USER` or `market:NAME`, as the CLI takes them."""
        kind, _, rest = text.partition(":")
        if kind == "shared" and rest:
            return cls.shared(rest)
        if kind == "user" and rest.count("/") == 1:
            agent, user = rest.split("/")
            return cls.user(agent, user)
        if kind == "market" and rest:
            return cls.market(rest)
        raise InvalidPath(
            f"invalid scope {text!r}: use shared:AGENT, user:AGENT/USER or market:NAME"
        )

    @property
    def domain(self) -> str:
        """The revision domain: every agent, and every market, has one revision."""
        return f"markets/{self.market_id}" if self.kind == "market" else f"agents/{self.agent_id}"

    @property
    def prefix(self) -> str:
        """The logical key prefix, e.g. `agents/support-bot/users/alice/skills/`."""
        if self.kind == "market":
            return f"markets/{self.market_id}/skills/"
        if self.kind == "shared":
            return f"agents/{self.agent_id}/shared/skills/"
        return f"agents/{self.agent_id}/users/{self.user_id}/skills/"

    def __str__(self) -> str:
        if self.kind == "market":
            return f"market:{self.market_id}"
        if self.kind == "shared":
            return f"shared:{self.agent_id}"
        return f"user:{self.agent_id}/{self.user_id}"


class Access(BaseModel):
    """What the caller may do in one scope. A store opened directly has no tokens, so the
    defaults grant everything; a skillfs server answers for its token's grants."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    read: bool = True
    #: May write drafts (`_drafts/<name>`, docs/governance.md) though maybe nothing live.
    propose: bool = True
    write: bool = True
    admin: bool = True
    #: The token's name, for messages.
    token: str = ""
    #: The grant resource naming exactly this scope (`agent:A/user:U`, `agent:A/shared`,
    #: `market:M`): a token without a level asks for the grant RESOURCE:LEVEL.
    resource: str = ""

    def denied(self, level: str) -> PermissionDenied:
        """The error of a call that needs `level` ("read", "propose", "write", "admin")."""
        return PermissionDenied(
            f"token {self.token!r} may not {level} {self.scope}: ask an operator for a grant "
            f"such as '{self.resource}:{level}'"
        )

    def require(self, level: Literal["read", "propose", "write", "admin"]) -> None:
        if not getattr(self, level):
            raise self.denied(level)


class File(BaseModel):
    """File content to publish, with an optional mode (derived from the content when None)."""

    model_config = ConfigDict(frozen=True)

    data: bytes
    mode: int | None = None
    mtime: float | None = None

    def __init__(self, data: bytes, mode: int | None = None, mtime: float | None = None) -> None:
        super().__init__(data=data, mode=mode, mtime=mtime)


class FileEntry(BaseModel):
    """One row of a manifest's file table."""

    model_config = ConfigDict(frozen=True)

    sha256: str
    size: int
    mode: int
    mtime: float


class Finding(BaseModel):
    """A validation finding: an error breaks the spec, a warning is usable but off-spec."""

    model_config = ConfigDict(frozen=True)

    severity: Literal["error", "warning"]
    field: str | None = None
    rule: str
    message: str


def error_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that break the spec: what a strict surface refuses (docs/design.md §7)."""
    return [f for f in findings if f.severity == "error"]


class Rollout(BaseModel):
    """Who gets a skill's staged candidate (docs/governance.md, "Staged rollout"): a worker
    whose environment is one of `environments`, a user named in `users`, or a user whose
    stable bucket (`skillfs.rollout.bucket`) is below `fraction`. Any one of them is enough,
    so a wider rule only adds workers; the empty rule reaches nobody."""

    model_config = ConfigDict(frozen=True)

    environments: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    fraction: float = 0.0

    def __init__(
        self,
        environments: Iterable[str] = (),
        users: Iterable[str] = (),
        fraction: float = 0.0,
    ) -> None:
        if isinstance(environments, str) or isinstance(users, str):
            raise InvalidPath("a rollout takes lists: environments=[...], users=[...]")
        try:  # sorted and once each: equal rules compare equal
            envs, names = tuple(sorted(set(environments))), tuple(sorted(set(users)))
        except TypeError:
            raise InvalidPath("a rollout's environments and users are lists of names") from None
        try:
            super().__init__(environments=envs, users=names, fraction=fraction)
        except ValidationError as exc:
            problem = exc.errors()[0]
            raise InvalidPath(
                f"invalid rollout {'.'.join(map(str, problem['loc']))}: {problem['msg']}; give "
                "environments=[names], users=[user ids] and fraction= a number from 0 to 1"
            ) from None
        self.check()

    def check(self) -> Rollout:
        """Raise InvalidPath unless names are ids (docs/design.md §1) and 0 <= fraction <= 1."""
        for env in self.environments:
            check_id("environment", env)
        for user in self.users:
            check_id("user", user)
        if not (math.isfinite(self.fraction) and 0.0 <= self.fraction <= 1.0):
            raise InvalidPath(
                f"invalid rollout fraction {self.fraction!r}: give a share of users from 0 "
                "(nobody by share) to 1 (everyone), e.g. 0.1 for 10 %"
            )
        return self


class Candidate(BaseModel):
    """The version a skill stages beside its live one (docs/governance.md, "Staged rollout"):
    a whole file table with its frontmatter and findings, the rule saying who gets it, and
    who staged it when (`commit_id`: the commit that staged it)."""

    model_config = ConfigDict(frozen=True)

    files: dict[str, FileEntry]
    frontmatter: dict[str, Any] | None = None
    findings: list[Finding] = Field(default_factory=list)
    rollout: Rollout
    commit_id: str
    actor: str = ""
    staged_at: float = 0.0


class Manifest(BaseModel):
    """One skill in one scope at one version (docs/design.md §2).

    A delete writes a tombstone (`deleted`, no files) so versions keep counting up across a
    delete and a re-create, and history records who deleted what.
    """

    model_config = ConfigDict(frozen=True)

    skill: str
    version: int
    commit_id: str
    committed_at: float
    deleted: bool = False
    frontmatter: dict[str, Any] | None = None
    findings: list[Finding] = Field(default_factory=list)
    files: dict[str, FileEntry]
    #: Who made this version and why (docs/governance.md): a token's name on a server,
    #: `actor=` / `$SKILLFS_ACTOR` / `user@host` elsewhere, `agent:A/U` for an agent's own.
    actor: str = ""
    message: str = ""
    #: Switched off (docs/governance.md): a skill-shaped hole at its layer, files kept.
    disabled: bool = False
    disabled_reason: str = ""
    #: A staged version and who gets it (docs/governance.md); absent from the stored JSON
    #: when None, so manifests without one keep their bytes and size.
    candidate: Candidate | None = Field(default=None, exclude_if=lambda v: v is None)
    #: A draft's (`_drafts/<name>`, docs/governance.md): the live skill's version it was
    #: proposed against, 0 when there was none; approve refuses once the live skill moved.
    #: Absent from the stored JSON when None (a manifest without one keeps its bytes).
    base_version: int | None = Field(default=None, exclude_if=lambda v: v is None)
    #: The governed operation that wrote this version, when not a publish or a delete
    #: (approve, reject, archive, restore): what the audit reports. Absent when empty.
    operation: str = Field(default="", exclude_if=lambda v: not v)

    @property
    def usable(self) -> bool:
        """A worker shows only skills whose SKILL.md has a name and a description
        (docs/design.md §1)."""
        fm = self.frontmatter
        return (
            not self.deleted
            and fm is not None
            and isinstance(fm.get("name"), str)
            and bool(fm.get("name"))
            and isinstance(fm.get("description"), str)
            and bool(str(fm.get("description")).strip())
        )

    @property
    def errors(self) -> list[Finding]:
        return error_findings(self.findings)

    @staticmethod
    def from_json(raw: bytes | str) -> Manifest:
        """Parse a stored manifest, sharing the result for the same bytes.

        Parsing is most of what loading a scope costs (~15 µs a manifest against ~1 µs
        for the round trip's share); a stored manifest's bytes never change meaning, so
        equal bytes may share one (frozen) model. Treat the result as read-only."""
        return _parse_manifest(raw)

    @property
    def size(self) -> int:
        return sum(e.size for e in self.files.values())

    def all_files(self) -> list[tuple[str, FileEntry]]:
        """Every (path, entry) the manifest references: its files, then its staged
        candidate's (what GC keeps, and what a server's blob proofs cover)."""
        staged = self.candidate.files.items() if self.candidate is not None else ()
        return [*self.files.items(), *staged]


@functools.total_ordering
class Revision(BaseModel):
    """Opaque, monotonic within an epoch; a new epoch means: reload, do not trust your cache."""

    model_config = ConfigDict(frozen=True)

    epoch: str
    counter: int

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Revision):
            return NotImplemented
        if self.epoch != other.epoch:
            raise ValueError(
                f"revisions of different epochs ({self} vs {other}) are not ordered: reload"
            )
        return self.counter < other.counter

    def __str__(self) -> str:
        return f"{self.epoch}:{self.counter}"

    @classmethod
    def parse(cls, text: str) -> Revision:
        epoch, _, counter = text.rpartition(":")
        return cls(epoch=epoch, counter=int(counter))


class Change(BaseModel):
    """One committed change of a skill, as the watch (C8) delivers it; `reset` means reload."""

    model_config = ConfigDict(frozen=True)

    revision: Revision
    op: Literal["put", "remove", "reset"]
    scope: Scope | None = None
    skill: str | None = None
    version: int | None = None
    #: Who made the change and why (the manifest's `actor` and `message`).
    actor: str | None = None
    message: str | None = None


class AuditEntry(BaseModel):
    """One kept version of a skill as `Store.audit` lists it: what happened, by whom, why."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    skill: str
    version: int
    #: publish, delete, disable, enable, stage, widen, promote, abort (derived from the
    #: version before it).
    action: str
    actor: str
    message: str
    committed_at: float
    commit_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class UsageStat:
    """How often something was loaded and when last (seconds since the epoch; 0.0: before
    last-used times were recorded). `Store.usage_detail` gives one per (user, skill)."""

    count: int
    last_used: float


def usage_by_skill(detail: dict[tuple[str, str], UsageStat]) -> dict[str, UsageStat]:
    """Per skill, over its users: the counts summed (saturating), the latest last use."""
    out: dict[str, UsageStat] = {}
    for (_, skill), stat in detail.items():
        had = out.get(skill, UsageStat(0, 0.0))
        out[skill] = UsageStat(
            min(had.count + stat.count, 2**63 - 1), max(had.last_used, stat.last_used)
        )
    return out


class CommitResult(BaseModel):
    """What a write returns (C2): the domain's new revision and each skill's new version."""

    model_config = ConfigDict(frozen=True)

    revision: Revision
    commit_id: str
    versions: dict[str, int]

    @property
    def version(self) -> int:
        """The version of the one skill a publish wrote."""
        if len(self.versions) != 1:
            raise ValueError("this commit wrote several skills: use .versions")
        return next(iter(self.versions.values()))


class Put(BaseModel):
    """Replace a skill's whole file set; `expected_version` 0 means 'must not exist yet'.

    A file may be a `FileEntry` of a stored file, kept by reference without re-sending it."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scope: Scope
    skill: str
    files: dict[str, File | bytes | FileEntry]
    expected_version: int | None = None

    def __init__(
        self,
        scope: Scope,
        skill: str,
        files: dict[str, File | bytes | FileEntry],
        expected_version: int | None = None,
    ) -> None:
        super().__init__(scope=scope, skill=skill, files=files, expected_version=expected_version)


class Remove(BaseModel):
    """Delete a skill (its manifest moves to history)."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    skill: str
    expected_version: int | None = None

    def __init__(self, scope: Scope, skill: str, expected_version: int | None = None) -> None:
        super().__init__(scope=scope, skill=skill, expected_version=expected_version)


@functools.lru_cache(maxsize=8192)
def _parse_manifest(raw: bytes | str) -> Manifest:
    try:
        return Manifest.model_validate_json(raw)
    except ValidationError as exc:
        return _salvage(raw, exc)


_HEAD = re.compile(rb'"skill":"((?:[^"\\]|\\.)*)","version":(\d+)')


def _salvage(raw: bytes | str, exc: ValidationError) -> Manifest:
    """A stored manifest this version of skillfs cannot read (one written before its content
    was checked: frontmatter nested too deep, a file time of NaN). Only its own skill is
    affected: it loads with what can be read, no frontmatter (so no worker shows it) and an
    error finding telling operators to republish or delete it, which repairs it."""
    data = raw.encode() if isinstance(raw, str) else raw
    problem = exc.errors()[0]["msg"] if exc.errors() else str(exc)
    doc: dict[str, Any] = {}
    try:
        loaded = json.loads(data)
        doc = loaded if isinstance(loaded, dict) else {}
    except (ValueError, RecursionError):
        head = _HEAD.search(data)
        if head:
            doc = {"skill": json.loads(b'"' + head.group(1) + b'"'), "version": int(head.group(2))}
    files: dict[str, FileEntry] = {}
    raw_files = doc.get("files")
    for path, e in (raw_files if isinstance(raw_files, dict) else {}).items():
        try:
            mtime = e.get("mtime")
            if not isinstance(mtime, int | float) or not MTIME_MIN <= mtime <= MTIME_MAX:
                e = {**e, "mtime": 0.0}
            files[path] = FileEntry.model_validate(e)
        except (ValidationError, AttributeError):
            continue
    skill = doc.get("skill") if isinstance(doc.get("skill"), str) else "?"
    version = doc.get("version") if isinstance(doc.get("version"), int) else 0
    stamp = doc.get("committed_at")
    log.warning("the stored manifest of %s (version %s) is unreadable: %s", skill, version, problem)
    return Manifest(
        skill=skill,
        version=version,
        commit_id=str(doc.get("commit_id") or "unreadable"),
        committed_at=float(stamp) if isinstance(stamp, int | float) and math.isfinite(stamp) else 0,
        deleted=doc.get("deleted") is True,
        frontmatter=None,
        findings=[
            Finding(
                severity="error",
                rule="manifest-unreadable",
                message=(
                    f"the stored manifest of version {version} cannot be read ({problem}); "
                    "its files are kept where readable: publish the skill again (or delete it) "
                    "to repair it"
                ),
            )
        ],
        files=files,
    )
