"""Bearer tokens, their grants, and blob receipts (docs/server.md, "Tokens and grants").

A token is looked up by its SHA-256, so the config may hold hashes instead of secrets and a
lookup never compares secrets byte by byte. A grant is `RESOURCE:LEVEL`:

    RESOURCE := "*" | "agent:" ID ["/shared" | "/user:" ID] | "market:" ID      ID := id | "*"
    LEVEL    := "read" | "propose" | "write" | "admin"   (each includes the ones before it)

`propose` may write drafts (the entries `_drafts/<name>`, docs/governance.md) and nothing
live: the server asks the level `write_level` names for each entry a write touches.

Receipts are HMACs over (token, blob, size, time issued) under a key every server of one
deployment shares (from the tokens config): a server that sees one knows that this token
uploaded those bytes or was shown the blob in a manifest it may read, whichever server it
talked to then. A receipt proves that for RECEIPT_TTL after it was issued, no longer, so an
upload never committed cannot be kept from GC by touching it with its receipt forever.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from enum import IntEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from skillfs.errors import InvalidPath, PermissionDenied
from skillfs.model import Access, Scope
from skillfs.model.names import DRAFTS, SETTINGS, check_id, in_side
from skillfs.store.quotas import Credential

ENV_TOKENS = "SKILLFS_TOKENS"
#: Authorization values whose principal is kept at most (unknown ones never are).
KNOWN_MAX = 10_000
log = logging.getLogger("skillfs.server")


class Level(IntEnum):
    read = 1
    propose = 2
    write = 3
    admin = 4


def write_level(entry: str) -> Level:
    """The level a write of `entry` needs: `propose` for a draft, `admin` for a setting of the
    scope (the two-person rule, docs/security.md), `write` for the rest."""
    if in_side(entry, SETTINGS):
        return Level.admin
    return Level.propose if in_side(entry, DRAFTS) else Level.write


class Grant(BaseModel):
    """One parsed grant; `None` ids and `user` mean "any"."""

    model_config = ConfigDict(frozen=True)

    text: str
    kind: str  # "all", "agent", "market"
    ident: str | None = None  # agent or market id; None: any
    part: str | None = None  # for agents: None (every scope), "shared" or "user"
    user: str | None = None  # for part "user": the user id; None: any
    level: Level

    @classmethod
    def parse(cls, text: str) -> Grant:
        resource, sep, level_name = text.strip().rpartition(":")
        if not sep or level_name not in Level.__members__:
            raise InvalidPath(
                f"grant {text!r} has no level: end it with ':read', ':propose', ':write' or "
                "':admin'"
            )
        level = Level[level_name]
        if resource == "*":
            return cls(text=text, kind="all", level=level)
        kind, sep, rest = resource.partition(":")
        if kind == "market" and sep and "/" not in rest:
            return cls(text=text, kind="market", ident=_id_or_any("market", rest), level=level)
        if kind == "agent" and sep:
            agent, slash, sub = rest.partition("/")
            ident = _id_or_any("agent", agent)
            if not slash:
                return cls(text=text, kind="agent", ident=ident, level=level)
            if sub == "shared":
                return cls(text=text, kind="agent", ident=ident, part="shared", level=level)
            if sub.startswith("user:"):
                user = _id_or_any("user", sub[len("user:") :])
                return cls(
                    text=text, kind="agent", ident=ident, part="user", user=user, level=level
                )
        raise InvalidPath(
            f"invalid grant {text!r}: use '*', 'agent:A', 'agent:A/shared', 'agent:A/user:U' or "
            "'market:M' (any id may be '*'), then ':read', ':propose', ':write' or ':admin'"
        )

    def covers(self, scope: Scope) -> bool:
        """Whether this grant's resource includes the scope."""
        if self.kind == "all":
            return True
        if self.kind == "market":
            return scope.kind == "market" and self.ident in (None, scope.market_id)
        if scope.kind == "market" or self.ident not in (None, scope.agent_id):
            return False
        if self.part is None:
            return True
        if self.part == "shared":
            return scope.kind == "shared"
        return scope.kind == "user" and self.user in (None, scope.user_id)

    def touches(self, domain: str) -> bool:
        """Whether this grant covers some scope of the domain (`agents/A`, `markets/M`)."""
        kind, _, ident = domain.partition("/")
        if self.kind == "all":
            return True
        want = "agent" if kind == "agents" else "market"
        return self.kind == want and self.ident in (None, ident)

    def covers_agent(self, agent: str) -> bool:
        """Whether this grant covers every scope of the agent."""
        return self.kind == "all" or (
            self.kind == "agent" and self.ident in (None, agent) and self.part is None
        )


class Unauthenticated(PermissionDenied):
    """No token, a malformed one, or one the config does not hold."""

    grpc_code = "UNAUTHENTICATED"
    http_status = 401


def _id_or_any(kind: str, value: str) -> str | None:
    return None if value == "*" else check_id(kind, value)


class Principal(BaseModel):
    """Who is calling: the token's name, its grants, and the token's hash (for receipts)."""

    model_config = ConfigDict(frozen=True)

    name: str
    token_sha256: str
    grants: tuple[Grant, ...]
    #: The token's own quota in bytes per agent or market (None: the store's
    #: `Limits.token_quota`; docs/security.md, "Quotas").
    quota_bytes: int | None = None

    def credential(self) -> Credential | None:
        """What the store charges this token's writes to: none for a global admin (an
        operator's imports and tools; only the scopes' quotas hold them)."""
        if self.is_global_admin:
            return None
        return Credential(name=self.name, quota_bytes=self.quota_bytes)

    def level_for(self, scope: Scope) -> Level | None:
        levels = [g.level for g in self.grants if g.covers(scope)]
        return max(levels) if levels else None

    def may(self, level: Level, scope: Scope) -> bool:
        have = self.level_for(scope)
        return have is not None and have >= level

    def access(self, scope: Scope) -> Access:
        """What this token may do in the scope, and the grant to ask for what it may not."""
        have = self.level_for(scope) or 0
        return Access(
            scope=scope,
            read=have >= Level.read,
            propose=have >= Level.propose,
            write=have >= Level.write,
            admin=have >= Level.admin,
            token=self.name,
            resource=_example_resource(scope),
        )

    def require(self, level: Level, scope: Scope) -> None:
        if not self.may(level, scope):
            raise self.access(scope).denied(level.name)

    def may_see_domain(self, domain: str) -> bool:
        return any(g.touches(domain) for g in self.grants)

    def require_domain(self, domain: str) -> None:
        if not self.may_see_domain(domain):
            kind, _, name = domain.partition("/")
            grant = f"market:{name}:read" if kind == "markets" else f"agent:{name}:read"
            raise PermissionDenied(
                f"token {self.name!r} may read nothing in {domain}: ask an operator for a grant "
                f"such as '{grant}'"
            )

    def administers_agent(self, agent: str) -> bool:
        """An admin grant covering the whole agent (`agent:A:admin` or `*:admin`)."""
        return any(g.level >= Level.admin and g.covers_agent(agent) for g in self.grants)

    def require_agent_admin(self, agent: str) -> None:
        if not self.administers_agent(agent):
            raise PermissionDenied(
                f"token {self.name!r} is not an admin of agent {agent!r}: this needs a grant "
                f"'agent:{agent}:admin' or '*:admin'"
            )

    @property
    def global_level(self) -> Level | None:
        levels = [g.level for g in self.grants if g.kind == "all"]
        return max(levels) if levels else None

    @property
    def reads_everything(self) -> bool:
        """A '*:read' (or stronger) token: it may read every scope, so it needs no proofs."""
        return (self.global_level or 0) >= Level.read

    @property
    def is_global_admin(self) -> bool:
        return self.global_level == Level.admin

    def require_global_admin(self, what: str) -> None:
        if not self.is_global_admin:
            raise PermissionDenied(
                f"{what} needs a '*:admin' grant; token {self.name!r} does not have one"
            )


def _example_resource(scope: Scope) -> str:
    if scope.kind == "market":
        return f"market:{scope.market_id}"
    if scope.kind == "shared":
        return f"agent:{scope.agent_id}/shared"
    return f"agent:{scope.agent_id}/user:{scope.user_id}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenConfig(BaseModel):
    """A parsed tokens document (YAML or JSON; docs/server.md)."""

    model_config = ConfigDict(frozen=True)

    receipt_key: bytes
    principals: dict[str, Principal]  # by token hash

    @classmethod
    def parse(cls, text: str) -> TokenConfig:
        try:
            doc: Any = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidPath(f"the tokens config is not YAML or JSON: {exc}") from exc
        if not isinstance(doc, Mapping) or not isinstance(doc.get("tokens"), list):
            raise InvalidPath("the tokens config must be a mapping with a 'tokens' list")
        principals: dict[str, Principal] = {}
        for i, entry in enumerate(doc["tokens"]):
            principal = _principal(i, entry)
            if principal.token_sha256 in principals:
                raise InvalidPath(f"tokens config: token {principal.name!r} is listed twice")
            principals[principal.token_sha256] = principal
        key = doc.get("receipt_key")
        # Without an explicit key, the whole document is the secret: every server reading the
        # same config derives the same key, and one token's holder cannot. So any edit (a
        # revoked token) changes it: clients then fall back to Source proofs and uploads
        # (docs/server.md, "When the receipt key changes"); an explicit key avoids that.
        material = str(key).encode() if key else text.encode()
        return cls(
            receipt_key=hmac.new(b"skillfs receipts v1", material, hashlib.sha256).digest(),
            principals=principals,
        )


def _principal(i: int, entry: object) -> Principal:
    if not isinstance(entry, Mapping):
        raise InvalidPath(f"tokens config: entry {i} must be a mapping with name, token, grants")
    name = str(entry.get("name") or f"token-{i}")
    secret, digest = entry.get("token"), entry.get("sha256")
    if bool(secret) == bool(digest):
        raise InvalidPath(f"tokens config: {name!r} needs exactly one of 'token' or 'sha256'")
    if secret and len(str(secret)) < 16:
        raise InvalidPath(f"tokens config: the token of {name!r} is shorter than 16 characters")
    grants = entry.get("grants")
    if not isinstance(grants, list) or not grants:
        raise InvalidPath(f"tokens config: {name!r} needs a non-empty 'grants' list")
    token_sha = hash_token(str(secret)) if secret else str(digest).lower()
    if len(token_sha) != 64 or any(c not in "0123456789abcdef" for c in token_sha):
        raise InvalidPath(f"tokens config: the sha256 of {name!r} is not 64 hex digits")
    quota = entry.get("quota_bytes")
    if quota is not None and (not isinstance(quota, int) or isinstance(quota, bool) or quota < 1):
        raise InvalidPath(
            f"tokens config: quota_bytes of {name!r} must be a whole number of bytes, 1 or more"
        )
    return Principal(
        name=name,
        token_sha256=token_sha,
        grants=tuple(Grant.parse(str(g)) for g in grants),
        quota_bytes=quota,
    )


def _from_env(text: str) -> TokenConfig:
    """The tokens document `$SKILLFS_TOKENS` holds; a path there (where `--tokens` takes one)
    is refused saying so, not as a document that is not YAML."""
    try:
        return TokenConfig.parse(text)
    except InvalidPath:
        named = text.strip()
        if "\n" not in named and Path(named).is_file():
            raise InvalidPath(
                f"${ENV_TOKENS} holds the tokens document itself, not a path, and {named!r} is "
                f"a file: pass it as --tokens {named} instead"
            ) from None
        raise


class Tokens:
    """The current tokens config, from a file (re-read when it changes, so a revoked token
    stops working without a restart) or from `$SKILLFS_TOKENS`.

    A lookup is one SHA-256 of the token in the config current at that moment; the answer is
    kept per authorization value beside the config object it came from (`_known`), and used
    only while that object is in force, so no answer can outlive the config it came from,
    and a fleet's per-step calls skip the hash. A file that is deleted or no longer parses
    fails closed: every token is refused (and the failure logged) until the file is fixed,
    since keeping the last good config would keep a token the operator meant to revoke."""

    RECHECK_SECONDS = 2.0
    #: Seconds a receipt proves its upload (docs/server.md, "Blobs and hashes").
    RECEIPT_TTL = 24 * 3600.0

    def __init__(self, path: str | os.PathLike[str] | None = None, text: str | None = None) -> None:
        path = None if path is None else Path(path)  # a str as docs/integrations.md shows it
        from_env = path is None and text is None
        if from_env:
            text = os.environ.get(ENV_TOKENS)
        if path is None and not text:
            raise InvalidPath(
                f"no tokens: pass --tokens FILE, or set ${ENV_TOKENS} to the tokens document "
                "itself (see docs/server.md)"
            )
        self.path = path
        self._lock = threading.Lock()
        #: What identifies the file's content without reading it (see `_file_stamp`).
        self._stamp: tuple[int, ...] | None = None
        self._checked = 0.0
        #: Why the file is not in force (deleted, unparsable), while every token is refused.
        self.failure: str | None = None
        if text:
            self._config = _from_env(text) if from_env else TokenConfig.parse(text)
        else:
            self._config = self._load()
        #: A config and, under it, authorization value -> principal (replaced as one tuple,
        #: so a thread holding an older config never fills the newer one's map).
        self._known: tuple[TokenConfig | None, dict[str, Principal]] = (None, {})
        #: The clock receipts are issued and checked by.
        self.clock = time.time

    @staticmethod
    def _file_stamp(path: Path) -> tuple[int, ...]:
        """Changes whenever the file does: an edit in place (mtime, ctime in nanoseconds,
        size) or a new file renamed over it (inode, device), as editors and Kubernetes'
        Secret volumes do."""
        st = path.stat()
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)

    def _load(self) -> TokenConfig:
        assert self.path is not None
        stamp = self._file_stamp(self.path)
        config = TokenConfig.parse(self.path.read_text())
        self._stamp = stamp
        return config

    @property
    def config(self) -> TokenConfig:
        if self.path is None:
            return self._config
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.RECHECK_SECONDS:
                self._checked = now
                try:
                    if self.failure is not None or self._file_stamp(self.path) != self._stamp:
                        self._config = self._load()
                        if self.failure is not None:
                            log.warning("tokens config %s is in force again", self.path)
                        self.failure = None
                except (OSError, InvalidPath) as exc:  # fail closed: refuse every token
                    self._stamp = None  # read it again at the next check, changed or not
                    self._config = TokenConfig(receipt_key=os.urandom(32), principals={})
                    self.failure = f"{type(exc).__name__}: {exc}"
                    log.error(
                        "tokens config %s cannot be read (%s): refusing every token until it "
                        "is fixed",
                        self.path,
                        self.failure,
                    )
            return self._config

    def authenticate(self, header: str | None) -> Principal:
        """The principal of an `authorization: Bearer TOKEN` value, else Unauthenticated."""
        if not header:
            raise Unauthenticated(  # gRPC's metadata and HTTP's header (MCP) alike
                "no token: send 'authorization: Bearer TOKEN' (an HTTP header, or gRPC "
                "metadata): the CLI's --token TOKEN or $SKILLFS_TOKEN, "
                "skillfs.open_store(..., token=...) in Python"
            )
        config = self.config
        known = self._known
        if known[0] is not config:
            known = self._known = (config, {})
        hit = known[1].get(header)
        if hit is not None:
            return hit
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("the authorization metadata must be 'Bearer TOKEN'")
        principal = config.principals.get(hash_token(token.strip()))
        if principal is None:
            if self.failure is not None:
                raise Unauthenticated(
                    "the server cannot read its tokens config, so it accepts no token: "
                    "ask an operator to fix it"
                )
            raise Unauthenticated("unknown or revoked token: ask an operator for a valid one")
        if len(known[1]) < KNOWN_MAX:
            known[1][header] = principal
        return principal

    def receipt(
        self,
        principal: Principal,
        sha: str,
        size: int,
        issued: int | None = None,
        charged_in: str = "",
    ) -> bytes:
        """A receipt issued now (or at `issued`): the time in 8 bytes, the HMAC, then the
        domain whose quota the upload was charged to, if it was (docs/security.md, "Quotas";
        a receipt without one is what servers before 0.2 issued)."""
        when = int(self.clock()) if issued is None else issued
        msg = f"{principal.token_sha256}\0{sha}\0{size}\0{when}"
        if charged_in:
            msg += f"\0{charged_in}"
        mac = hmac.new(self.config.receipt_key, msg.encode(), hashlib.sha256).digest()
        return when.to_bytes(8, "big") + mac + charged_in.encode()

    def check_receipt(self, principal: Principal, sha: str, size: int, receipt: bytes) -> bool:
        """Whether the receipt is this token's for the blob, issued within RECEIPT_TTL."""
        if len(receipt) < RECEIPT_BYTES:
            return False
        issued = int.from_bytes(receipt[:8], "big")
        try:
            charged_in = charged_domain(receipt)
        except UnicodeDecodeError:
            return False
        return self.clock() - issued <= self.RECEIPT_TTL and hmac.compare_digest(
            self.receipt(principal, sha, size, issued, charged_in), receipt
        )


#: A receipt's time and HMAC; the domain its upload was charged in follows, if any.
RECEIPT_BYTES = 40


def charged_domain(receipt: bytes) -> str:
    """The domain a receipt says its upload was charged to the token's quota in ("": none);
    to be trusted only once `Tokens.check_receipt` passed."""
    return receipt[RECEIPT_BYTES:].decode()


def tokens_document(entries: Iterable[tuple[str, str, list[str]]], receipt_key: str) -> str:
    """A tokens config (JSON, which is YAML too) holding hashes only, for `make run` and tests."""
    return json.dumps(
        {
            "receipt_key": receipt_key,
            "tokens": [{"name": n, "sha256": hash_token(t), "grants": g} for n, t, g in entries],
        },
        indent=2,
    )
