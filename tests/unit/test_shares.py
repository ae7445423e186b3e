"""Fair shares between the sources of a lane (core/shares.py): tables and properties."""

from __future__ import annotations

import pytest
from embedstream.core.shares import buffer_shares, sources_to_pause, take_by_share
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
    ("queued", "weights", "served", "size", "taken"),
    [
        ({"a": 5000, "b": 3}, {}, {}, 256, {"a": 253, "b": 3}),  # the trickle goes in the next call
        ({"a": 5000, "b": 5000}, {}, {}, 100, {"a": 50, "b": 50}),
        ({"a": 5000, "b": 5000}, {"b": 3}, {}, 100, {"a": 25, "b": 75}),
        ({"a": 5000, "b": 5000}, {}, {"a": 60}, 100, {"a": 20, "b": 80}),  # catches b up
        ({"a": 0, "b": 7}, {}, {"b": 1e9}, 10, {"b": 7}),  # an idle source's turn goes on
        ({}, {}, {}, 10, {}),
    ],
)
def test_take_by_share(
    queued: dict[str, int],
    weights: dict[str, float],
    served: dict[str, float],
    size: int,
    taken: dict[str, int],
) -> None:
    assert take_by_share(queued, weights, served, size) == taken


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
