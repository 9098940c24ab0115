"""C4 for manifests read by separate calls: `find_cut` on synthetic change logs, and the
follower when a two-scope commit lands exactly between its two scope loads."""

from __future__ import annotations

import threading
from typing import Any, cast

from skillfs import Put, Revision, Scope, Skills, Store
from skillfs.engines.base import Engine
from skillfs.model import Change
from skillfs.runtime.cut import find_cut
from tests.runtime_helpers import CountingEngine, md, memory_store

SHARED = Scope.shared("bot")
ALICE = Scope.user("bot", "alice")
BOB = Scope.user("bot", "bob")
E = "epoch"


def rev(n: int) -> Revision:
    return Revision(epoch=E, counter=n)


def put(n: int, scope: Scope, skill: str, version: int) -> Change:
    return Change(revision=rev(n), op="put", scope=scope, skill=skill, version=version)


TRACKED = {SHARED, ALICE}


def test_cached_state_untouched_by_the_log_is_exact_at_its_end() -> None:
    log = [put(11, BOB, "b", 1), put(12, BOB, "b", 2)]  # another user's edits only
    assert find_cut(rev(10), log, TRACKED, {}, [], rev(12), rev(12)) == rev(12)


def test_cached_skills_changed_by_the_log_are_read_again() -> None:
    log = [put(11, SHARED, "s", 4), put(12, BOB, "b", 2)]
    assert find_cut(rev(10), log, TRACKED, {}, [], rev(12), rev(12)) == {(SHARED, "s")}
    # without a floor the cached state is still exact before the change
    assert find_cut(rev(10), log, TRACKED, {}, [], None, rev(12)) == rev(10)


def test_reloaded_skill_is_labelled_at_the_change_that_wrote_it() -> None:
    log = [put(11, SHARED, "s", 4), put(12, BOB, "b", 2)]
    loaded = {(SHARED, "s"): 4}
    assert find_cut(rev(10), log, TRACKED, loaded, [], rev(12), rev(12)) == rev(12)


def test_half_of_a_two_scope_commit_is_never_a_cut() -> None:
    # commit 11 wrote shared/s v4 and alice/a v7; alice's scope was read before it,
    # shared's after it
    log = [put(11, SHARED, "s", 4), put(11, ALICE, "a", 7)]
    loaded = {(SHARED, "s"): 4, (ALICE, "a"): 6}
    assert find_cut(rev(10), log, TRACKED, loaded, [SHARED, ALICE], rev(10), rev(11)) == {
        (ALICE, "a")
    }
    loaded[(ALICE, "a")] = 7  # read again
    assert find_cut(rev(10), log, TRACKED, loaded, [SHARED, ALICE], rev(10), rev(11)) == rev(11)


def test_a_load_newer_than_the_floor_moves_the_label_forward() -> None:
    # the step read revision 10; commit 13 landed before the load of s
    log = [put(13, SHARED, "s", 5)]
    loaded = {(SHARED, "s"): 5}
    assert find_cut(rev(10), log, TRACKED, loaded, [], rev(10), rev(13)) == rev(13)


def test_a_skill_absent_from_a_whole_scope_load_is_live_until_created() -> None:
    log = [put(11, ALICE, "new", 1)]
    assert find_cut(rev(10), log, TRACKED, {}, [ALICE], rev(10), rev(11)) == rev(10)
    assert find_cut(rev(10), log, TRACKED, {}, [ALICE], rev(11), rev(11)) == {(ALICE, "new")}


# ------------------------------------------------------------------ the follower, racing


class CommitBetweenLoads(CountingEngine):
    """Runs `hook` once, right after the first `load_scope` returns."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.hook: Any = None

    def load_scope(self, scope: Scope) -> Any:
        out = self.__getattr__("load_scope")(scope)
        hook, self.hook = self.hook, None
        if hook is not None and threading.current_thread() is threading.main_thread():
            hook()
        return out


def test_a_two_scope_commit_between_the_loads_is_seen_whole_or_not_at_all() -> None:
    writer = memory_store()  # another client of the same store
    engine = CommitBetweenLoads(writer.engine)
    store = Store(cast(Engine, engine))
    store.publish(SHARED, "s", {"SKILL.md": md("s", "one")})
    store.publish(ALICE, "a", {"SKILL.md": md("a", "one")})

    def both() -> None:
        writer.commit(
            [
                Put(SHARED, "s", {"SKILL.md": md("s", "two")}),
                Put(ALICE, "a", {"SKILL.md": md("a", "two")}),
            ]
        )

    engine.hook = both
    engine.clear()
    snap = Skills(store, "bot", "alice").snapshot()
    seen = {s.id: s.description for s in snap.skills}
    assert seen in ({"s": "one", "a": "one"}, {"s": "two", "a": "two"})
    assert seen == {"s": "two", "a": "two"}  # the second read brought the rest
    r = snap.revisions["agents/bot"]
    assert r is not None and r == store.revision("bot")  # labelled with the commit's revision
    loads = [
        (c.name, c.args)
        for c in engine.calls
        if c.name.startswith("load")
        and c.args[0] in (SHARED, ALICE)
        and c.thread == threading.get_ident()
    ]
    assert loads[:2] == [("load_scope", (SHARED,)), ("load_scope", (ALICE,))]
    assert loads[2:] == [("load_skills", (SHARED, ["s"]))]  # only what fell behind
