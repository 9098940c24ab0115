"""The things that cross the wire or the disk: scopes, files, manifests, revisions, changes."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from skillfs.errors import InvalidPath, PermissionDenied
from skillfs.model.names import check_domain, check_id

log = logging.getLogger(__name__)


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
        """`shared:AGENT`, `user:AGENT/USER` or `market:NAME`, as the CLI takes them. The
        same text gives the same (frozen) object: a worker parses its scopes from every
        watch event, and equal scopes that are one object compare and hash at once."""
        return _parse_scope(text)

    @classmethod
    def _parse(cls, text: str) -> Scope:
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


@functools.lru_cache(maxsize=4096)
def _parse_scope(text: str) -> Scope:
    return Scope._parse(text)


def target_domain(target: str | Scope) -> str:
    """The domain a target names: a scope's, a domain (`agents/A`, `markets/M`) as given, or
    an agent's by its bare id (the targets of audit, drafts and curation)."""
    if isinstance(target, Scope):
        return target.domain
    if "/" in target:
        return check_domain(target)
    return f"agents/{check_id('agent', target)}"


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


def same_revision(a: Revision | None, b: Revision | None) -> bool:
    """Revision equality without pydantic's generic `__eq__` (on every step's hot path: the
    runtime's follower, the server's watch, the grpc:// engine's held stream); None is only
    the same as None."""
    if a is None or b is None:
        return a is b
    return a.counter == b.counter and a.epoch == b.epoch


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


#: A stored usage counter stops there (int64: SQLite's INTEGER, Redis's HINCRBY, the gRPC
#: field) instead of overflowing (docs/consistency.md, "Limits").
USAGE_MAX = 2**63 - 1


def saturated(count: int) -> int:
    """A usage counter after an addition: it stays at USAGE_MAX rather than overflow."""
    return min(count, USAGE_MAX)


@dataclasses.dataclass(frozen=True, slots=True)
class UsageStat:
    """How often something was loaded and when last (seconds since the epoch; 0.0: before
    last-used times were recorded). `Store.usage_detail` gives one per (user, skill)."""

    count: int
    last_used: float

    def plus(self, other: UsageStat) -> UsageStat:
        """Both together: the counts summed (stopping at USAGE_MAX), the later last use."""
        return UsageStat(saturated(self.count + other.count), max(self.last_used, other.last_used))


class UsageDrop(BaseModel):
    """Usage an operator dropped (docs/governance.md, "Dropping usage"): of which agent, which
    users and skills (None: every one), how many (user, skill) counters went, when, by whom
    and why. Curation reads it: a skill whose usage was dropped is not known to be idle
    before the drop."""

    model_config = ConfigDict(frozen=True)

    agent: str
    users: tuple[str, ...] | None = None
    skills: tuple[str, ...] | None = None
    dropped: int = 0
    at: float
    actor: str
    reason: str

    def covers(self, user: str | None, skill: str) -> bool:
        """Whether the drop took `skill`'s usage by `user` (None: by any user)."""
        if self.skills is not None and skill not in self.skills:
            return False
        return user is None or self.users is None or user in self.users


def usage_by_skill(detail: dict[tuple[str, str], UsageStat]) -> dict[str, UsageStat]:
    """Per skill, over its users: the counts summed (saturating), the latest last use."""
    out: dict[str, UsageStat] = {}
    for (_, skill), stat in detail.items():
        had = out.get(skill)
        out[skill] = stat if had is None else had.plus(stat)
    return out


class GcReport(BaseModel):
    """What a blob GC did (`Store.gc`): blobs seen, marked and deleted, versions dropped."""

    blobs_seen: int
    blobs_referenced: int
    blobs_deleted: int
    history_dropped: int


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
