"""The lanes' reservations: upper lanes first, lower lanes' minimum shares and slot caps, the
slots and call sizes kept for an active upper lane, no free slot (fake time)."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from embedstream.core.governor import default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.reservations import LaneTerms, Reservations
from hypothesis import given
from hypothesis import strategies as st

ON, H, L = Priority.ONLINE, Priority.HIGH, Priority.LOW

# (high_ready, low_ready, low_in_flight, in_flight)
Call = tuple[bool, bool, int, int]
BOTH: Call = (True, True, 0, 0)
HIGH_ONLY: Call = (True, False, 0, 0)
LOW_ONLY: Call = (False, True, 0, 0)


class TwoLanes:
    """The high and low lanes as the Kafka processor has them (no online lane)."""

    def __init__(self, share: float, max_concurrency: int) -> None:
        self.rule = Reservations(default_lanes(share))
        self.max_concurrency = max_concurrency

    @property
    def low_slot_cap(self) -> int:
        return self.rule.slot_cap(L, self.max_concurrency, 0.0)

    def pick(
        self, high_ready: bool, low_ready: bool, low_in_flight: int, in_flight: int
    ) -> Priority | None:
        ready = {lane for lane, on in ((H, high_ready), (L, low_ready)) if on}
        counts = {H: in_flight - low_in_flight, L: low_in_flight}
        return self.rule.pick(ready, counts, self.max_concurrency, 0.0)


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
    assert TwoLanes(0.5, max_concurrency).pick(*call) == expected


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
    scheduler = TwoLanes(share, max_concurrency=2)
    assert [scheduler.pick(*call) for call in calls] == expected


def test_the_low_cap_follows_the_current_limit() -> None:
    lanes = TwoLanes(0.5, max_concurrency=4)
    assert lanes.low_slot_cap == 3
    lanes.max_concurrency = 2  # the adaptive limit halved
    assert lanes.low_slot_cap == 1
    assert lanes.pick(False, True, 1, 1) is None
    assert lanes.pick(True, True, 1, 3) is None  # in flight above the new limit
    lanes.max_concurrency = 3
    assert lanes.pick(False, True, 1, 1) == L


@pytest.mark.parametrize(
    "bad",
    [
        {"min_share": -0.1},
        {"min_share": 1.0},
        {"reserved_slots": -1},
        {"idle_slots": -1},
        {"lower_call_items": 0},
        {"recent_s": -1.0},
    ],
)
def test_invalid_terms(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LaneTerms(**bad)  # type: ignore[arg-type]


# Online keeps two slots and caps lower calls at 256 inputs while active; high keeps one.
THREE = {
    ON: LaneTerms(reserved_slots=2, lower_call_items=256),
    H: LaneTerms(idle_slots=1, reserved_slots=1, min_share=0.1),
    L: LaneTerms(min_share=0.1),
}


@pytest.mark.parametrize(
    ("online_seen", "now", "limit", "caps", "items"),
    [
        # lane: (online, high, low) slot caps; items: (high, low) call caps of 2048
        (None, 0.0, 8, (8, 8, 7), (2048, 2048)),  # no online traffic: high keeps its one
        (0.0, 0.5, 8, (8, 6, 5), (256, 256)),  # online active: two more kept, smaller calls
        (0.0, 1.0, 8, (8, 6, 5), (256, 256)),  # the window's edge counts as recent
        (0.0, 1.5, 8, (8, 8, 7), (2048, 2048)),  # over: back to high's one slot
        (0.0, 0.5, 4, (4, 2, 1), (256, 256)),  # low keeps its floor of one slot
        (0.0, 0.5, 2, (2, 1, 1), (256, 256)),  # every lane keeps one, even on two slots
        (0.0, 0.5, 1, (1, 1, 1), (256, 256)),
    ],
)
def test_an_active_online_lane_keeps_slots_and_smaller_calls(
    online_seen: float | None,
    now: float,
    limit: int,
    caps: tuple[int, int, int],
    items: tuple[int, int],
) -> None:
    rule = Reservations(THREE)
    if online_seen is not None:
        rule.saw(ON, online_seen)
    assert tuple(rule.slot_cap(lane, limit, now) for lane in (ON, H, L)) == caps
    assert (rule.call_cap(H, 2048, now), rule.call_cap(L, 2048, now)) == items
    assert rule.call_cap(ON, 2048, now) == 2048  # nothing above online
    assert rule.call_cap(L, 100, now) == 100  # never above the batch limit


def test_an_older_sighting_does_not_move_the_window_back() -> None:
    rule = Reservations(THREE)
    rule.saw(ON, 5.0)
    rule.saw(ON, 2.0)
    assert rule.active(ON, 5.9)
    assert not rule.active(ON, 6.1)


def test_a_share_never_claims_the_last_slot_and_beats_a_reservation() -> None:
    rule = Reservations({ON: LaneTerms(reserved_slots=2), L: LaneTerms(min_share=0.9)})
    rule.saw(ON, 0.0)
    assert rule.slot_cap(L, 8, 0.0) == 7  # ceil(0.9 x 8) = 8, short of the last slot


@pytest.mark.parametrize(
    ("ready", "in_flight", "expected"),
    [
        ({ON, H, L}, {}, ON),  # the top lane first
        ({H, L}, {}, H),
        ({L}, {}, L),
        ({ON, L}, {ON: 2, L: 5}, ON),  # online within its reservation: low is at its cap
        ({L}, {ON: 1, L: 5}, None),  # low capped at 8 - 2 - 1 = 5 while online is active
        ({H}, {H: 6}, None),  # high capped at 8 - 2 while online is active
        ({ON}, {ON: 7, L: 1}, None),  # full house
    ],
)
def test_picks_with_three_lanes(
    ready: set[Priority], in_flight: dict[Priority, int], expected: Priority | None
) -> None:
    rule = Reservations(THREE)
    rule.saw(ON, 0.0)
    assert rule.pick(ready, in_flight, 8, 0.5) == expected


def test_each_lower_lane_keeps_its_share_against_the_online_lane() -> None:
    rule = Reservations(THREE)
    picks = [rule.pick({ON, H, L}, {}, 8, 0.0) for _ in range(200)]
    # 0.1 of the picks each, short of at most one pick per lane whose turn fell together
    assert 19 <= picks.count(H) <= 20 and picks.count(L) == 20
    assert picks[:9] == [ON] * 9  # the credits take nine picks to reach one
    assert picks[9:11] == [L, H]  # both reached one together: the lowest goes first


@given(
    share=st.floats(min_value=0.0, max_value=0.99),
    steps=st.integers(min_value=1, max_value=400),
    max_concurrency=st.integers(min_value=2, max_value=8),
)
def test_low_share_while_both_lanes_are_backlogged(
    share: float, steps: int, max_concurrency: int
) -> None:
    scheduler = TwoLanes(share, max_concurrency)
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
    scheduler = TwoLanes(share, max_concurrency)
    in_flight: list[Priority] = []
    for high_ready, low_ready, completions, new_max in steps:
        for _ in range(min(completions, len(in_flight))):
            in_flight.pop(rng.randrange(len(in_flight)))
        if new_max:
            scheduler.max_concurrency = new_max
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
