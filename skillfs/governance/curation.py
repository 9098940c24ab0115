"""`store.curation` (docs/governance.md, "Curation"): which skills of an agent or a market are
stale, which to archive, which are near-duplicates — and, applied, the archiving. The report
and the similarity rules are pure (skillfs/governance/curation_report.py,
skillfs/util/similarity.py); each archive is one commit of `store.archive.add`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from skillfs.errors import Conflict, InvalidArgument, InvalidPath, NotFound
from skillfs.governance.archive import Archive
from skillfs.governance.curation_report import (
    ARCHIVE_AFTER,
    DUPLICATE_THRESHOLD,
    STALE_AFTER,
    CuratedSkill,
    CurationReport,
    DuplicatePair,
    SkillRef,
    curated,
    idle,
    near_duplicates,
    windows,
)
from skillfs.governance.ports import Reads
from skillfs.governance.usage import Usage
from skillfs.model import Manifest, Scope, UsageDrop, UsageStat, target_domain, usage_by_skill
from skillfs.model.names import is_hidden_dir
from skillfs.model.ops import DEFAULT, WriteOptions
from skillfs.spec.skill_md import SKILL_MD, parse_skill_md
from skillfs.store.who import MESSAGE_MAX, check_actor, check_message
from skillfs.util.durations import format_duration

log = logging.getLogger(__name__)

#: Usage is read again before an archive when the last read is older than this (seconds):
#: fresher than a worker's usage batch (5 s), without one full read per archived skill.
RECHECK = 1.0
#: Room kept in a commit's message for each archive's own reason ("curation: idle 120d
#: (archive after 90d)") after the caller's message.
REASON_ROOM = 200
#: (scope, skill) -> its usage over the users (or agents) it is looked up for, and the
#: latest drop of that usage (docs/governance.md, "Dropping usage").
Use = tuple[UsageStat | None, UsageDrop | None]
Uses = Callable[[Scope, str], Use]


class Curation:
    """The report, and applied, the archiving (`store.archive.add`)."""

    def __init__(self, reads: Reads, archive: Archive, usage: Usage) -> None:
        self._reads = reads
        self._archive = archive
        self._usage = usage

    def run(
        self,
        target: str,
        stale_after: float | str = STALE_AFTER,
        archive_after: float | str = ARCHIVE_AFTER,
        *,
        dry_run: bool = True,
        now: float | None = None,
        duplicate_threshold: float = DUPLICATE_THRESHOLD,
        options: WriteOptions = DEFAULT,
    ) -> CurationReport:
        """Report an agent's (all its scopes; by id or `agents/A`) or a market's
        (`markets/M`) skills idle for `stale_after` (stale) or `archive_after` (to archive)
        and its near-duplicate pairs, each with its reason. Durations are seconds or text
        (`30d`, `2h`). Idle means neither used (by the usage's last-used times) nor
        committed since; `now` defaults to the store's clock.

        With `dry_run=False` each skill to archive is archived (`store.archive.add`, one
        commit each, by `options.actor`, its message `options.message` followed by its own
        reason) after its last use is read again: one used or changed meanwhile is left in
        place and reported in `skipped` with why. Each archive compares the version it read
        and has its own commit id, so `options` give neither."""
        stale, cutoff = windows(stale_after, archive_after)
        if not 0 < duplicate_threshold <= 1:
            raise InvalidArgument(f"duplicate_threshold {duplicate_threshold} is not in (0, 1]")
        if options.expected_version is not None or options.commit_id is not None:
            raise InvalidArgument(
                "a curation run archives each skill at the version it reads, in a commit of "
                "its own: give its options an actor and a message only"
            )
        if not dry_run and options.actor is not None:
            check_actor(options.actor)  # a bad one is refused before anything is read
        if len(check_message(options.message)) > MESSAGE_MAX - REASON_ROOM:
            raise InvalidArgument(
                f"a curation message is at most {MESSAGE_MAX - REASON_ROOM} characters (each "
                "archive adds its reason to it): shorten it"
            )
        domain = self._curated_domain(target)
        at = self._reads.clock() if now is None else now
        skills = [
            (scope, m)
            for scope in self._reads.retrying(self._reads.engine.scopes, domain)
            for m in sorted(self._reads.manifests(scope).values(), key=lambda m: m.skill)
            if _curatable(m)
        ]
        uses = self._uses(domain)
        stale_list: list[CuratedSkill] = []
        to_archive: list[CuratedSkill] = []
        kept: list[CuratedSkill] = []
        for scope, m in skills:
            stat, drop = uses(scope, m.skill)
            since = idle(m, stat, at, drop)[0]
            if at - since >= cutoff:
                verdict = f"to archive (idle {format_duration(cutoff)} or more)"
                held = _held(m)
                if held:  # never archived, nor listed as if it would be
                    verdict = f"kept though idle {format_duration(cutoff)} or more: {held}"
                    kept.append(curated(scope, m, stat, at, verdict, drop))
                else:
                    to_archive.append(curated(scope, m, stat, at, verdict, drop))
            elif at - since >= stale:
                verdict = f"stale (idle {format_duration(stale)} or more)"
                stale_list.append(curated(scope, m, stat, at, verdict, drop))
        duplicates, total = self._duplicates(skills, duplicate_threshold)
        report = CurationReport(
            domain=domain,
            now=at,
            stale_after=stale,
            archive_after=cutoff,
            dry_run=dry_run,
            skills=len(skills),
            stale=stale_list,
            to_archive=to_archive,
            duplicates=duplicates,
            duplicates_total=total,
            skipped=kept,
        )
        if dry_run:
            return report
        archived, skipped = self._archive_idle(domain, to_archive, now, cutoff, options)
        return report.model_copy(update={"archived": archived, "skipped": kept + skipped})

    def _curated_domain(self, target: str) -> str:
        """`agents/A` or `markets/M` from an agent id or a domain; NotFound when never written."""
        domain = target_domain(target)
        known = self._reads.retrying(self._reads.engine.domains)
        if domain not in known:
            raise NotFound(
                f"nothing to curate: {domain} has never held a skill; known: "
                + (", ".join(known[:50]) or "none")
            )
        return domain

    def _uses(self, domain: str) -> Uses:
        """How a skill's usage is looked up, read once: a user's skill by that user's loads
        of its name; a shared skill by every user's (a user's own override counts too, so
        curation errs towards keeping); a market skill by every agent's."""
        kind, _, ident = domain.partition("/")
        if kind == "markets":
            known = self._reads.retrying(self._reads.engine.usage_agents)
            agents = known if known is not None else self._reads.agents()
            held = [self._usage.with_drops(a) for a in agents]
            merged = usage_by_skill(  # each agent's uses of a skill, as a user's would be
                {(a, s): st for a, (d, _) in zip(agents, held, strict=True)
                 for s, st in usage_by_skill(d).items()}
            )  # fmt: skip
            every = [drop for _, drops in held for drop in drops]
            return lambda scope, skill: (merged.get(skill), _latest(every, None, skill))
        detail, drops = self._usage.with_drops(ident)
        by_skill = usage_by_skill(detail)

        def look(scope: Scope, skill: str) -> Use:
            if scope.user_id is not None:
                user = scope.user_id
                return detail.get((user, skill)), _latest(drops, user, skill)
            return by_skill.get(skill), _latest(drops, None, skill)

        return look

    def _duplicates(
        self, skills: Sequence[tuple[Scope, Manifest]], threshold: float
    ) -> tuple[list[DuplicatePair], int]:
        """Near-duplicate pairs (and how many in all) among the enabled skills (descriptions
        from the manifests, bodies from SKILL.md, read in one batch)."""
        enabled = [(s, m) for s, m in skills if not m.disabled and SKILL_MD in m.files]
        texts = self._reads.read_entries([m.files[SKILL_MD] for _, m in enabled])
        bodies = [parse_skill_md(texts[m.files[SKILL_MD].sha256]).body for _, m in enabled]
        descriptions = [str((m.frontmatter or {}).get("description") or "") for _, m in enabled]
        refs = [SkillRef(scope=s, skill=m.skill) for s, m in enabled]
        return near_duplicates(refs, descriptions, bodies, threshold)

    def _archive_idle(
        self,
        domain: str,
        items: Sequence[CuratedSkill],
        now: float | None,
        cutoff: float,
        options: WriteOptions,
    ) -> tuple[list[CuratedSkill], list[CuratedSkill]]:
        """Archive each item whose last use, read again just before (at most RECHECK seconds
        before), is still outside the window; the others are skipped with the reason."""
        archived: list[CuratedSkill] = []
        skipped: list[CuratedSkill] = []
        uses: Uses | None = None
        read_at = 0.0
        for item in items:
            at = self._reads.clock() if now is None else now
            m = self._reads.manifests(item.scope, [item.skill]).get(item.skill)
            if m is None or not _curatable(m):
                skipped.append(_note(item, "gone or changed meanwhile, left as it is"))
                continue
            held = _held(m)
            if held:  # switched off, or staged, since the report
                by = "disabled by an operator, " if m.disabled else ""
                skipped.append(_note(item, f"{by}kept: {held}"))
                continue
            if uses is None or time.monotonic() - read_at > RECHECK:
                uses, read_at = self._uses(domain), time.monotonic()
            stat, drop = uses(item.scope, item.skill)
            since = idle(m, stat, at, drop)[0]
            if at - since < cutoff:
                ago = format_duration(max(0.0, at - since))
                skipped.append(_note(item, f"used or changed {ago} ago meanwhile, kept"))
                continue
            after = format_duration(cutoff)
            why = f"curation: idle {format_duration(at - since)} (archive after {after})"
            if options.message:
                why = f"{options.message} — {why}"
            try:
                self._archive.add(
                    item.scope, item.skill, why, replace=True,
                    options=WriteOptions(actor=options.actor, expected_version=m.version),
                )  # fmt: skip
            except (Conflict, NotFound, InvalidPath) as exc:
                skipped.append(_note(item, f"not archived: {exc}"))
                continue
            log.info("archived %s/%s: %s", item.scope, item.skill, why)
            archived.append(curated(item.scope, m, stat, at, "archived", drop))
        return archived, skipped


def _latest(drops: Sequence[UsageDrop], user: str | None, skill: str) -> UsageDrop | None:
    """The latest drop that took `skill`'s usage by `user` (None: by anyone)."""
    return max((d for d in drops if d.covers(user, skill)), key=lambda d: d.at, default=None)


def _curatable(m: Manifest) -> bool:
    """A skill with files: not a tombstone, not a user's hiding entry, not a side entry."""
    return not m.deleted and bool(m.files) and not is_hidden_dir(m.skill)


#: Why a disabled skill is never archived: it is a hole an operator made, and archived, the
#: lower layer's skill it hides would show.
HOLE = "archiving it would end the hole it makes over any lower layer's skill of that name"
#: Why a skill with a staged candidate is never archived: archiving would end the rollout
#: without anyone deciding it (as a rename is refused for it).
STAGED = "a staged candidate is rolling out: archiving would end it; promote or abort it first"


def _held(m: Manifest) -> str:
    """Why an idle skill is kept, or "": an operator's kill switch or a rollout in progress."""
    if m.disabled:
        return HOLE
    return STAGED if m.candidate is not None else ""


def _note(item: CuratedSkill, why: str) -> CuratedSkill:
    return item.model_copy(update={"reason": f"{item.reason}; {why}"})
