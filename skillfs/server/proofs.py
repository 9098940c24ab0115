"""Who may touch which blob (docs/server.md, "Blobs and hashes"): a file is read by hash only
when the caller names a manifest it may read that holds the hash; a blob is reported present
only to a caller that proves it may reference it (a receipt from its own upload or touch, or a
readable manifest holding it); a commit names only blobs proven that way. So a token learns
nothing about blobs outside its scopes, not even whether they exist. Tokens that may read
every scope ("*:read" and up) skip these proofs: there is nothing they could learn.
"""

from __future__ import annotations

from collections.abc import Mapping

from skillfs.auth import Level, Principal, Tokens
from skillfs.engines import grpc_wire as wire
from skillfs.errors import NotFound, PermissionDenied
from skillfs.lru import Lru
from skillfs.model import Manifest, Scope
from skillfs.proto import skillfs_pb2 as pb
from skillfs.server.rpc import allowed, check_sha
from skillfs.store import Store


class ManifestIndex:
    """The file tables (SHA-256 -> size) of manifests by (scope, skill, version): a version
    never changes once written, so a bounded LRU is always right. It is what lets a ReadFile
    that names its manifest skip the store entirely once that manifest was seen."""

    def __init__(self, store: Store, size: int = 20_000) -> None:
        self._engine = store.engine
        self._items: Lru[tuple[Scope, str, int], dict[str, int]] = Lru(size)

    def remember(self, scope: Scope, m: Manifest) -> dict[str, int]:
        files = {e.sha256: e.size for e in m.files.values()}
        self._items.put((scope, m.skill, m.version), files)
        return files

    def files(self, scope: Scope, skill: str, version: int) -> dict[str, int] | None:
        hit = self._items.get((scope, skill, version))
        if hit is not None:
            return hit
        live = self._engine.load_skills(scope, [skill]).get(skill)
        found = live if live is not None and live.version == version else None
        if found is None:
            found = next(
                (m for m in self._engine.history(scope, skill) if m.version == version), None
            )
        return None if found is None else self.remember(scope, found)


class BlobProofs:
    """The checks of the rules above, over the tokens' receipt key and the manifest index."""

    def __init__(self, tokens: Tokens, index: ManifestIndex) -> None:
        self.tokens = tokens
        self.index = index

    def readable_size(self, principal: Principal, source: pb.Source, sha: str) -> int:
        """The size of blob `sha` in the manifest `source` names, which the caller may read."""
        scope = allowed(principal, Level.read, source.scope)
        where = f"{scope}/{source.skill} version {source.version}"
        files = self.index.files(scope, source.skill, source.version)
        if files is None:
            raise NotFound(f"{where} is not kept any more: take a new snapshot")
        size = files.get(sha)
        if size is None:
            raise NotFound(f"{where} has no file with SHA-256 {sha}")
        return size

    def proven_size(self, principal: Principal, proof: pb.BlobProof) -> int | None:
        """The blob's size when the caller proved it may reference the blob, else None.
        Either proof will do: a receipt made under an older receipt key (the tokens config
        changed) is no proof, but the source sent along with it may still be."""
        sha = check_sha(proof.sha256)
        if proof.receipt and self.tokens.check_receipt(principal, sha, proof.size, proof.receipt):
            return int(proof.size)
        if proof.HasField("source") and proof.source.scope:
            scope = wire.scope_from(proof.source.scope)
            if not principal.may(Level.read, scope):
                return None
            files = self.index.files(scope, proof.source.skill, proof.source.version)
            return None if files is None else files.get(sha)
        return None

    def receipts(self, principal: Principal, proven: Mapping[str, int]) -> list[pb.BlobProof]:
        """Proofs of the blobs `proven` (SHA-256 -> size) the caller may send with a commit."""
        return [
            pb.BlobProof(sha256=s, size=n, receipt=self.tokens.receipt(principal, s, n))
            for s, n in sorted(proven.items())
        ]

    def require_proven(
        self, principal: Principal, m: Manifest, proofs: Mapping[str, pb.BlobProof]
    ) -> None:
        """Refuse a commit naming a blob the caller has not proved it may reference."""
        if principal.reads_everything:
            return
        for path, e in m.files.items():
            proof = proofs.get(e.sha256)
            size = None if proof is None else self.proven_size(principal, proof)
            if size != e.size:
                raise PermissionDenied(
                    f"{m.skill}/{path} names blob {e.sha256}, which this token neither "
                    "uploaded nor read from a manifest it may read: upload the file's bytes "
                    "(UploadBlob) and commit with the receipt"
                )
