"""`store.usage`: how often and how lately each (user, skill) was loaded, recorded in batches
off the hot path; which of a token's counts a view can see; operators' drops
(docs/governance.md, "Usage and last use", "Dropping usage")."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from skillfs.engines.base import USAGE_DROPS
from skillfs.errors import InvalidArgument
from skillfs.governance.ports import Reads, TokenCharges
from skillfs.model import Manifest, Scope, UsageDrop, UsageStat, usage_by_skill
from skillfs.model.names import check_id, check_skill_name
from skillfs.store.limits import check_usage
from skillfs.store.quotas import usage_bytes
from skillfs.store.who import check_message

log = logging.getLogger(__name__)

Key = tuple[str, str]


class Usage:
    """record, the counts read back, what a view sees, and drops."""

    def __init__(
        self, reads: Reads, who: Callable[[str | None], str], charges: TokenCharges
    ) -> None:
        self._reads = reads
        #: The actor a drop is recorded by: the one given, else the store's (`Committer.who`).
        self._who = who
        self._charges = charges

    def record(
        self,
        agent: str,
        counts: Mapping[Key, int],
        last_used: Mapping[Key, float] | None = None,
    ) -> None:
        """Add load counts keyed by (user, skill id), each checked by `check_usage`, and the
        time of each key's latest load (seconds since the epoch; now where not given). A
        stored last-used time only moves forward. A count of 0 records nothing (no load: no
        last use either), on every engine.

        The counters a token creates are charged to it (docs/security.md, "Quotas"): the
        batch as if every key were new, atomically against its quota (QuotaExceeded, nothing
        recorded), then what the keys it found already there did not take is given back; what
        the new ones took stays charged through GC, until an operator drops all of the
        agent's usage (`drop`)."""
        check_usage(counts, last_used)
        counts = {key: n for key, n in counts.items() if n}
        if counts:
            agent = check_id("agent", agent)
            now, times = self._reads.clock(), last_used or {}
            stamped = {key: times.get(key) or now for key in counts}
            domain, most = f"agents/{agent}", usage_bytes(counts)
            charge = self._charges.charge_token(domain, most, "this batch of usage counters")
            created = self._reads.engine.add_usage(agent, counts, stamped)
            if charge is not None:
                self._charges.settle_usage(domain, charge, usage_bytes(created))

    def seen(self, agent: str, keys: Iterable[Key], may_read: Callable[[Scope], bool]) -> set[Key]:
        """Of (user, skill id) `keys`, those whose skill the user's view holds live (neither
        deleted nor disabled, with a usable SKILL.md or a staged candidate) in a scope
        `may_read` allows: the user's own (user "" has none), the agent's shared scope, a
        market. What a token that may not administer the agent records is held to this
        (`skillfs.server.reader`), so its counts never name what no view shows. One read per
        scope, markets only for names the agent's scopes do not hold, until each is found."""
        wanted = set(keys)
        names = sorted({skill for _, skill in wanted})

        def held(scope: Scope, among: Sequence[str]) -> set[str]:
            found = self._reads.manifests(scope, among) if may_read(scope) and among else {}
            return {name for name, m in found.items() if _shown(m)}

        everyone = held(Scope.shared(agent), names)
        users = sorted({user for user, _ in wanted if user})
        own = {user: held(Scope.user(agent, user), names) for user in users}
        rest = [n for n in names if n not in everyone and not any(n in o for o in own.values())]
        for market in self._reads.markets() if rest else []:
            found = held(Scope.market(market), rest)
            everyone |= found
            rest = [n for n in rest if n not in found]
            if not rest:
                break
        return {(u, s) for u, s in wanted if s in everyone or (u and s in own[u])}

    def counts(self, agent: str) -> dict[Key, int]:
        """Load counts keyed by (user, skill id)."""
        return {key: stat.count for key, stat in self.detail(agent).items()}

    def detail(self, agent: str) -> dict[Key, UsageStat]:
        """Load count and last-used time keyed by (user, skill id) (last_used 0.0: loaded
        only before last-used times were recorded)."""
        return self.with_drops(agent)[0]

    def by_skill(self, agent: str) -> dict[str, UsageStat]:
        """Per skill id over its users: the counts summed, the latest last use."""
        return usage_by_skill(self.detail(agent))

    def drop(
        self,
        agent: str,
        *,
        users: Sequence[str] | None = None,
        skills: Sequence[str] | None = None,
        reason: str,
        actor: str | None = None,
    ) -> UsageDrop:
        """Forget an agent's usage counters — only `users`' ("" for loads counted without a
        user) and only `skills`' when given — recording who did it, why and when
        (`drops`). Curation then does not call a skill idle for longer than since the
        drop. Counts that arrive after the read are kept."""
        agent = check_id("agent", agent)
        picked_users = None if users is None else tuple(sorted(set(map(_user, users))))
        picked = None if skills is None else tuple(sorted(set(map(check_skill_name, skills))))
        if not check_message(reason).strip():
            raise InvalidArgument("say why the usage is dropped (reason=...): it is audited")
        record = UsageDrop(
            agent=agent,
            users=picked_users,
            skills=picked,
            at=self._reads.clock(),
            actor=self._who(actor),
            reason=reason,
        )
        done = self._reads.retrying(self._reads.engine.drop_usage, agent, record)
        if picked_users is None and picked is None:  # every counter gone: so is their charge
            self._charges.forget_usage(f"agents/{agent}")
        log.info(
            "usage dropped: agent %s, %d counters, by %s: %s",
            agent, done.dropped, done.actor, done.reason,
        )  # fmt: skip
        return done

    def drops(self, agent: str) -> list[UsageDrop]:
        """The drops of an agent's usage, newest first."""
        return self.with_drops(agent)[1]

    def with_drops(self, agent: str) -> tuple[dict[Key, UsageStat], list[UsageDrop]]:
        """`detail` and `drops` from one read."""
        held = self._reads.retrying(self._reads.engine.usage_detail, check_id("agent", agent))
        detail = {k: v for k, v in held.items() if k[0] != USAGE_DROPS}
        drops = [UsageDrop.model_validate_json(s) for u, s in held if u == USAGE_DROPS]
        return detail, sorted(drops, key=lambda d: d.at, reverse=True)


def _shown(m: Manifest) -> bool:
    """Whether a worker's view can hold this entry as a skill."""
    return not m.deleted and not m.disabled and (m.usable or m.candidate is not None)


def _user(user: str) -> str:
    return user if user == "" else check_id("user", user)
