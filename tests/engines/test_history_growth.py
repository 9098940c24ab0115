"""History grows by what a commit changed, not by the whole file table (issue 28 §2): one-file
commits to a skill of 4,000 files add at most 20 KB each to what the engine holds, on every
engine — on etcd its superseded revisions included (support/history_growth.py). Twenty
commits per engine here (what a commit adds does not change with their number);
bench/history.py makes the 150 the issue names on every engine (docs/benchmarks.md,
"History growth")."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from support.history_growth import LIMIT, one_file_commits
from tests.stores import url_for

#: Each engine once (a sentinel's and an etcd cluster's bytes are their single node's).
TOPOLOGIES = ["memory", "sqlite", "redis", "redis-cluster", "etcd", "postgres"]
COMMITS = 20


@pytest.fixture(params=TOPOLOGIES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, request.param, tmp_path)


def test_one_file_commits_to_4000_files_add_under_20_kb_each(store: skillfs.Store) -> None:
    per_commit, _ = one_file_commits(store, COMMITS, texts=40)  # 40 blobs: a fast setup
    assert per_commit <= LIMIT, f"{per_commit:.0f} bytes per one-file commit"
