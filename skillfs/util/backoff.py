"""The pause between two tries of a write that lost a race: doubling from 1 ms up to 50 ms,
jittered, so writers racing for one skill do not retry in lockstep."""

from __future__ import annotations

import random
import time


def pause(attempt: int) -> None:
    """Sleep after the `attempt`-th lost race (0 for the first)."""
    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
