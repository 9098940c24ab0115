"""Who may touch which blob (docs/server.md, "Blobs and hashes"): a file is read by hash only
when the caller names a manifest it may read that holds the hash; a blob is reported present
only to a caller that proves it may reference it (a receipt from its own upload or touch, or a
readable manifest holding it); a commit names only blobs proven that way. So a token learns
nothing about blobs outside its scopes, not even whether they exist. Tokens that may read
every scope ("*:read" and up) skip these proofs: there is nothing they could learn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from skillfs.api import Store
from skillfs.auth import Level, Principal, Tokens, charged_domain
from skillfs.engines.base import MiB
from skillfs.errors import InvalidArgument, NotFound, PermissionDenied, TooLarge
from skillfs.model import Manifest, Scope
from skillfs.model.names import check_domain
from skillfs.remote import wire
from skillfs.remote.proto import skillfs_pb2 as pb
from skillfs.server.rpc import allowed, check_sha
from skillfs.util.lru import Lru


class ManifestIndex:
    """The file tables (SHA-256 -> size) of manifests by (scope, skill, version): a version
    never changes once written, so a bounded LRU is always right. It is what lets a ReadFile
    that names its manifest skip the store entirely once that manifest was seen."""

    def __init__(self, store: Store, size: int = 20_000) -> None:
        self._engine = store.engine
        self._items: Lru[tuple[Scope, str, int], dict[str, int]] = Lru(size)

    def remember(self, scope: Scope, m: Manifest) -> dict[str, int]:
        """The hashes a manifest holds: its files and its staged candidate's."""
        files = {e.sha256: e.size for _, e in m.all_files()}
        self._items.put((scope, m.skill, m.version), files)
        return files

    def cached(self, scope: Scope, skill: str, version: int) -> dict[str, int] | None:
        """`files` when the manifest is indexed already, else None (never a store call)."""
        return self._items.get((scope, skill, version))

    def files(self, scope: Scope, skill: str, version: int) -> dict[str, int] | None:
        hit = self.cached(scope, skill, version)
        if hit is not None:
            return hit
        live = self._engine.load_skills(scope, [skill]).get(skill)
        found = live if live is not None and live.version == version else None
        if found is None:
            found = next(
                (m for m in self._engine.history(scope, skill) if m.version == version), None
            )
        return None if found is None else self.remember(scope, found)


class UploadBudget:
    """Bytes each token may upload per window through this server (UploadBlob and Publish
    data): a rate limit. What a token's uploads hold is bounded fleet-wide by its quota,
    charged per upload in the store (`upload_domain`; docs/security.md, "Quotas"). Global
    admin tokens are not counted (docs/server.md, "Blobs and hashes")."""

    #: Bytes a token may upload per window, and the window in seconds.
    BYTES = 4 * 1024 * MiB
    WINDOW = 3600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[str, tuple[float, int]] = {}  # token hash -> (window start, bytes)

    def spend(self, principal: Principal, size: int) -> None:
        """Count `size` bytes against the token's window, or raise TooLarge (gRPC
        RESOURCE_EXHAUSTED) before they are read when they would go over."""
        if principal.is_global_admin:
            return
        now = time.monotonic()
        with self._lock:
            start, spent = self._spent.get(principal.token_sha256, (now, 0))
            if now - start >= self.WINDOW:
                start, spent = now, 0
            if spent + size > self.BYTES:
                wait = start + self.WINDOW - now
                raise TooLarge(
                    f"token {principal.name!r} has uploaded {spent} bytes in this window of "
                    f"{self.WINDOW:.0f} s; {size} more would pass its budget of {self.BYTES} "
                    f"bytes: retry in {wait:.0f} s, or ask an operator"
                )
            self._spent[principal.token_sha256] = (start, spent + size)


def upload_domain(principal: Principal, named: str) -> str:
    """The domain an upload is charged in (docs/server.md, "Blobs and hashes"): the one the
    header names, where the token may write at least drafts; for a client that names none
    (before 0.2), the domain of the token's first grant that lets it upload and names one
    agent or market. "" for a global admin, who is charged to no token."""
    if principal.is_global_admin:
        return check_domain(named) if named else ""
    uploads = [g for g in principal.grants if g.level >= Level.propose]
    if named:
        domain = check_domain(named)
        if not any(g.touches(domain) for g in uploads):
            raise PermissionDenied(
                f"token {principal.name!r} may write nothing in {domain}, so it may not upload "
                "for it"
            )
        return domain
    for g in uploads:
        if g.kind != "all" and g.ident is not None:
            return f"{'markets' if g.kind == 'market' else 'agents'}/{g.ident}"
    raise InvalidArgument(
        f"UploadBlob: name the agent or market the blob is for (the header's domain, which "
        f"skillfs 0.2 clients send): token {principal.name!r} has no grant naming one"
    )


class BlobProofs:
    """The checks of the rules above, over the tokens' receipt key and the manifest index."""

    def __init__(self, tokens: Tokens, index: ManifestIndex) -> None:
        self.tokens = tokens
        self.index = index
        self.uploads = UploadBudget()

    def readable_size(
        self, principal: Principal, source: pb.Source, sha: str, cached_only: bool = False
    ) -> int | None:
        """The size of blob `sha` in the manifest `source` names, which the caller may read;
        with `cached_only`, None when that manifest is not indexed (no store call)."""
        scope = allowed(principal, Level.read, source.scope)
        where = f"{scope}/{source.skill} version {source.version}"
        if cached_only:
            files = self.index.cached(scope, source.skill, source.version)
            if files is None:
                return None
        else:
            files = self.index.files(scope, source.skill, source.version)
        if files is None:
            raise NotFound(f"{where} is not kept any more: take a new snapshot")
        size = files.get(sha)
        if size is None:
            raise NotFound(f"{where} has no file with SHA-256 {sha}")
        return size

    def proven(self, principal: Principal, proof: pb.BlobProof) -> pb.BlobProof | None:
        """The proof to answer a touch with when the caller proved it may reference the blob
        (its size, and a receipt), else None. Either proof will do: a receipt made under an
        older receipt key (the tokens config changed) or too long ago is no proof, but the
        source sent along with it may still be. A valid receipt is handed back as it is, so
        touching a blob never extends the life of its receipt (auth.Tokens.RECEIPT_TTL); a
        readable source earns a new one."""
        sha = check_sha(proof.sha256)
        if proof.receipt and self.tokens.check_receipt(principal, sha, proof.size, proof.receipt):
            return pb.BlobProof(sha256=sha, size=proof.size, receipt=proof.receipt)
        if proof.HasField("source") and proof.source.scope:
            scope = wire.scope_from(proof.source.scope)
            if not principal.may(Level.read, scope):
                return None
            files = self.index.files(scope, proof.source.skill, proof.source.version)
            size = None if files is None else files.get(sha)
            if size is not None:
                receipt = self.tokens.receipt(principal, sha, size)
                return pb.BlobProof(sha256=sha, size=size, receipt=receipt)
        return None

    def prepaid(
        self, principal: Principal, domain: str, proofs: Mapping[str, pb.BlobProof]
    ) -> frozenset[str]:
        """The blobs whose receipts say the token's uploads paid for them in `domain`."""
        return frozenset(
            sha
            for sha, p in proofs.items()
            if p.receipt
            and self.tokens.check_receipt(principal, sha, p.size, p.receipt)
            and charged_domain(p.receipt) == domain
        )

    def require_proven(
        self, principal: Principal, m: Manifest, proofs: Mapping[str, pb.BlobProof]
    ) -> None:
        """Refuse a commit naming a blob the caller has not proved it may reference."""
        if principal.reads_everything:
            return
        for path, e in m.all_files():
            proof = proofs.get(e.sha256)
            proven = None if proof is None else self.proven(principal, proof)
            if proven is None or proven.size != e.size:
                raise PermissionDenied(
                    f"{m.skill}/{path} names blob {e.sha256}, which this token neither "
                    "uploaded nor read from a manifest it may read: upload the file's bytes "
                    "(UploadBlob) and commit with the receipt"
                )
