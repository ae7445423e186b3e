"""Token buckets with fake times: exact waits, FIFO debt, and the admission bound."""

from __future__ import annotations

from itertools import pairwise

import pytest
from embedstream.core.ratelimit import RateLimits, TokenBucket
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("reservations", "delays"),
    [
        # rate 2/s, burst 4: the first 4 go at once, then the queue forms
        ([(1, 0.0)] * 6, [0.0, 0.0, 0.0, 0.0, 0.5, 1.0]),
        # refill between calls
        ([(4, 0.0), (2, 1.0)], [0.0, 0.0]),
        ([(4, 0.0), (3, 1.0)], [0.0, 0.5]),
        # refill never exceeds the burst
        ([(1, 0.0), (4, 100.0), (1, 100.0)], [0.0, 0.0, 0.5]),
        # an amount over the burst is allowed and just waits longer
        ([(10, 0.0)], [3.0]),
        ([(10, 0.0), (1, 0.0)], [3.0, 3.5]),  # and the next caller queues behind it
        # debt is paid off by time: after 3 s of refill the queue is empty again
        ([(10, 0.0), (1, 3.0)], [3.0, 0.5]),
        # zero is a valid amount: it only waits for the queue ahead of it
        ([(6, 0.0), (0, 0.0)], [1.0, 1.0]),
        # a clock read out of order adds no refill
        ([(4, 5.0), (1, 4.0)], [0.0, 0.5]),
    ],
)
def test_bucket_delays(reservations: list[tuple[float, float]], delays: list[float]) -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    assert [bucket.reserve(amount, now) for amount, now in reservations] == delays


@pytest.mark.parametrize(
    ("reservations", "now", "available"),
    [
        ([], 0.0, 4.0),  # starts full
        ([(3, 0.0)], 0.0, 1.0),
        ([(3, 0.0)], 1.0, 3.0),
        ([(3, 0.0)], 10.0, 4.0),
        ([(6, 0.0)], 0.0, -2.0),  # in debt: later callers wait
        ([(6, 0.0)], 0.5, -1.0),
    ],
)
def test_bucket_available(
    reservations: list[tuple[float, float]], now: float, available: float
) -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    for amount, at in reservations:
        bucket.reserve(amount, at)
    assert bucket.available(now) == available
    assert bucket.available(now) == available  # a pure query: asking twice changes nothing


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0)])
def test_bucket_rejects_non_positive(rate: float, burst: float) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst)


def test_bucket_rejects_negative_amount() -> None:
    with pytest.raises(ValueError):
        TokenBucket(1.0, 1.0).reserve(-1, 0.0)


@pytest.mark.parametrize(
    ("rpm", "tpm", "reservations", "delays"),
    [
        (None, None, [(10**9, 0.0)] * 3, [0.0, 0.0, 0.0]),
        # 120 rpm = 2/s, burst 120: requests only
        (120, None, [(10**6, 0.0)] * 121, [0.0] * 120 + [0.5]),
        # 600 tpm = 10 tokens/s, burst 600: tokens only
        (None, 600, [(600, 0.0), (10, 0.0), (20, 1.0)], [0.0, 1.0, 2.0]),
        # both: the longer wait wins, each bucket charged
        (60, 6000, [(6000, 0.0), (100, 0.0)], [0.0, 1.0]),
        (1, 6000, [(1, 0.0), (1, 0.0)], [0.0, 60.0]),
    ],
)
def test_rate_limits(
    rpm: float | None,
    tpm: float | None,
    reservations: list[tuple[int, float]],
    delays: list[float],
) -> None:
    limits = RateLimits(rpm, tpm)
    assert [limits.reserve(tokens, now) for tokens, now in reservations] == delays


def test_unlimited_never_waits() -> None:
    limits = RateLimits.unlimited()
    assert limits.requests is None and limits.tokens is None
    assert limits.reserve(10**12, 0.0) == 0.0


@given(
    rate=st.floats(min_value=0.1, max_value=1000.0),
    burst=st.floats(min_value=0.1, max_value=1000.0),
    steps=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=2000.0),  # amount
            st.floats(min_value=0.0, max_value=5.0),  # time since the previous reservation
        ),
        min_size=1,
        max_size=50,
    ),
    horizon=st.floats(min_value=0.0, max_value=300.0),
)
def test_admitted_never_exceeds_burst_plus_refill(
    rate: float, burst: float, steps: list[tuple[float, float]], horizon: float
) -> None:
    bucket = TokenBucket(rate, burst)
    now = 0.0
    admitted_at: list[tuple[float, float]] = []
    for amount, gap in steps:
        now += gap
        admitted_at.append((now + bucket.reserve(amount, now), amount))
    times = [t for t, _ in admitted_at]
    # FIFO: nobody overtakes an earlier reservation (up to float rounding)
    assert all(later >= earlier - 1e-9 for earlier, later in pairwise(times))
    for t in [horizon, *times]:
        total = sum(amount for at, amount in admitted_at if at <= t)
        assert total <= (burst + rate * t) * (1 + 1e-9) + 1e-9
