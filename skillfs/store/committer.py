"""Every write of every surface ends here (docs/architecture.md, "The Committer"): the
commands of one commit become file tables (checked, hashed, uploaded once), then, on each
attempt, the next versions of their entries from what the attempt read, held to every rule
(`store.rules`), and one compare-and-set of the engine; a concurrent writer makes it read and
plan again, a lost answer makes it look for its own commit id, and retention follows."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from skillfs.engines.base import Charge, Check, CommitOp, Engine, VersionMismatch
from skillfs.errors import (
    Conflict,
    InvalidArgument,
    InvalidPath,
    NotFound,
    StoreUnavailable,
)
from skillfs.model import CommitResult, FileEntry, Finding, Manifest, Revision, Scope
from skillfs.model.entry import EntryKind, EntryRef
from skillfs.model.names import SETTINGS, check_live_name, entry_name, in_side, name_key
from skillfs.model.ops import Command, Propose, Put, Stage, WriteOptions
from skillfs.spec.profiles import Profiles
from skillfs.spec.skill_md import SKILL_MD, Inspection, inspect_skill
from skillfs.spec.validation import SPEC
from skillfs.store import name_register, quotas, rules, scope_profiles
from skillfs.store.blobs import Blobs, Retrying, sha256
from skillfs.store.file_tables import file_table, renamed_skill_md
from skillfs.store.limits import Limits
from skillfs.store.plans import plan
from skillfs.store.retention import HistoryPolicy, prune_after_commit
from skillfs.store.steps import Plan, Prepared, Step
from skillfs.store.who import check_actor, check_commit_id, check_message, default_actor
from skillfs.util.backoff import pause
from skillfs.util.deadline import bounded, deadline

log = logging.getLogger(__name__)


@dataclass
class Committer:
    """The write path of one store: its engine, blobs, limits and retention."""

    engine: Engine
    blobs: Blobs
    limits: Limits
    history_policy: HistoryPolicy
    clock: Callable[[], float]
    retry_for: float
    retrying: Retrying
    #: The NotFound of an entry a command acts on that is not there, naming what is.
    missing: Callable[..., NotFound]
    #: The markets of the store (a user's scope may hide a market's skill).
    markets: Callable[[], list[str]]
    #: What a version holds once stored, which its quota charge counts
    #: (`store.tables.Tables.footprint`; a grpc:// store's server charges on its own).
    footprint: Callable[[Manifest], quotas.Footprint]
    #: The store's own actor (default: `$SKILLFS_ACTOR`, else `user@host`).
    actor: str | None = None
    #: The store's own host profiles: what a scope that names none accepts
    #: (docs/validation.md, "Host profiles"; `store.scope_profiles`).
    profiles: Profiles = SPEC

    def who(self, actor: str | None = None) -> str:
        """The actor a commit is recorded by: `actor`, else the store's, else the default."""
        if actor is not None:
            return check_actor(actor)
        return check_actor(self.actor) if self.actor else default_actor()

    def commit(
        self, commands: Sequence[Command], options: WriteOptions, *, strict: bool = False
    ) -> CommitResult:
        """Commands of one agent (or one market), all or nothing (docs/design.md §2). Each
        carries the version it expects; `options` the actor, message and commit id.
        `strict` is the admin surfaces' policy (docs/design.md §7): a skill with error
        findings is refused with InvalidSkill carrying them, before anything is uploaded."""
        plans = [plan(c) for c in commands]
        steps = [s for p in plans for s in p.steps]
        room = name_register.room(self.engine.max_ops)
        domain = rules.check_shape([(s.scope, s.entry) for s in steps], None, room)
        message = check_message(options.message or next((p.message for p in plans), ""))
        commit_id = check_commit_id(options.commit_id or uuid.uuid4().hex)
        tables, new = self._prepare(commands)
        attempt = _Attempt(self, commit_id, self.who(options.actor), strict, tables, new)
        attempt.domain = domain
        attempt.given_id = options.commit_id is not None
        return self._commit(domain, plans, steps, attempt, message)

    def charge_token(self, domain: str, n: int, write: str) -> Charge | None:
        """Charge `n` bytes a token writes outside a commit (`write`: its uploads, the usage
        counters it creates) to the token acting now (`quotas.acting_as`) in `domain`,
        atomically against its quota: else QuotaExceeded naming it, nothing charged. None:
        no token acts, nothing is charged (docs/security.md, "Quotas")."""
        credential = quotas.current()
        if credential is None or n <= 0:
            return None
        charge = quotas.token_charge(credential, self.limits, n, write)
        self.retrying(self.engine.charge_quota, domain, charge)
        return charge

    # ------------------------------------------------------------------ before the loop

    def _prepare(
        self, commands: Sequence[Command]
    ) -> tuple[dict[int, tuple[str, dict[str, FileEntry]]], dict[str, bytes]]:
        """The files of every command that carries some, by command: its entry and file
        table, checked against the limits and hashed; and the new bytes. What SKILL.md says
        is judged per attempt, under the profiles its scope holds then (`_Attempt.prepared`,
        the strict policy applied); the first attempt uploads the new bytes (`_touch`)."""
        now = self.clock()
        blobs: dict[str, bytes] = {}
        out: dict[int, tuple[str, dict[str, FileEntry]]] = {}
        for c in commands:
            if not isinstance(c, Put | Stage | Propose):
                continue
            entry = c.skill if isinstance(c, Put | Stage) else EntryRef.draft(c.name).key
            ref = EntryRef.parse(entry)
            if ref.kind is EntryKind.LEGACY:
                raise InvalidPath(
                    f"{entry!r} holds one entry per skill: write {entry}/<name> "
                    "(docs/governance.md)"
                )
            if ref.is_skill:
                check_live_name(ref.name)  # `_x`, `.x`: a directory no worker reads as a skill
            if not c.files:
                raise InvalidArgument(
                    f"{c.scope}/{entry}: a skill needs at least one file; to delete it, delete it"
                )
            out[id(c)] = (entry, file_table(self.limits, entry, c.files, blobs, now))
        return out, blobs

    def inspect(
        self,
        entry: str,
        files: Mapping[str, FileEntry],
        profiles: Profiles,
        unstored: Mapping[str, bytes] | None = None,
    ) -> Inspection:
        """A skill's readings and findings as its SKILL.md says under the host `profiles` of
        its scope (`accepted`); the other files are named but not read. `unstored` holds
        bytes not uploaded yet."""
        texts = dict.fromkeys(files, b"")
        md = files.get(SKILL_MD)
        if md is not None:
            texts[SKILL_MD] = (unstored or {}).get(md.sha256) or self.blobs.read(md)
        return inspect_skill(EntryRef.parse(entry).name, texts, profiles)

    def accepted(self, scope: Scope, current: rules.Current) -> Profiles:
        """The host profiles `scope` accepts as `current` holds its setting
        (`scope_profiles.accepted`, over the store's own)."""
        return scope_profiles.accepted(current.get((scope, scope_profiles.PROFILES)), self.profiles)

    # ------------------------------------------------------------------ the loop

    def _commit(
        self,
        domain: str,
        plans: Sequence[Plan],
        steps: Sequence[Step],
        attempt: _Attempt,
        message: str,
    ) -> CommitResult:
        end = deadline(self.retry_for)
        unsure = False  # a commit was sent and its answer lost: it may have landed
        commit_id = attempt.commit_id
        review = _settings([s.scope for s in steps])
        for n in range(1000):
            reads = [(s.scope, s.entry) for s in steps] + [r for p in plans for r in p.reads]
            reads += review  # the scopes' settings, in the same read of each scope
            current = attempt.read(reads)
            landed = _ours(steps, current, attempt)
            if not landed and (unsure or (n == 0 and attempt.given_id)):
                # a retry of a commit that landed under another writer's (C6): the caller's
                # id is looked for in the kept history too, and names one payload there too
                landed = self._in_history(steps, attempt)
            if not landed:
                try:
                    ops, checks, claims = self._ops(domain, steps, attempt, current, message)
                except Conflict:  # against our own commit, another writer's on top? (C6)
                    if unsure or not self._in_history(steps, attempt):
                        raise
                    landed = True
            if landed:
                return self._already(domain, steps, current, commit_id)
            self._touch(ops, current, attempt)
            with quotas.prepaid(attempt.paid):  # its uploads were charged to the token
                charges = quotas.charges(  # (the name register is not charged)
                    ops, current, self.limits, quotas.current(), self.footprint
                )
            started = time.monotonic()
            try:
                revision = self.engine.commit(domain, [*ops, *claims], checks, charges)
            except VersionMismatch:
                if time.monotonic() > end:
                    break
                pause(n)
                continue
            except StoreUnavailable:
                if out_of_time(end, started):
                    raise
                unsure = True
                time.sleep(min(0.05 * 2**n, 1.0, max(end - time.monotonic(), 0.0)))
                continue
            prune_after_commit(self.engine, self.history_policy, self.clock(), [*ops, *claims])
            return CommitResult(
                revision=revision,
                commit_id=commit_id,
                versions={op.manifest.skill: op.manifest.version for op in ops},
            )
        raise Conflict(
            f"gave up after {self.retry_for:.0f}s of concurrent writers to the same skills; retry",
        )

    def _ops(
        self,
        domain: str,
        steps: Sequence[Step],
        attempt: _Attempt,
        current: dict[tuple[Scope, str], Manifest],
        message: str,
    ) -> tuple[list[CommitOp], list[Check], list[CommitOp]]:
        """The attempt's next versions, held to every rule; the lower-layer entries the
        engine compares with them; and the next version of the name register of each scope
        where they create an entry (`name_register`), as the attempt read it."""
        ops: list[CommitOp] = []
        for s in steps:
            cur = current.get((s.scope, s.entry))
            rules.check_expected(s.scope, s.entry, s.expected, cur)
            version = cur.version if cur is not None else 0
            m = s.make(attempt).stamped(
                version=version + 1,
                commit_id=attempt.commit_id,
                committed_at=attempt.now,
                actor=attempt.actor,
                message=message,
            )
            m = rules.track_live(cur, m)
            ops.append(CommitOp(scope=s.scope, manifest=rules.storable(s.scope, m), expect=version))
        checks, claims = self._judged(
            domain, ops, current, lambda wanted: attempt.read(wanted, other_domains=True)
        )
        return ops, checks, claims

    def _judged(
        self,
        domain: str,
        ops: Sequence[CommitOp],
        current: dict[tuple[Scope, str], Manifest],
        load: Callable[[list[tuple[Scope, str]]], dict[tuple[Scope, str], Manifest]],
    ) -> tuple[list[Check], list[CommitOp]]:
        """Hold `ops` to every rule as of `current`, into which `load` reads the lower-layer
        entries they are guarded by (the scopes' look-alike names are read here, `names`):
        the entries the engine compares with them, and the name register's next version in
        each scope where they create an entry (`name_register`), stamped as their commit."""
        markets = self.markets() if rules.reads_markets(ops, current) else []
        guarded = [g for g in rules.guarded(ops, current, markets) if g not in current]
        current.update(load(guarded))
        names = self.names(ops, current)
        rules.check_ops(ops, current, markets, names)
        claims = name_register.claims(names, current, stamp=ops[0].manifest)
        return _checks(domain, ops, current, markets), claims

    def _touch(
        self,
        ops: Sequence[CommitOp],
        current: Mapping[tuple[Scope, str], Manifest],
        attempt: _Attempt,
    ) -> None:
        """Refresh the last-use time of the stored files the new versions reference and the
        versions they replace do not (a rollback's, a copy's, a file kept by reference from
        elsewhere), refusing one whose blob is gone. A file the replaced version holds needs
        none: GC's mark reads the live version, which holds it before the commit and after
        (docs/architecture.md, "Blob GC"), and an edit of one file of a large skill touches
        one blob, not thousands (on etcd each touch is a revision kept until compaction)."""
        held = {
            e.sha256
            for op in ops
            if (cur := current.get((op.scope, op.manifest.skill))) is not None
            for _, e in cur.all_files()
        }
        refs = {e.sha256 for op in ops for _, e in op.manifest.all_files()}
        fresh = refs - held - set(attempt.new)
        new = {} if attempt.sent else attempt.new  # judged by now: uploaded once, here
        pay = functools.partial(self.charge_token, attempt.domain, write="this upload")
        paid = self.blobs.upload(new, fresh, attempt.now, attempt.domain, pay)
        if not attempt.sent:  # the bytes the store lacked, charged to the acting token first
            attempt.paid = frozenset(paid)
        attempt.sent = True

    def read_built(self, targets: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], Manifest]:
        """What a commit a client built is judged on, in one read of each scope: its entries
        and their scopes' settings (the two-person rule, the host profiles its findings are
        made under, `accepted`, and the name register, read before the names)."""
        return self.load([*targets, *_settings([scope for scope, _ in targets])])

    def commit_built(
        self, domain: str, ops: Sequence[CommitOp], current: dict[tuple[Scope, str], Manifest]
    ) -> Revision:
        """A commit whose next versions a client built (a skillfs server's `Commit` from a
        `grpc://` store), held to the rules of the commits planned here, as of `current`
        (`read_built`, which its findings were made on): an entry that moved since is a
        VersionMismatch, so the client reads again and plans again. Where it creates an entry
        the server writes the scope's name register (the client leaves the names to it), and
        keeps the register's history short."""
        tracked = []
        for op in ops:
            cur = current.get((op.scope, op.manifest.skill))
            version = cur.version if cur is not None else 0
            if version != op.expect:
                raise VersionMismatch(op.scope, op.manifest.skill, version)
            tracked.append(op.model_copy(update={"manifest": rules.track_live(cur, op.manifest)}))
        ops = tracked
        checks, claims = self._judged(domain, ops, current, self.load)
        charged = quotas.charges(ops, current, self.limits, quotas.current(), self.footprint)
        revision = self.engine.commit(domain, [*ops, *claims], checks, charged)
        prune_after_commit(self.engine, self.history_policy, self.clock(), claims)
        return revision

    def names(self, ops: Sequence[CommitOp], current: rules.Current) -> dict[Scope, list[str]]:
        """For the name rule (`rules.check_new_names`), in each scope where the commit
        creates an entry: the live entries whose name is or looks like a created one's. Read
        only then: the scope's entry names alone, once, then those few entries, to leave
        tombstones out (a scope's settings take no name). An engine that cannot list names
        (`grpc://`: its server runs the rule on its own reads) leaves its scopes out."""
        wanted: dict[Scope, set[str]] = {}
        for op in rules.created(ops, current):
            wanted.setdefault(op.scope, set()).add(name_key(entry_name(op.manifest.skill)))
        out: dict[Scope, list[str]] = {}
        for scope, keys in wanted.items():
            held = self.retrying(self.engine.entry_names, scope)
            if held is None:
                continue
            alike = [
                e for e in held if not in_side(e, SETTINGS) and name_key(entry_name(e)) in keys
            ]
            found = self.retrying(self.engine.load_skills, scope, alike) if alike else {}
            out[scope] = [e for e, m in found.items() if not m.deleted]
        return out

    def load(self, keys: Sequence[tuple[Scope, str]]) -> dict[tuple[Scope, str], Manifest]:
        """The entries named (tombstones included), one load per scope."""
        by_scope: dict[Scope, list[str]] = {}
        for scope, entry in dict.fromkeys(keys):
            by_scope.setdefault(scope, []).append(entry)
        found: dict[tuple[Scope, str], Manifest] = {}
        for scope, entries in by_scope.items():
            loaded = self.retrying(self.engine.load_skills, scope, entries)
            found.update({(scope, k): m for k, m in loaded.items()})
        return found

    def _in_history(self, steps: Sequence[Step], attempt: _Attempt) -> bool:
        """Whether a commit of this id landed on any of these entries, read back from their
        history: another writer's version may stand on top of ours (a lost answer, C6). A
        version it landed with other files refuses the commit, as `_ours` does."""
        landed = False
        for s in steps:
            summaries = self.retrying(self.engine.history_summaries, s.scope, s.entry)
            for v in summaries:
                if v.commit_id != attempt.commit_id:
                    continue
                landed = True
                if s.payload is not None or s.removes:
                    held = self.retrying(self.engine.history_version, s.scope, s.entry, v.version)
                    if held is not None:
                        _same_payload(s, held, attempt)
        return landed

    def _already(
        self,
        domain: str,
        steps: Sequence[Step],
        current: Mapping[tuple[Scope, str], Manifest],
        commit_id: str,
    ) -> CommitResult:
        """A retried commit whose first attempt landed: report it, do not write it twice.
        Commits are atomic, so one entry carrying the commit id proves all of them landed;
        an entry another writer changed since has our version in its history. The revision
        is the domain's current one, which contains the commit."""
        rev = self.retrying(self.engine.revisions, [domain])[domain]
        assert rev is not None
        versions: dict[str, int] = {}
        for s in steps:
            cur = current.get((s.scope, s.entry))
            if cur is not None and cur.commit_id == commit_id:
                versions[s.entry] = cur.version
            else:
                older = self.retrying(self.engine.history_summaries, s.scope, s.entry)
                versions[s.entry] = next(m.version for m in older if m.commit_id == commit_id)
        return CommitResult(revision=rev, commit_id=commit_id, versions=versions)


@dataclass
class _Attempt:
    """One commit's attempt as its plans see it (`steps.Attempt`)."""

    committer: Committer
    commit_id: str
    actor: str
    strict: bool
    #: Each command's entry and checked file table (`Committer._prepare`).
    tables: dict[int, tuple[str, dict[str, FileEntry]]]
    #: The commit's new bytes, uploaded by its first attempt once judged (`sent`).
    new: dict[str, bytes]
    sent: bool = False
    #: Of those, the ones the store lacked, charged to the acting token by that upload: the
    #: commit does not charge them to it again (`quotas.prepaid`).
    paid: frozenset[str] = frozenset()
    now: float = 0.0
    #: The caller named the commit id (a retry may reuse it): it is looked for in history.
    given_id: bool = False
    #: The agent or market committed to (what uploads are for).
    domain: str = ""
    current: dict[tuple[Scope, str], Manifest] = field(default_factory=dict)
    _markets: dict[str, bool] = field(default_factory=dict)
    #: What each command's SKILL.md says under the profiles its scope was read with.
    _readings: dict[tuple[int, Profiles], Prepared] = field(default_factory=dict)

    def read(
        self, keys: Sequence[tuple[Scope, str]], *, other_domains: bool = False
    ) -> dict[tuple[Scope, str], Manifest]:
        """The entries named, one load per scope; starts a new attempt's view unless it only
        adds lower layers' entries (`other_domains`)."""
        found = self.committer.load(keys)
        if not other_domains:
            self.now = self.committer.clock()
            self.current = dict(found)
            self._markets = {}
        else:
            self.current.update(found)
        return found

    def live(self, scope: Scope, entry: str) -> Manifest | None:
        return rules.live(self.current.get((scope, entry)))

    def kept(self, scope: Scope, entry: str, version: int) -> Manifest | None:
        c = self.committer
        return c.retrying(c.engine.history_version, scope, entry, version)

    def prepared(self, command: Command) -> Prepared:
        """The command's files judged under the profiles its scope holds as this attempt read
        it: a setting changed since an earlier attempt judges them again."""
        entry, files = self.tables[id(command)]
        profiles = self.committer.accepted(command.scope, self.current)
        key = (id(command), profiles)
        if key not in self._readings:
            reading = self.committer.inspect(entry, files, profiles, self.new)
            self.refuse_errors(EntryRef.parse(entry).name, reading.findings)
            self._readings[key] = prepared(files, reading)
        return self._readings[key]

    def missing(self, scope: Scope, entry: str, *, below: bool = False) -> NotFound:
        return self.committer.missing(scope, entry, below=below)

    def held_below(self, scope: Scope, skill: str) -> bool:
        """Whether the agent's shared scope or a market holds `skill` live (read once per
        attempt: a user hides what it sees from below)."""
        if scope.kind != "user" or scope.agent_id is None:
            return False
        c = self.committer
        below = [Scope.shared(scope.agent_id), *(Scope.market(m) for m in c.markets())]
        for layer in below:
            key = f"{layer}/{skill}"
            if key not in self._markets:
                found = c.retrying(c.engine.load_skills, layer, [skill]).get(skill)
                self._markets[key] = rules.live(found) is not None
            if self._markets[key]:
                return True
        return False

    def renamed(self, scope: Scope, skill: str, files: dict[str, FileEntry], old: str) -> Prepared:
        c = self.committer
        md = files.get(SKILL_MD)
        blobs: dict[str, bytes] = {}
        if md is not None:
            text = renamed_skill_md(c.blobs.read(md), old, skill)
            if text is not None:
                digest = sha256(text)
                blobs[digest] = text
                files = {**files, SKILL_MD: FileEntry(sha256=digest, size=len(text),
                                                     mode=md.mode, mtime=self.now)}  # fmt: skip
                c.blobs.upload(blobs, set(), self.now, self.domain)
        return prepared(files, c.inspect(skill, files, c.accepted(scope, self.current), blobs))

    def refuse_errors(self, skill: str, findings: Sequence[Finding]) -> None:
        if self.strict:
            rules.refuse_errors(skill, findings)


def prepared(files: Mapping[str, FileEntry], reading: Inspection) -> Prepared:
    """A file table (sorted by path) with what its SKILL.md says."""
    fm, findings, typed = reading
    return Prepared(dict(sorted(files.items())), fm, tuple(findings), typed)


def _ours(
    steps: Sequence[Step], current: Mapping[tuple[Scope, str], Manifest], attempt: _Attempt
) -> bool:
    """Whether a commit of this id is what one of these entries holds now. A commit id names
    one payload (its entries' file tables): one reused for other files is refused, naming
    the version it committed, rather than reported as that version."""
    landed = False
    for s in steps:
        cur = current.get((s.scope, s.entry))
        if cur is None or cur.commit_id != attempt.commit_id:
            continue
        landed = True
        _same_payload(s, cur, attempt)
    return landed


def _same_payload(s: Step, held: Manifest, attempt: _Attempt) -> None:
    """Refuse a commit id that committed `held` with another payload than step `s` writes:
    a command's files as sorted (path, sha256, mode) rows, or a removal's tombstone."""
    if s.payload is not None:
        files = attempt.tables[id(s.payload)][1]
        staged = isinstance(s.payload, Stage) and held.candidate is not None
        table = held.candidate.files if staged and held.candidate else held.files
        same = not held.deleted and rules.rows(table) == rules.rows(files)
    elif s.removes:
        same = held.deleted
    else:
        return
    if not same:
        raise InvalidArgument(
            f"commit id {attempt.commit_id!r} already committed version {held.version} of "
            f"{s.scope}/{s.entry} with another payload: a commit id names one write (its "
            "scope, skill and files); give this one a new id (a retry sends the same write "
            "under the same id)"
        )


def _settings(scopes: Sequence[Scope]) -> list[tuple[Scope, str]]:
    """The entries of the scopes' settings a commit is judged under, read with its entries in
    the same read of each scope: the two-person rule, the host profiles its findings are made
    under, and the name register (read before the scope's names: `name_register`)."""
    review = [(scope, rules.REVIEW) for scope in dict.fromkeys(scopes)]
    return review + scope_profiles.entries(scopes) + name_register.entries(scopes)


def _checks(
    domain: str, ops: Sequence[CommitOp], current: rules.Current, markets: Sequence[str]
) -> list[Check]:
    """The lower-layer entries the kill switch read, compared by the engine with the commit
    where they share its domain (a market's: read only), the two-person rule's entry of
    each scope where the commit serves new files (a rule turned on meanwhile makes the
    commit read again), and the host profiles' entry of each scope where it writes files
    (profiles changed meanwhile make it read and judge again)."""
    written = {(op.scope, op.manifest.skill) for op in ops}
    review = list(
        dict.fromkeys((op.scope, rules.REVIEW) for op in rules.held_to_review(ops, current))
    )
    return [
        Check(scope=scope, skill=entry, expect=current[(scope, entry)].version
              if (scope, entry) in current else 0)
        for scope, entry in [*rules.guarded(ops, current, markets), *review,
                             *scope_profiles.judged(ops)]
        if scope.domain == domain and (scope, entry) not in written
    ]  # fmt: skip


def out_of_time(end: float, started: float) -> bool:
    """Whether a failed attempt begun at `started` leaves no time for another before `end`:
    none is left, or, under a step's budget, less than the failed one took (a store that
    hangs makes every attempt wait out the client's timeout, which would pass the budget;
    one that refuses fails fast and is tried until `end`). Outside a budget a last attempt
    may run past `end` (a lock held for a while is waited out, as before)."""
    now = time.monotonic()
    return now >= end or (bounded() and end - now < now - started)
