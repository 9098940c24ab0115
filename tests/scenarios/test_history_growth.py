"""The 150 one-file commits of issue 28 §2 to a skill of 4,000 files, on etcd, where every
superseded revision counts until a compaction: each adds at most 20 KB to what etcd holds
(tests/engines/test_history_growth.py makes 20 on every engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

import skillfs
from support.history_growth import LIMIT, one_file_commits
from tests.stores import url_for


@pytest.fixture(params=["etcd"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request, request.param, tmp_path)


def test_150_one_file_commits_on_etcd_add_under_20_kb_each(store: skillfs.Store) -> None:
    per_commit, _ = one_file_commits(store, 150)
    assert per_commit <= LIMIT, f"{per_commit:.0f} bytes per one-file commit"
