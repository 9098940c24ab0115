"""Durations as curation's options say them (skillfs/util/durations.py): parsed from `30d`,
`2h`, `30m`, `45s`, `1w` or seconds, said back to their second unit, and bad ones refused."""

from __future__ import annotations

import pytest

from skillfs.errors import InvalidArgument
from skillfs.util.durations import format_duration, parse_duration

DAY = 86400.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * DAY), ("2h", 7200.0), ("30m", 1800.0), ("45s", 45.0), ("1w", 7 * DAY),
     ("1.5h", 5400.0), ("90", 90.0), (12, 12.0)],
)  # fmt: skip
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_duration_is_said_to_its_second_unit() -> None:
    said = {s: format_duration(s) for s in (0.5, 61, 3600, 129600, 200 * DAY, 86399)}
    assert said == {
        0.5: "0 seconds", 61: "1 minute 1 second", 3600: "1 hour", 129600: "1 day 12 hours",
        200 * DAY: "200 days", 86399: "23 hours 59 minutes",
    }  # fmt: skip


@pytest.mark.parametrize("text", ["", "7x", "d", "-1h", "nan", "inf", "0s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidArgument, match="such as 30d, 2h, 30m or 45s"):
        parse_duration(text, "--curate-every")
