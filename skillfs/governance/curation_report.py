"""What curation reports (docs/governance.md, "Curation"): the skills idle long enough to be
stale or archived and the near-duplicate pairs, each with its reason in words. Pure:
`store.curation` (skillfs/governance/curation.py) gathers the manifests, texts and usage and
applies the report; the console and `skillfs curate` show it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from skillfs.errors import InvalidArgument
from skillfs.model import Manifest, Scope, UsageDrop, UsageStat
from skillfs.util.durations import format_duration, parse_duration
from skillfs.util.similarity import jaccard, shingles, similar_pairs

#: Two skills are near-duplicates when their descriptions or their SKILL.md bodies are at
#: least this alike (Jaccard similarity of word shingles, 0-1).
DUPLICATE_THRESHOLD = 0.8
#: How long a skill is idle (neither used nor changed) before it is stale, and before it is
#: archived, unless the caller says (the store, the CLI, the console and the curator).
STALE_AFTER, ARCHIVE_AFTER = "30d", "90d"
#: Shingle sizes: descriptions are short, so single words; bodies by runs of three words,
#: so reordered paragraphs still match but a shared vocabulary alone does not.
DESCRIPTION_SHINGLE, BODY_SHINGLE = 1, 3
#: How a skill sorts: by scope, then name.
Ref = tuple[str, str]
#: At most this many near-duplicate pairs are listed (most alike first); all are counted.
DUPLICATES_MAX = 1000


class SkillRef(BaseModel):
    """One skill of one scope."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    skill: str


class CuratedSkill(BaseModel):
    """A skill idle long enough to report, and what was done with it."""

    model_config = ConfigDict(frozen=True)

    scope: Scope
    skill: str
    version: int
    #: Its latest recorded use (seconds since the epoch); None: no use recorded with a time.
    last_used: float | None
    #: Loads recorded (over the users it was looked up for).
    uses: int
    #: The later of its last use and its live version's commit: a new edit is activity too.
    idle_since: float
    idle_seconds: float
    disabled: bool
    reason: str


class DuplicatePair(BaseModel):
    """Two skills whose description or body is nearly the same."""

    model_config = ConfigDict(frozen=True)

    a: SkillRef
    b: SkillRef
    description_similarity: float
    body_similarity: float
    reason: str


class CurationReport(BaseModel):
    """`Store.curate`'s answer for one agent (all its scopes) or one market."""

    model_config = ConfigDict(frozen=True)

    domain: str
    now: float
    stale_after: float
    archive_after: float
    dry_run: bool
    #: Skills looked at (disabled ones included; hiding entries, drafts and archives not).
    skills: int
    #: Idle for stale_after or more but less than archive_after: worth a look.
    stale: list[CuratedSkill]
    #: Idle for archive_after or more: archived when applied (never a disabled skill, nor one
    #: with a staged candidate: those are in `skipped`).
    to_archive: list[CuratedSkill]
    #: Near-duplicate pairs, most alike first: at most DUPLICATES_MAX of them.
    duplicates: list[DuplicatePair]
    #: How many near-duplicate pairs there are in all (listed or not).
    duplicates_total: int
    #: Applied only: archived now.
    archived: list[CuratedSkill] = []
    #: Idle for archive_after or more but left in place, the reason says why: disabled by an
    #: operator or rolling out a staged candidate (in a report too), or, when applied, used
    #: or changed meanwhile.
    skipped: list[CuratedSkill] = []


def windows(
    stale_after: float | str,
    archive_after: float | str,
    names: tuple[str, str] = ("stale_after", "archive_after"),
) -> tuple[float, float]:
    """The two windows in seconds, `names` saying them in errors (the CLI's options): a
    window that is not a duration, or archive_after shorter than stale_after, is refused."""
    stale, cutoff = parse_duration(stale_after, names[0]), parse_duration(archive_after, names[1])
    if cutoff < stale:
        said = [
            v if isinstance(v, str) else format_duration(v) for v in (stale_after, archive_after)
        ]
        if said[0] == said[1]:  # apart by less than words say: in seconds
            said = [f"{stale:g} seconds", f"{cutoff:g} seconds"]
        raise InvalidArgument(
            f"{names[1]} {said[1]} is shorter than {names[0]} {said[0]}: a skill is stale "
            "before it is archived"
        )
    return stale, cutoff


def idle(
    m: Manifest, stat: UsageStat | None, now: float, drop: UsageDrop | None = None
) -> tuple[float, float | None, str]:
    """Since when a skill is idle, its last use (None: no timed use) and why, in words. A
    drop of its usage (`drop`, the latest that covers it) later than both makes the time
    before it unknown: idle since the drop, at most."""
    last = stat.last_used if stat is not None and stat.last_used > 0 else None
    known = max(last or 0.0, m.committed_at)
    since = max(known, drop.at if drop is not None else 0.0)
    ago = format_duration(max(0.0, now - known))
    if last is None:
        loads = stat.count if stat is not None else 0
        before = f" (loaded {loads} times before last-use times were kept)" if loads else ""
        why = f"never used{before}; version {m.version} committed {ago} ago"
    elif last >= m.committed_at:
        why = f"last used {ago} ago"
    else:
        why = f"last used before version {m.version}, committed {ago} ago"
    if drop is not None and drop.at > known:
        dropped = format_duration(max(0.0, now - drop.at))
        why += (
            f"; its usage was dropped {dropped} ago by {drop.actor} ({drop.reason}): "
            "not known before"
        )
    if m.disabled:
        why += f"; disabled ({m.disabled_reason or 'no reason given'})"
    return since, last, why


def curated(
    scope: Scope,
    m: Manifest,
    stat: UsageStat | None,
    now: float,
    verdict: str,
    drop: UsageDrop | None = None,
) -> CuratedSkill:
    """A skill's report entry: its idleness, and `verdict` appended to the reason."""
    since, last, why = idle(m, stat, now, drop)
    return CuratedSkill(
        scope=scope,
        skill=m.skill,
        version=m.version,
        last_used=last,
        uses=stat.count if stat is not None else 0,
        idle_since=since,
        idle_seconds=max(0.0, now - since),
        disabled=m.disabled,
        reason=f"{why}: {verdict}",
    )


def near_duplicates(
    skills: Sequence[SkillRef],
    descriptions: Sequence[str],
    bodies: Sequence[str],
    threshold: float = DUPLICATE_THRESHOLD,
    limit: int = DUPLICATES_MAX,
) -> tuple[list[DuplicatePair], int]:
    """The pairs of `skills` whose descriptions or bodies are at least `threshold` alike, at
    most `limit` of them, most alike first, then by scope and name (the same input gives the
    same list); and how many pairs there are in all.

    Skills of identical text are compared once, as a group: a thousand users' identical
    copies cost one comparison, and their half a million pairs are counted, not listed."""
    descs = [shingles(d, DESCRIPTION_SHINGLE) for d in descriptions]
    texts = [shingles(b, BODY_SHINGLE) for b in bodies]
    groups: dict[tuple[frozenset[str], frozenset[str]], list[int]] = {}
    for i, key in enumerate(zip(descs, texts, strict=True)):
        groups.setdefault(key, []).append(i)
    keys = list(groups)
    members = [sorted(groups[k], key=lambda i: _order(skills[i])) for k in keys]
    by_desc = similar_pairs([k[0] for k in keys], threshold)
    by_body = similar_pairs([k[1] for k in keys], threshold)
    found = [
        (by_desc.get((u, v)) or jaccard(keys[u][0], keys[v][0]),
         by_body.get((u, v)) or jaccard(keys[u][1], keys[v][1]), u, v)
        for u, v in set(by_desc) | set(by_body)
    ]  # fmt: skip
    for u, (desc, body) in enumerate(keys):
        alike = (jaccard(desc, desc), jaccard(body, body))  # 1.0 unless empty
        if len(members[u]) > 1 and max(alike) >= threshold:
            found.append((*alike, u, u))

    def rank(f: tuple[float, float, int, int]) -> tuple[float, float, Ref, Ref]:
        first, second = skills[members[f[2]][0]], skills[members[f[3]][0]]
        return -max(f[0], f[1]), -min(f[0], f[1]), _order(first), _order(second)

    found.sort(key=rank)
    total = sum(
        len(members[u]) * (len(members[u]) - 1) // 2
        if u == v
        else len(members[u]) * len(members[v])
        for _, _, u, v in found
    )
    listed = itertools.islice(
        (
            (d, b, i, j)
            for d, b, u, v in found
            for i, j in (
                itertools.combinations(members[u], 2)
                if u == v
                else itertools.product(members[u], members[v])
            )
        ),
        limit,
    )
    out = []
    for d, b, i, j in listed:
        a, other = sorted((skills[i], skills[j]), key=_order)
        out.append(
            DuplicatePair(
                a=a,
                b=other,
                description_similarity=round(d, 3),
                body_similarity=round(b, 3),
                reason=_why(a, other, d, b, threshold),
            )
        )
    out.sort(key=lambda p: (-max(p.description_similarity, p.body_similarity),
                            _order(p.a), _order(p.b)))  # fmt: skip
    return out, total


def _order(ref: SkillRef) -> Ref:
    return str(ref.scope), ref.skill


def _why(a: SkillRef, b: SkillRef, desc: float, body: float, threshold: float) -> str:
    parts = []
    if desc >= threshold:
        parts.append(f"descriptions {desc:.0%} alike")
    if body >= threshold:
        parts.append(f"SKILL.md bodies {body:.0%} alike")
    same = " (the same name: an override that may no longer differ)" if a.skill == b.skill else ""
    return " and ".join(parts) + f"; merge them or tell them apart{same}"
