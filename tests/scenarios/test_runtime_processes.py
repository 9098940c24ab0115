"""C3-C5 across processes, on SQLite, Redis and etcd: one process publishes, another's next
snapshot sees it, every time, over hundreds of rounds."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Market, Revision, Skills
from tests.runtime_helpers import counting_store
from tests.stores import url_for

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 150  # publishes per test: each round checks C3-C5 afresh (300 before; the same checks)

# Reads commands on stdin, publishes, and answers with the revision once the write returned.
PUBLISHER = r"""
import sys
import skillfs
from skillfs import Scope

store = skillfs.open_store(sys.argv[1])
scopes = {
    "user": Scope.user("bot", "alice"), "shared": Scope.shared("bot"),
    "market": Scope.market("team"), "other": Scope.user("bot", "bob"),
}

def files(skill, n):
    return {
        "SKILL.md": f"---\nname: {skill}\ndescription: Version {n}.\n---\nv{n}\n".encode(),
        "ref.md": f"v{n}".encode(),
    }

for line in sys.stdin:
    cmd, scope, skill, n = line.split()
    if cmd == "publish":
        commit = store.publish(scopes[scope], skill, files(skill, int(n)))
        print(commit.revision, flush=True)
    elif cmd == "burst":
        for i in range(1, int(n) + 1):
            commit = store.publish(scopes[scope], skill, files(skill, i))
        print(commit.revision, flush=True)
"""

TARGETS = [("user", "a"), ("shared", "s"), ("market", "m"), ("other", "b")]


@pytest.fixture(params=["sqlite", "redis", "etcd"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, request.param, tmp_path)


class Publisher:
    def __init__(self, url: str) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PUBLISHER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def send(self, *words: object) -> Revision:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"publisher died (exit {self.proc.poll()})"
        return Revision.parse(line.strip())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def publisher(url: str) -> Iterator[Publisher]:
    p = Publisher(url)
    yield p
    p.close()


def expect(snap: skillfs.Snapshot, skill: str, n: int) -> None:
    """The snapshot holds version n of the skill, every file of that version (C1, C4)."""
    assert snap.skill(skill).description == f"Version {n}."
    assert snap.load(skill, "SKILL.md").endswith(f"\nv{n}\n")
    assert snap.load(skill, "ref.md") == f"v{n}"


@pytest.mark.slow
def test_next_snapshot_sees_every_publish_of_another_process(
    url: str, publisher: Publisher, request: pytest.FixtureRequest
) -> None:
    store, counter = counting_store(url)
    skills = Skills(store, "bot", "alice", [Market("team")])
    request.addfinalizer(skills.close)
    me = threading.get_ident()
    versions: dict[str, int] = {}
    prev = skills.snapshot()
    for n in range(1, ROUNDS + 1):
        scope, skill = TARGETS[n % len(TARGETS)]
        rev = publisher.send("publish", scope, skill, n)
        warm = n % 10 == 0 and scope != "other"
        if warm:  # let the watch bring it first: the step then costs one round trip
            follower = skills.followers[1 if scope == "market" else 0]
            assert follower.wait_for(rev, 10.0), f"round {n}: the watch did not deliver"
            counter.clear()
        snap = skills.snapshot()
        if scope == "other":
            assert snap.token == prev.token  # bob's edit does not touch alice's view
        else:
            versions[skill] = n
        for s, v in versions.items():
            expect(snap, s, v)  # C3: the write just acknowledged, and all before it
        if warm:
            assert counter.names(me) == ["revisions"], f"round {n}"
        a, b = prev.revisions["agents/bot"], snap.revisions["agents/bot"]
        if a is not None and b is not None:
            assert a.epoch == b.epoch and a.counter <= b.counter  # C5
        for s, v in prev_versions(prev).items():
            expect(prev, s, v)  # C4: the older snapshot still reads its own versions
        prev = snap


def prev_versions(snap: skillfs.Snapshot) -> dict[str, int]:
    return {s.id: int(s.description.split()[1].rstrip(".")) for s in snap.skills}


@pytest.mark.slow
def test_snapshots_stay_consistent_and_monotonic_during_a_burst(
    url: str, publisher: Publisher, request: pytest.FixtureRequest
) -> None:
    skills = Skills(url, "bot", "alice")
    request.addfinalizer(skills.close)
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def steps() -> None:
        try:
            while not done.is_set():
                snap = skills.snapshot()
                if snap.skills:
                    n = prev_versions(snap)["a"]
                    expect(snap, "a", n)
                    seen.append(n)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=steps)
    t.start()
    try:
        publisher.send("burst", "user", "a", ROUNDS)
    finally:
        done.set()
        t.join()
    assert not errors, errors[0]
    assert seen == sorted(seen)  # C5
    expect(skills.snapshot(), "a", ROUNDS)  # C3 after the last acknowledged write
