"""The usage recorder writes its pending counts at interpreter exit, once: a forked child
that exits normally does not write its copy of its parent's counts again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import skillfs

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import skillfs
    from skillfs.runtime.usage import recorder_for

    store = skillfs.open_store(sys.argv[1])
    recorder = recorder_for(store, "bot")
    recorder.interval = 3600  # only the exit writes
    recorder.add("alice", "notes")
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a normal exit: the interpreter's exit handlers run in the child
    os.waitpid(pid, 0)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_write_its_parents_counts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", SCRIPT, url], env=env, timeout=60, check=True, capture_output=True
    )
    store = skillfs.open_store(url)
    try:
        assert store.usage.counts("bot") == {("alice", "notes"): 1}
    finally:
        store.close()
