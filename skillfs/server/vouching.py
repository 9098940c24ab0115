"""What a skillfs server vouches for in a manifest a `grpc://` client built (docs/server.md,
"The code"): its shape held to the rules `Store` applies before a
commit, and what only the server may say — the frontmatter and findings read from SKILL.md
under the scope's host profiles, the actor, the time, a staged candidate's and a label's
provenance, an import's digest. A client cannot make a skill look valid or claim another's
work."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from skillfs.api import Store
from skillfs.auth import Principal
from skillfs.engines.base import VersionMismatch
from skillfs.errors import InvalidArgument, InvalidPath, NotFound
from skillfs.model import Candidate, Labelled, Manifest, Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.import_mark import ImportMark, check_source, files_digest
from skillfs.model.names import check_entry, normalize_path
from skillfs.server.rpc import check_sha
from skillfs.spec.profiles import Profiles
from skillfs.store.limits import check_file_table
from skillfs.store.rules import Current
from skillfs.store.who import check_commit_id


class Vouching:
    """The server's side of a client-built manifest, over its store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.engine = store.engine

    def checked(self, scope: Scope, m: Manifest, expect: int) -> Manifest:
        """A manifest a client built, held to the rules `Store` applies before a commit."""
        check_entry(m.skill)
        where = f"{scope}/{m.skill}"
        if expect < 0 or m.version != expect + 1:
            raise InvalidArgument(f"{where}: version {m.version} must be the expected {expect} + 1")
        check_commit_id(m.commit_id)
        if m.deleted and (m.files or m.candidate):
            raise InvalidArgument(f"{where}: a deletion has no files (nor a staged candidate)")
        for path, e in m.all_files():
            if normalize_path(path) != path:
                raise InvalidPath(f"{where}: file path {path!r} is not normalized")
            check_sha(e.sha256)
        check_file_table(self.store.limits, m.skill, m.files)
        if m.candidate is not None:
            check_file_table(self.store.limits, m.skill, m.candidate.files)
        return m

    def derived(
        self,
        m: Manifest,
        principal: Principal,
        scope: Scope,
        expect: int,
        moved: Sequence[tuple[Scope, str, int]],
        current: Current,
    ) -> Manifest:
        """Frontmatter and findings as the server reads them from SKILL.md under the host
        profiles the scope accepts (a client cannot make a skill look valid; an entry
        without files has none, as `Store` records it; a setting's says what it is), and the
        server's clock unless a global admin commits. `current`: the commit's entries and
        their scopes' settings as `Committer.read_built` read them (no entry read again)."""
        profiles = self.store.committer.accepted(scope, current)
        update: dict[str, Any] = {"actor": principal.name}  # a client cannot claim another
        if not principal.is_global_admin:
            update["committed_at"] = time.time()
        setting = EntryRef.parse(m.skill).kind is EntryKind.SETTING
        if not m.deleted and not setting:  # (a staged-only skill, a hiding entry: no SKILL.md)
            committer = self.store.committer
            reading = committer.inspect(m.skill, m.files, profiles) if m.files else None
            update.update(
                frontmatter=reading.frontmatter if reading else None,
                findings=reading.findings if reading else [],
                typed=reading.typed if reading else None,
            )
        # the entry as the commit expects it, for the candidate and the labels
        cur = _expected(current, scope, m.skill, expect) if m.candidate or m.labels else None
        if m.candidate is not None:
            update["candidate"] = self._staged(
                m, principal, scope, cur, update, moved, current, profiles
            )
        if m.imported is not None:  # the digest of the files sent, not the client's word
            source = check_source(m.imported.source)
            update["imported"] = ImportMark(source=source, digest=files_digest(m.files))
        if m.labels:
            update["labels"] = self._labelled(m, principal, scope, cur, update)
        return m.model_copy(update=update)

    def _labelled(
        self,
        m: Manifest,
        principal: Principal,
        scope: Scope,
        cur: Manifest | None,
        update: dict[str, Any],
    ) -> dict[str, Labelled]:
        """The labels as the server vouches for them (docs/governance.md, "Labels and pins"):
        one the entry carries already (same version and commit) stays as it is; a new or
        moved one is made from the version the store keeps, by the token's name, so a client
        cannot label files that version never held. `cur`: the entry as the commit expects it."""
        held = cur.labels if cur is not None and not cur.deleted else {}
        out: dict[str, Labelled] = {}
        for name, sent in m.labels.items():
            old = held.get(name)
            if old is not None and (old.version, old.commit_id) == (sent.version, sent.commit_id):
                out[name] = old
                continue
            kept = (
                cur
                if cur is not None and cur.version == sent.version
                else self.engine.history_version(scope, m.skill, sent.version)
            )
            if kept is None or kept.deleted or kept.commit_id != sent.commit_id:
                raise NotFound(
                    f"{scope}/{m.skill}: label {name!r} names version {sent.version} (commit "
                    f"{sent.commit_id!r}), which the store does not keep: label a kept version"
                )
            out[name] = kept.labelled(principal.name, update.get("committed_at", m.committed_at))
        return out

    def _staged(
        self,
        m: Manifest,
        principal: Principal,
        scope: Scope,
        cur: Manifest | None,
        update: dict[str, Any],
        moved: Sequence[tuple[Scope, str, int]],
        current: Current,
        profiles: Profiles,
    ) -> Candidate:
        """The candidate as the server vouches for it (docs/governance.md, "Staged rollout"):
        one the store holds (same commit id) — on this entry, or on an entry this commit
        deletes, as archive and restore move it — keeps its files, findings and who staged
        it, taking only the client's rule (a widen, or any edit carrying it); a new one must
        be staged by this very commit and gets the server's reading of its SKILL.md, the
        token's name and the commit's time. `cur`: the entry as the commit expects it."""
        c = m.candidate
        assert c is not None
        held = cur.candidate if cur is not None and not cur.deleted else None
        if held is None or held.commit_id != c.commit_id:
            held = _moved_candidate(c, moved, current)
        if held is not None and held.commit_id == c.commit_id:
            return held.model_copy(update={"rollout": c.rollout})
        if c.commit_id != m.commit_id:
            raise InvalidArgument(
                f"{scope}/{m.skill}: a new candidate is staged by the commit that writes it "
                f"(commit id {m.commit_id!r}), not {c.commit_id!r}"
            )
        reading = self.store.committer.inspect(m.skill, c.files, profiles)
        return c.model_copy(
            update={
                "frontmatter": reading.frontmatter,
                "findings": reading.findings,
                "typed": reading.typed,
                "actor": principal.name,
                "staged_at": update.get("committed_at", m.committed_at),
            }
        )


def _expected(current: Current, scope: Scope, skill: str, expect: int) -> Manifest | None:
    """The entry as the commit expects it, as `current` holds it; VersionMismatch (as the
    commit itself would answer, so the client reads again and retries) when it moved since."""
    cur = current.get((scope, skill))
    version = cur.version if cur is not None else 0
    if version != expect:
        raise VersionMismatch(scope, skill, version)
    return cur


def _moved_candidate(
    c: Candidate, moved: Sequence[tuple[Scope, str, int]], current: Current
) -> Candidate | None:
    """The candidate `c` names, held by an entry the same commit deletes (the source of
    an archive or a restore, read with the commit's entries). A source no longer at the
    version the commit expects lost a race (a promote landed first): `_expected` says so,
    rather than a refusal of a candidate the client never made."""
    for scope, skill, expect in moved:
        source = _expected(current, scope, skill, expect)
        held = source.candidate if source is not None and not source.deleted else None
        if held is not None and held.commit_id == c.commit_id:
            return held
    return None
