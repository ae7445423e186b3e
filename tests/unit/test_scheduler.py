"""Lane scheduling: high first, low's minimum share, low's slot cap, no free slot."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from embedstream.core.lanes import Priority
from embedstream.core.scheduler import LaneScheduler
from hypothesis import given
from hypothesis import strategies as st

H, L = Priority.HIGH, Priority.LOW

# (high_ready, low_ready, low_in_flight, in_flight)
Call = tuple[bool, bool, int, int]
BOTH: Call = (True, True, 0, 0)
HIGH_ONLY: Call = (True, False, 0, 0)
LOW_ONLY: Call = (False, True, 0, 0)


@pytest.mark.parametrize(
    ("max_concurrency", "call", "expected"),
    [
        (4, BOTH, H),  # high first (credit 0.5 < 1)
        (4, HIGH_ONLY, H),
        (4, LOW_ONLY, L),
        (4, (False, False, 0, 0), None),  # nothing ready
        (4, (True, True, 1, 4), None),  # no free slot
        (4, (False, True, 0, 4), None),
        (4, (False, True, 3, 3), None),  # low holds its cap of max - 1 slots
        (4, (True, True, 3, 3), H),  # ... and the last slot is high's
        (4, (False, True, 2, 3), L),  # under the cap
        (2, (False, True, 1, 1), None),  # cap 1 of 2
        (2, (True, False, 1, 1), H),  # high never waits for a low batch with two slots
        (1, LOW_ONLY, L),  # one slot: low may take it ...
        (1, (True, False, 1, 1), None),  # ... and high then waits behind that one batch
    ],
)
def test_single_pick(max_concurrency: int, call: Call, expected: Priority | None) -> None:
    assert LaneScheduler(0.5, max_concurrency).pick(*call) == expected


@pytest.mark.parametrize(
    ("share", "calls", "expected"),
    [
        (0.5, [BOTH] * 6, [H, L, H, L, H, L]),
        (0.25, [BOTH] * 8, [H, H, H, L, H, H, H, L]),
        (0.75, [BOTH] * 8, [H, L, L, L, H, L, L, L]),
        (0.0, [BOTH] * 5, [H] * 5),  # no share: low only runs when high is idle
        (0.1, [BOTH] * 10, [H] * 9 + [L]),  # 10 x 0.1 reaches 1 despite float rounding
        # no credit while high is alone: low collects no debt to burst with later
        (0.5, [HIGH_ONLY] * 3 + [BOTH] * 2, [H, H, H, H, L]),
        # no credit while low is capped (max 2: cap 1)
        (0.5, [(True, True, 1, 1)] * 3 + [BOTH] * 2, [H, H, H, H, L]),
        # a low pick while high is idle spends no credit
        (0.5, [BOTH, LOW_ONLY, BOTH, BOTH], [H, L, L, H]),
        # a full house changes nothing
        (0.5, [BOTH, (True, True, 0, 2), BOTH], [H, None, L]),
    ],
)
def test_pick_sequences(share: float, calls: list[Call], expected: list[Priority | None]) -> None:
    scheduler = LaneScheduler(share, max_concurrency=2)
    assert [scheduler.pick(*call) for call in calls] == expected


def test_set_max_concurrency_moves_the_low_cap() -> None:
    scheduler = LaneScheduler(0.5, max_concurrency=4)
    assert scheduler.low_slot_cap == 3
    scheduler.set_max_concurrency(2)  # the adaptive limit halved
    assert (scheduler.max_concurrency, scheduler.low_slot_cap) == (2, 1)
    assert scheduler.pick(False, True, 1, 1) is None
    assert scheduler.pick(True, True, 1, 3) is None  # in flight above the new limit
    scheduler.set_max_concurrency(3)
    assert scheduler.pick(False, True, 1, 1) == L


@pytest.mark.parametrize(("share", "max_concurrency"), [(-0.1, 2), (1.0, 2), (0.5, 0)])
def test_invalid_settings(share: float, max_concurrency: int) -> None:
    with pytest.raises(ValueError):
        LaneScheduler(share, max_concurrency)


@pytest.mark.parametrize("call", [(True, True, 2, 1), (True, True, -1, 0)])
def test_invalid_counts(call: Call) -> None:
    with pytest.raises(ValueError):
        LaneScheduler(0.5, 4).pick(*call)


def test_set_max_concurrency_rejects_zero() -> None:
    with pytest.raises(ValueError):
        LaneScheduler(0.5, 4).set_max_concurrency(0)


@given(
    share=st.floats(min_value=0.0, max_value=0.99),
    steps=st.integers(min_value=1, max_value=400),
    max_concurrency=st.integers(min_value=2, max_value=8),
)
def test_low_share_while_both_lanes_are_backlogged(
    share: float, steps: int, max_concurrency: int
) -> None:
    scheduler = LaneScheduler(share, max_concurrency)
    picks = [scheduler.pick(*BOTH) for _ in range(steps)]
    assert picks.count(L) >= share * steps - 1 - 1e-9  # share >= min_low_share - 1/N
    if share <= 0.5:
        assert (L, L) not in set(pairwise(picks))


@st.composite
def traffic(draw: st.DrawFn) -> list[tuple[bool, bool, int, int]]:
    """Steps of (high_ready, low_ready, completions to drop, new max_concurrency or 0)."""
    return draw(
        st.lists(
            st.tuples(
                st.booleans(),
                st.booleans(),
                st.integers(min_value=0, max_value=3),
                st.sampled_from([0, 0, 0, 1, 2, 3, 5]),
            ),
            max_size=200,
        )
    )


@given(
    share=st.floats(min_value=0.0, max_value=0.99),
    max_concurrency=st.integers(min_value=1, max_value=6),
    steps=traffic(),
    rng=st.randoms(use_true_random=False),
)
def test_rules_hold_under_random_traffic(
    share: float,
    max_concurrency: int,
    steps: list[tuple[bool, bool, int, int]],
    rng: random.Random,
) -> None:
    scheduler = LaneScheduler(share, max_concurrency)
    in_flight: list[Priority] = []
    for high_ready, low_ready, completions, new_max in steps:
        for _ in range(min(completions, len(in_flight))):
            in_flight.pop(rng.randrange(len(in_flight)))
        if new_max:
            scheduler.set_max_concurrency(new_max)
        low_in_flight = in_flight.count(L)
        picked = scheduler.pick(high_ready, low_ready, low_in_flight, len(in_flight))
        slot_free = len(in_flight) < scheduler.max_concurrency
        low_may = low_ready and low_in_flight < scheduler.low_slot_cap
        if not high_ready:
            # only low ready: low gets every slot it may take, and nothing else happens
            assert picked == (L if slot_free and low_may else None)
        elif not low_may:
            assert picked == (H if slot_free else None)  # only high: low gets nothing
        else:
            assert picked in ((H, L) if slot_free else (None,))
        if picked is not None:
            in_flight.append(picked)
        if picked == L:
            # low never dispatches past its cap, so with two or more slots one is left for high
            assert in_flight.count(L) <= max(1, scheduler.max_concurrency - 1)
