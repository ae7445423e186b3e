from __future__ import annotations

import pytest
from embedstream.core.flow import fetch_budget, partitions_to_pause

HIGH = {"h0", "h1"}
LOW = {"l0", "l1"}
ALL = HIGH | LOW


@pytest.mark.parametrize(
    ("held", "blocked", "paused", "expected"),
    [
        (0, False, set(), set()),
        (79, False, set(), set()),
        (80, False, set(), LOW),  # low stops at 80% so high always finds room
        (99, False, LOW, LOW),
        (100, False, LOW, ALL),
        (60, False, ALL, ALL),  # high resumes below 50 (hysteresis)...
        (45, False, ALL, LOW),  # ...low only below 40
        (49, False, ALL, LOW),
        (39, False, LOW, set()),
        (0, True, set(), LOW),  # provider blocked: low first...
        (50, True, LOW, ALL),  # ...then high once half full
    ],
)
def test_partitions_to_pause(
    held: int, blocked: bool, paused: set[str], expected: set[str]
) -> None:
    result = partitions_to_pause(
        held=held, limit=100, provider_blocked=blocked, assigned=ALL, paused=paused,
        is_high=lambda p: p in HIGH,
    )  # fmt: skip
    assert result == expected


@pytest.mark.parametrize(
    ("held", "low_fetching", "expected"),
    [(0, True, 80), (0, False, 100), (70, True, 10), (90, True, 0), (90, False, 10), (0, True, 80)],
)
def test_fetch_budget(held: int, low_fetching: bool, expected: int) -> None:
    assert fetch_budget(held=held, limit=100, low_fetching=low_fetching, max_poll=500) == expected


def test_fetch_budget_respects_max_poll() -> None:
    assert fetch_budget(held=0, limit=10_000, low_fetching=False, max_poll=500) == 500
