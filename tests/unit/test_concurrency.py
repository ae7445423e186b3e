"""The in-flight limit (fixed and AIMD) and the provider gate, event by event."""

from __future__ import annotations

import pytest
from embedstream.core.concurrency import ConcurrencyLimit, ProviderGate, parse_reset_duration
from hypothesis import given
from hypothesis import strategies as st

# Events: "ok" = fast success, "slow" = success over the 1 s target, "429" = overload.
Event = str


def replay(limit: ConcurrencyLimit, events: list[Event]) -> list[int]:
    seen = []
    for now, event in enumerate(events):
        if event == "429":
            limit.on_overload(float(now))
        else:
            limit.on_success(2.0 if event == "slow" else 0.5, float(now))
        seen.append(limit.limit)
    return seen


@pytest.mark.parametrize(
    ("max_limit", "min_limit", "events", "expected"),
    [
        # starts at max; overload halves; the rest of the burst (window = 8) is ignored
        (8, 1, ["429"] * 9, [4] * 9),
        # ... and the completion after the window decreases again
        (8, 1, ["429"] * 10, [4] * 9 + [2]),
        # slow calls count like overloads, once per window
        (8, 1, ["slow", "slow", "ok"], [4, 4, 4]),
        # additive increase: +1 after `limit` consecutive fast successes (window counts too)
        (4, 1, ["429"] + ["ok"] * 2 + ["ok"] * 3, [2, 2, 3, 3, 3, 4]),
        # a slow call inside the window breaks the streak without decreasing
        (4, 1, ["429", "ok", "slow", "ok", "ok", "ok"], [2, 2, 2, 2, 3, 3]),
        # capped at max: successes at max change nothing
        (2, 1, ["ok"] * 5, [2] * 5),
        # floored at min_limit
        (4, 3, ["429"] * 6, [3] * 6),
        (2, 1, ["429", "429", "429"], [1, 1, 1]),
        # odd limits round down
        (5, 1, ["429"] * 6, [2] * 6),
    ],
)
def test_adaptive_sequences(
    max_limit: int, min_limit: int, events: list[Event], expected: list[int]
) -> None:
    limit = ConcurrencyLimit(max_limit, adaptive=True, target_latency_s=1.0, min_limit=min_limit)
    assert replay(limit, events) == expected


def test_without_target_latency_slow_calls_are_successes() -> None:
    limit = ConcurrencyLimit(4, adaptive=True, min_limit=1)
    assert replay(limit, ["429", "slow", "slow", "slow"]) == [2, 2, 3, 3]


def test_changed_at_records_when_the_limit_moved() -> None:
    limit = ConcurrencyLimit(4, adaptive=True)
    assert limit.changed_at is None
    limit.on_overload(now=7.5)
    assert limit.changed_at == 7.5
    limit.on_success(0.1, now=9.0)  # in the window, no change
    assert limit.changed_at == 7.5


@given(st.lists(st.sampled_from(["ok", "slow", "429"]), max_size=200))
def test_fixed_mode_never_changes(events: list[Event]) -> None:
    limit = ConcurrencyLimit(6, adaptive=False, target_latency_s=1.0)
    assert replay(limit, events) == [6] * len(events)


@given(
    st.integers(min_value=1, max_value=16),
    st.data(),
    st.lists(st.sampled_from(["ok", "slow", "429"]), max_size=300),
)
def test_adaptive_stays_within_bounds(
    max_limit: int, data: st.DataObject, events: list[Event]
) -> None:
    min_limit = data.draw(st.integers(min_value=1, max_value=max_limit))
    limit = ConcurrencyLimit(max_limit, adaptive=True, target_latency_s=1.0, min_limit=min_limit)
    seen = replay(limit, events)
    assert all(min_limit <= value <= max_limit for value in seen)
    for before, after in zip([max_limit, *seen], seen, strict=False):
        assert after in (before, before + 1) or after == max(min_limit, before // 2)


@pytest.mark.parametrize(
    ("max_limit", "min_limit", "target"),
    [(0, 1, None), (4, 0, None), (4, 5, None), (4, 1, 0.0), (4, 1, -1.0)],
)
def test_invalid_limit(max_limit: int, min_limit: int, target: float | None) -> None:
    with pytest.raises(ValueError):
        ConcurrencyLimit(max_limit, adaptive=True, target_latency_s=target, min_limit=min_limit)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0s", 0.0),
        ("1.5", 1.5),  # a bare number is seconds
        (" 2s ", 2.0),
        ("500us", 0.0005),
        ("3m", 180.0),
        ("1m30s500ms", 90.5),
        ("", None),
        ("s", None),
        ("-1s", None),
        ("1x", None),
        ("1s junk", None),
        ("nan", None),
        ("inf", None),
        ("1 s", None),
    ],
)
def test_parse_reset_duration(text: str, expected: float | None) -> None:
    got = parse_reset_duration(text)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


NOW = 100.0


@pytest.mark.parametrize(
    ("headers", "blocked"),
    [
        ({}, 0.0),
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After": "1.5"}, 1.5),  # names are case-insensitive; fractions allowed
        ({"retry-after-ms": "250"}, 0.25),
        ({"Retry-After": "1", "Retry-After-Ms": "3000"}, 3.0),  # the larger wins
        ({"retry-after": "4", "retry-after-ms": "3000"}, 4.0),
        (
            {
                "retry-after": "Wed, 21 Oct 2015 07:28:30 GMT",
                "date": "Wed, 21 Oct 2015 07:28:00 GMT",
            },
            30.0,
        ),  # an HTTP date is measured against the response's own Date
        ({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, 0.0),  # no Date: nothing to measure
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"X-RateLimit-Remaining-Tokens": "0", "X-RateLimit-Reset-Tokens": "20ms"}, 0.02),
        ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "6m0s"}, 0.0),
        # with the limit announced the announced budget paces instead (see test_ratelimit)
        (
            {
                "x-ratelimit-limit-requests": "3000",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "1m0s",
            },
            0.0,
        ),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "2m3.5s",
                "retry-after": "3",
            },
            123.5,
        ),
        ({"retry-after": "3600000"}, 600.0),  # capped at max_block_s
        # malformed values are ignored
        ({"retry-after": "soon"}, 0.0),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "nan"}, 0.0),
        ({"retry-after-ms": "abc"}, 0.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT", "date": "garbage"}, 0.0),
        ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "later"}, 0.0),
        ({"x-ratelimit-remaining-tokens": "0"}, 0.0),
        ({"x-ratelimit-remaining-tokens": "zero", "x-ratelimit-reset-tokens": "1s"}, 0.0),
        ({"retry-after": "garbage", "retry-after-ms": "500"}, 0.5),
    ],
)
def test_gate_from_headers(headers: dict[str, str], blocked: float) -> None:
    gate = ProviderGate(max_block_s=600.0)
    gate.from_headers(headers, NOW)
    assert gate.blocked_for(NOW) == pytest.approx(blocked)


def test_gate_keeps_the_latest_instant_and_opens_after_it() -> None:
    gate = ProviderGate()
    assert gate.blocked_for(0.0) == 0.0
    gate.block_until(10.0)
    gate.block_until(5.0)  # an earlier instant does not shorten the block
    assert gate.blocked_for(4.0) == 6.0
    gate.from_headers({"retry-after": "1"}, now=8.0)  # 9.0 < 10.0: no change
    assert gate.blocked_for(8.0) == 2.0
    gate.from_headers({"retry-after": "5"}, now=8.0)
    assert gate.blocked_for(8.0) == 5.0
    assert gate.blocked_for(13.0) == 0.0
    assert gate.blocked_for(20.0) == 0.0


def test_gate_rejects_non_positive_cap() -> None:
    with pytest.raises(ValueError):
        ProviderGate(max_block_s=0.0)
