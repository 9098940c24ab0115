"""`store.usage`: how often and how lately each (user, skill) was loaded, recorded in batches
off the hot path (docs/governance.md, "Usage")."""

from __future__ import annotations

from collections.abc import Mapping

from skillfs.governance.ports import Reads
from skillfs.model import UsageStat, usage_by_skill
from skillfs.model.names import check_id
from skillfs.store.limits import check_usage


class Usage:
    """record, and the counts read back."""

    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    def record(
        self,
        agent: str,
        counts: Mapping[tuple[str, str], int],
        last_used: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        """Add load counts keyed by (user, skill id), each checked by `check_usage`, and the
        time of each key's latest load (seconds since the epoch; now where not given). A
        stored last-used time only moves forward. A count of 0 records nothing (no load: no
        last use either), on every engine."""
        check_usage(counts, last_used)
        counts = {key: n for key, n in counts.items() if n}
        if counts:
            now, times = self._reads.clock(), last_used or {}
            stamped = {key: times.get(key) or now for key in counts}
            self._reads.engine.add_usage(check_id("agent", agent), counts, stamped)

    def counts(self, agent: str) -> dict[tuple[str, str], int]:
        """Load counts keyed by (user, skill id)."""
        return self._reads.retrying(self._reads.engine.usage, check_id("agent", agent))

    def detail(self, agent: str) -> dict[tuple[str, str], UsageStat]:
        """Load count and last-used time keyed by (user, skill id) (last_used 0.0: loaded
        only before last-used times were recorded)."""
        return self._reads.retrying(self._reads.engine.usage_detail, check_id("agent", agent))

    def by_skill(self, agent: str) -> dict[str, UsageStat]:
        """Per skill id over its users: the counts summed, the latest last use."""
        return usage_by_skill(self.detail(agent))
