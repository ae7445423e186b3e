"""The batching policy, to the millisecond, with time passed in."""

from __future__ import annotations

import pytest
from embedstream.core.policy import (
    BatchLimits,
    Flush,
    FlushReason,
    Wait,
    batch_length,
    decide,
    spread_length,
    wait_budget,
)
from hypothesis import given
from hypothesis import strategies as st

LIMITS = BatchLimits(max_items=4, max_tokens=100, max_wait_s=0.1, scale_factor=10.0)


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (0, 0.0),  # sparse traffic: no wait at all
        (10, 0.05),  # depth = scale: half of max_wait
        (90, 0.09),
        (1_000_000, 0.1 * (1 - 1 / 100_001)),  # depth >> scale: approaches max_wait
        (-5, 0.0),  # a negative lag reading is treated as none
    ],
)
def test_wait_budget(depth: int, expected: float) -> None:
    assert wait_budget(LIMITS, depth) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tokens", "oldest", "now", "depth", "expected"),
    [
        ([], 0.0, 0.0, 0, None),
        ([1], 0.0, 0.0, 0, Flush(FlushReason.TIME)),  # depth 0: out at once
        ([1], 0.0, 0.0, 10, Wait(0.05)),
        ([1], 0.0, 0.049, 10, Wait(0.001)),
        ([1], 0.0, 0.050, 10, Flush(FlushReason.TIME)),  # timer counts from the oldest arrival
        ([1, 1, 1, 1], 0.0, 0.0, 10, Flush(FlushReason.SIZE)),
        ([1, 1, 1, 1, 1], 0.0, 0.0, 10, Flush(FlushReason.SIZE)),
        ([60, 50], 0.0, 0.0, 10, Flush(FlushReason.TOKENS)),  # the next item would pass 100
        ([50, 50], 0.0, 0.0, 10, Wait(0.05)),  # exactly at the budget is allowed
        ([150], 0.0, 0.0, 10, Wait(0.05)),  # a lone oversize item is not the policy's call
    ],
)
def test_decide(
    tokens: list[int], oldest: float, now: float, depth: int, expected: Flush | Wait | None
) -> None:
    decision = decide(LIMITS, tokens, oldest, now, depth)
    if isinstance(expected, Wait):
        assert isinstance(decision, Wait)
        assert decision.seconds == pytest.approx(expected.seconds)
    else:
        assert decision == expected


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [([1], 1), ([1] * 9, 4), ([99, 1, 1], 2), ([99, 2], 1), ([200, 1], 1), ([10, 95], 1)],
)
def test_batch_length(tokens: list[int], expected: int) -> None:
    assert batch_length(tokens, LIMITS) == expected


@given(
    st.lists(st.integers(min_value=1, max_value=150), min_size=1, max_size=50),
    st.integers(min_value=1, max_value=10),
    st.integers(min_value=1, max_value=300),
)
def test_cut_batches_respect_limits(tokens: list[int], max_items: int, max_tokens: int) -> None:
    limits = BatchLimits(max_items=max_items, max_tokens=max_tokens, max_wait_s=1, scale_factor=1)
    rest = list(tokens)
    while rest:
        n = batch_length(rest, limits)
        batch, rest = rest[:n], rest[n:]
        assert 1 <= n <= max_items
        assert n == 1 or sum(batch) <= max_tokens


@given(st.integers(min_value=0, max_value=10**9), st.floats(min_value=0.001, max_value=10**6))
def test_wait_never_exceeds_max_wait(depth: int, scale: float) -> None:
    limits = BatchLimits(max_items=1, max_tokens=1, max_wait_s=0.25, scale_factor=scale)
    assert 0.0 <= wait_budget(limits, depth) <= 0.25


@pytest.mark.parametrize(
    ("fits", "buffered", "free", "expected"),
    [
        (256, 800, 1, 256),  # one slot: nothing to share
        (256, 800, 8, 100),  # one round of 8 even calls
        (256, 3000, 8, 188),  # two full rounds of 8 rather than 12 calls of 256
        (256, 4096, 8, 256),  # exactly two rounds of full batches
        (256, 100, 8, 32),  # never below the minimum piece
        (20, 100, 8, 20),  # never above what fits
        (10, 10, 8, 10),
    ],
)
def test_spread_length(fits: int, buffered: int, free: int, expected: int) -> None:
    assert spread_length(fits, buffered, free) == expected
