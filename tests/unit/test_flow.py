from __future__ import annotations

import pytest
from embedstream.core.flow import fetch_budget, partitions_to_pause

HIGH = {"h0", "h1"}
LOW = {"l0", "l1"}
ALL = HIGH | LOW


@pytest.mark.parametrize(
    ("held", "high_held", "blocked", "paused", "expected"),
    [
        (0, 0, False, set(), set()),
        (79, 0, False, set(), set()),
        (80, 0, False, set(), LOW),  # low stops at 80% so high always finds room
        (99, 0, False, LOW, LOW),
        (100, 20, False, LOW, ALL),  # full, high's reserve used up: high too
        (60, 10, False, ALL, ALL),  # high resumes below 50 (hysteresis)...
        (45, 10, False, ALL, LOW),  # ...low only below 40
        (49, 10, False, ALL, LOW),
        (39, 0, False, LOW, set()),
        # Low holds it all (its results waiting for the broker): high keeps its reserve...
        (100, 0, False, LOW, LOW),
        (160, 19, False, LOW, LOW),
        (160, 20, False, LOW, ALL),  # ...until high's own holding reaches it
        (160, 11, False, ALL, ALL),  # and resumes below half of it
        (160, 9, False, ALL, LOW),
        (0, 0, True, set(), LOW),  # provider blocked: low first...
        (50, 0, True, LOW, ALL),  # ...then high once half full
    ],
)
def test_partitions_to_pause(
    held: int, high_held: int, blocked: bool, paused: set[str], expected: set[str]
) -> None:
    result = partitions_to_pause(
        held=held, high_held=high_held, limit=100, provider_blocked=blocked, assigned=ALL,
        paused=paused, is_high=lambda p: p in HIGH,
    )  # fmt: skip
    assert result == expected


@pytest.mark.parametrize(
    ("held", "high_held", "low_fetching", "expected"),
    [
        (0, 0, True, 80),
        (0, 0, False, 100),
        (70, 0, True, 10),
        (90, 0, True, 0),
        (90, 10, False, 10),  # high holds 10 of the 90: the limit's room and the reserve's agree
        (90, 0, False, 20),  # low holds 90, over its share: high still has its whole reserve
        # Low's results hold more than the limit: high records still come, within the reserve.
        (160, 0, False, 20),
        (160, 15, False, 5),
        (160, 25, False, 0),
    ],
)
def test_fetch_budget(held: int, high_held: int, low_fetching: bool, expected: int) -> None:
    budget = fetch_budget(
        held=held, high_held=high_held, limit=100, low_fetching=low_fetching, max_poll=500
    )
    assert budget == expected


def test_fetch_budget_respects_max_poll() -> None:
    assert fetch_budget(held=0, high_held=0, limit=10_000, low_fetching=False, max_poll=500) == 500


@pytest.mark.parametrize("limit", [16_384, 13_107, 5_000, 101, 7, 1])
def test_a_buffer_too_full_for_a_low_fetch_pauses_low(limit: int) -> None:
    """Where the budget leaves low nothing, low is paused, so the budget counts high's room
    (0.8 x 16,384 is 13,107.2: a pause threshold above the budget's 13,107 once let a full
    buffer fetch nothing at all, high included)."""
    held = next(h for h in range(limit + 1) if fetch_budget(
        held=h, high_held=0, limit=limit, low_fetching=True, max_poll=limit) == 0)  # fmt: skip
    paused = partitions_to_pause(
        held=held, high_held=0, limit=limit, provider_blocked=False, assigned=ALL, paused=set(),
        is_high=lambda p: p in HIGH,
    )  # fmt: skip
    assert paused == LOW
    assert fetch_budget(held=held, high_held=0, limit=limit, low_fetching=False, max_poll=limit) > 0
