"""`skillfs serve --curate-idle` (docs/governance.md, "One runner per deployment"): an
agent is curated only once its workers have not used its skills for that long (usage
last-used times, as Harness's `minIdleHours`) and nobody committed to them: a skill used a
minute ago keeps its agent out of the run though nothing was committed for months; an agent
whose skills were last used days ago is curated."""

from __future__ import annotations

import time
from pathlib import Path

import skillfs
from skillfs import Scope
from skillfs.server.curator import CurateConfig, Curator
from tests.helpers import skill_md

DAY = 86400.0


def test_the_idle_signal_is_the_agents_use(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    now = time.time()
    with skillfs.open_store(url, clock=lambda: now - 200 * DAY) as old:
        for agent, skill in (("used-bot", "hot"), ("used-bot", "never"),
                             ("idle-bot", "long"), ("idle-bot", "never")):  # fmt: skip
            old.publish(Scope.shared(agent), skill, {"SKILL.md": skill_md(skill)})
    with skillfs.open_store(url) as store:
        store.usage.record("used-bot", {("alice", "hot"): 3}, {("alice", "hot"): now - 60})
        store.usage.record("idle-bot", {("bob", "long"): 1}, {("bob", "long"): now - 100 * DAY})
        assert Curator(store, CurateConfig(every=3600, idle=7200)).run_once()
        # in use a minute ago: not curated, though nothing was committed for 200 days
        assert store.skills(Scope.shared("used-bot")) == ["hot", "never"]
        # last used 100 days ago, never used: curated, both archived (idle 90 days or more)
        assert store.skills(Scope.shared("idle-bot")) == []
    with skillfs.open_store(url, clock=lambda: now + 3 * DAY) as later:  # three days on
        assert Curator(later, CurateConfig(every=3600, idle=7200)).run_once()
        assert later.skills(Scope.shared("used-bot")) == ["hot"]  # idle now: curated
