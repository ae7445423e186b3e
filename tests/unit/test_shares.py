"""Fair shares between the sources of a lane (core/shares.py): tables and properties."""

from __future__ import annotations

from collections import Counter

import pytest
from embedstream.core.shares import (
    buffer_shares,
    joining_level,
    levels_after,
    share_order,
    sources_to_pause,
    sources_under_share,
    trickle_sources,
)
from embedstream.errors import ConfigError
from embedstream.settings import load_settings
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("demand", "weights", "capacity", "shares"),
    [
        ({"a": 100, "b": 100}, {}, 100, {"a": 50, "b": 50}),  # equal by default
        ({"a": 100, "b": 100}, {"a": 3}, 100, {"a": 75, "b": 25}),  # by weight
        ({"a": 100, "b": 10}, {}, 100, {"a": 90, "b": 10}),  # b's unused part goes to a
        ({"a": 100}, {}, 100, {"a": 100}),  # alone: everything
        ({"a": 100, "b": 0}, {}, 100, {"a": 100, "b": 0}),  # idle: costs nothing
        ({"a": 100, "b": 100, "c": 5}, {"a": 2}, 95, {"a": 60, "b": 30, "c": 5}),
        ({}, {}, 100, {}),
    ],
)
def test_buffer_shares(
    demand: dict[str, float], weights: dict[str, float], capacity: float, shares: dict[str, float]
) -> None:
    assert buffer_shares(demand, weights, capacity) == pytest.approx(shares)


@given(
    st.dictionaries(st.sampled_from("abcde"), st.integers(0, 1000), min_size=1),
    st.dictionaries(st.sampled_from("abcde"), st.floats(0.1, 10)),
    st.integers(1, 2000),
)
def test_shares_never_exceed_capacity_nor_demand(
    demand: dict[str, int], weights: dict[str, float], capacity: int
) -> None:
    shares = buffer_shares(demand, weights, capacity)
    assert sum(shares.values()) <= capacity + 1e-6
    assert all(shares[s] <= demand[s] + 1e-6 for s in demand)
    # Work-conserving: either every demand is met or the capacity is used up.
    assert sum(shares.values()) == pytest.approx(min(capacity, sum(demand.values())))


@pytest.mark.parametrize(
    ("held", "wanting", "weights", "paused", "expected"),
    [
        # A's flood holds more than half while B wants more: A pauses, B keeps fetching.
        ({"a": 600, "b": 10}, {"a", "b"}, {}, set(), {"a"}),
        # B has nothing more to fetch: A may use everything.
        ({"a": 900, "b": 10}, {"a"}, {}, set(), set()),
        # Alone in the lane: never paused by shares.
        ({"a": 1000}, {"a"}, {}, set(), set()),
        # Under its share: fetching.
        ({"a": 400, "b": 10}, {"a", "b"}, {}, set(), set()),
        # Weighted: a has 3/4 of the buffer, so 700 is within it.
        ({"a": 700, "b": 10}, {"a", "b"}, {"a": 3}, set(), set()),
        ({"a": 800, "b": 10}, {"a", "b"}, {"a": 3}, set(), {"a"}),
        # Hysteresis: paused a stays paused until below half its share (250 of 500).
        ({"a": 300, "b": 10}, {"a", "b"}, {}, {"a"}, {"a"}),
        ({"a": 200, "b": 10}, {"a", "b"}, {}, {"a"}, set()),
        # B holding its share too: both are within, nobody starved.
        ({"a": 500, "b": 500}, {"a", "b"}, {}, set(), set()),
    ],
)
def test_sources_to_pause(
    held: dict[str, int],
    wanting: set[str],
    weights: dict[str, float],
    paused: set[str],
    expected: set[str],
) -> None:
    assert sources_to_pause(held, wanting, weights, 1000, paused) == expected


@pytest.mark.parametrize(
    ("queued", "weights", "levels", "size", "taken"),
    [
        ([("a", 5000), ("b", 3)], {}, {}, 256, {"a": 253, "b": 3}),  # the trickle rides along
        ([("a", 5000), ("b", 5000)], {}, {}, 100, {"a": 50, "b": 50}),
        ([("a", 5000), ("b", 5000)], {"b": 3}, {}, 100, {"a": 25, "b": 75}),
        ([("a", 5000), ("b", 5000)], {"a": 3}, {}, 256, {"a": 192, "b": 64}),  # 3:1
        ([("a", 5000), ("b", 5000)], {}, {"a": 60}, 100, {"a": 20, "b": 80}),  # catches b up
        ([("a", 0), ("b", 7)], {}, {"b": 1e9}, 10, {"b": 7}),  # an idle source's turn goes on
        ([("a", 5), ("b", 5), ("c", 5)], {}, {}, 15, {"a": 5, "b": 5, "c": 5}),
        ([("a", 9), ("b", 2), ("c", 9)], {}, {}, 12, {"a": 5, "b": 2, "c": 5}),  # b's rest split
        ([], {}, {}, 10, {}),
    ],
)
def test_share_order_splits_a_call_by_weighted_deficit(
    queued: list[tuple[str, int]],
    weights: dict[str, float],
    levels: dict[str, float],
    size: int,
    taken: dict[str, int],
) -> None:
    assert Counter(share_order(queued, levels, weights, size)) == taken


@pytest.mark.parametrize(
    ("queued", "weights", "levels", "order"),
    [
        ([("a", 9), ("b", 9)], {}, {}, "ababab"),  # equal levels: the first listed first
        ([("b", 9), ("a", 9)], {}, {}, "bababa"),
        ([("a", 9), ("b", 9)], {"a": 3}, {}, "abaaab"),  # a's 2nd and 3rd at 1/3, 2/3; b's at 1
        ([("a", 9), ("b", 1)], {}, {"a": 2.0}, "baaaaa"),  # b is behind: first
    ],
)
def test_share_order_is_the_one_at_a_time_pick(
    queued: list[tuple[str, int]], weights: dict[str, float], levels: dict[str, float], order: str
) -> None:
    assert "".join(share_order(queued, levels, weights, len(order))) == order


@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=4),
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=4, max_size=4),
    st.integers(1, 60),
)
def test_share_order_matches_picking_one_at_a_time(
    counts: list[int], weights_list: list[float], size: int
) -> None:
    names = "abcd"[: len(counts)]
    weights = dict(zip(names, weights_list, strict=False))
    queued = list(zip(names, counts, strict=True))
    left = dict(queued)
    given_: dict[str, float] = dict.fromkeys(names, 0.0)
    slow: list[str] = []
    for _ in range(size):
        ready = [s for s in names if left[s] > 0]
        if not ready:
            break
        pick = min(ready, key=lambda s: (given_[s] / weights[s], names.index(s)))
        slow.append(pick)
        left[pick] -= 1
        given_[pick] += 1
    fast = share_order(queued, {}, weights, size)
    assert Counter(fast) == Counter(slow)
    assert fast[: size // 2] == share_order(queued, {}, weights, size // 2)  # prefix-consistent


def test_levels_after_counts_inputs_over_weight_and_joiners_get_the_lowest() -> None:
    levels = levels_after({"a": 1.0}, ["a", "b", "b", "b"], {"b": 3})
    assert levels == {"a": 2.0, "b": 1.0}
    assert joining_level(levels) == 1.0
    assert joining_level({}) == 0.0


@pytest.mark.parametrize(
    ("held", "reserve", "paused", "expected"),
    [
        # B idle keeps room for one poll: A's flood pauses short of the lane's limit...
        ({"a": 900, "b": 0}, 100.0, set(), {"a"}),
        ({"a": 899, "b": 0}, 100.0, set(), set()),
        ({"a": 950, "b": 50}, 100.0, set(), {"a"}),  # ...also while B holds some of it
        ({"a": 600, "b": 0}, 100.0, {"a"}, {"a"}),  # paused until half its share (450)
        ({"a": 449, "b": 0}, 100.0, {"a"}, set()),
        # B's reserve taken by its own records: nobody is starved.
        ({"a": 900, "b": 100}, 100.0, set(), set()),
        # Without a reserve, an idle B leaves A the whole lane (the lane's limit applies).
        ({"a": 1000, "b": 0}, 0.0, set(), set()),
    ],
)
def test_an_idle_source_keeps_room_for_its_next_poll(
    held: dict[str, int], reserve: float, paused: set[str], expected: set[str]
) -> None:
    assert sources_to_pause(held, {"a"}, {}, 1000, paused, reserve=reserve) == expected


def test_a_trickle_without_lag_is_never_paused_by_a_flood() -> None:
    # B's records come one at a time: between them it has no lag, and holds its few items.
    assert sources_to_pause({"a": 900, "b": 2}, {"a"}, {}, 1000, {"b"}) == set()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("orders", "expected topic=weight"),
        ("orders=0", "must be > 0"),
        ("orders=-1", "must be > 0"),
        ("orders=x", "not a number"),
        ("orders=inf", "must be > 0"),
        ("orders=1,orders=2", "named twice"),
        ("=2", "expected topic=weight"),
    ],
)
def test_a_bad_source_weight_fails_at_start_naming_the_setting(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        load_settings(env={"EMBEDSTREAM_SOURCE_WEIGHTS": value})
    assert info.value.setting == "source_weights"


def test_source_weights_parse_full_topic_names() -> None:
    settings = load_settings(env={"EMBEDSTREAM_SOURCE_WEIGHTS": "t.orders=3, t.wiki = 0.5"})
    assert settings.source_weight_map == {"t.orders": 3.0, "t.wiki": 0.5}


@pytest.mark.parametrize(
    ("held", "weights", "under"),
    [
        ({"a": 500, "b": 0}, {}, {"b"}),  # the trickle goes first
        ({"a": 500, "b": 3}, {}, {"b"}),
        ({"a": 50, "b": 50}, {}, set()),  # level: nobody jumps
        ({"a": 0, "b": 0}, {}, set()),  # idle lane: no backlog to jump
        ({"a": 500}, {}, set()),  # alone
        ({"a": 300, "b": 100}, {"b": 0.2}, {"a"}),  # parts 333 and 67: a is under
        ({"a": 300, "b": 100}, {"a": 3}, set()),  # b's part is 100: not under
        ({"a": 300, "b": 99}, {"a": 3}, {"b"}),
        ({"a": 10, "b": 0, "c": 0}, {}, {"b", "c"}),
    ],
)
def test_sources_under_their_share_go_first(
    held: dict[str, int], weights: dict[str, float], under: set[str]
) -> None:
    assert sources_under_share(held, weights) == under


@pytest.mark.parametrize(
    ("held", "weights", "trickles"),
    [
        ({"a": 2000, "b": 1}, {}, {"b"}),  # a trickle beside a flood
        ({"a": 2000, "b": 0}, {}, set()),  # nothing to call for
        ({"a": 48, "b": 48}, {}, set()),  # comparable backlogs share mixed calls
        ({"a": 300, "b": 100}, {}, set()),  # b's part 200: over a quarter of it
        ({"a": 330, "b": 40}, {}, {"b"}),  # under a quarter of its 185
        ({"a": 300, "b": 30}, {"b": 0.1}, set()),  # b's part is 30: it is no trickle
        ({"a": 500}, {}, set()),  # alone
        ({"a": 1000, "b": 2, "c": 3}, {}, {"b", "c"}),
    ],
)
def test_a_trickle_is_under_a_quarter_of_its_share(
    held: dict[str, int], weights: dict[str, float], trickles: set[str]
) -> None:
    assert trickle_sources(held, weights) == trickles
