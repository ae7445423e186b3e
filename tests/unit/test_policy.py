"""The batching policy, to the millisecond, with time passed in."""

from __future__ import annotations

import math

import pytest
from embedstream.core.costmodel import CallCost
from embedstream.core.policy import (
    BatchLimits,
    Flush,
    FlushReason,
    Wait,
    batch_length,
    decide,
    fill_target,
    fill_wait,
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


def _longest_prefix(tokens: list[int], limits: BatchLimits) -> int:
    """The rule item by item: the leading items within both limits, at least one."""
    total = 0
    for count, item in enumerate(tokens):
        if count == limits.max_items or (count > 0 and total + item > limits.max_tokens):
            return count
        total += item
    return len(tokens)


@given(
    st.lists(st.integers(min_value=0, max_value=150), max_size=60),
    st.integers(min_value=1, max_value=20),
    st.integers(min_value=1, max_value=400),
)
def test_batch_length_is_the_longest_prefix_within_both_limits(
    tokens: list[int], max_items: int, max_tokens: int
) -> None:
    limits = BatchLimits(max_items=max_items, max_tokens=max_tokens, max_wait_s=1, scale_factor=1)
    assert batch_length(tokens, limits) == _longest_prefix(tokens, limits)


@given(st.integers(min_value=0, max_value=10**9), st.floats(min_value=0.001, max_value=10**6))
def test_wait_never_exceeds_max_wait(depth: int, scale: float) -> None:
    limits = BatchLimits(max_items=1, max_tokens=1, max_wait_s=0.25, scale_factor=scale)
    assert 0.0 <= wait_budget(limits, depth) <= 0.25


BENCH = CallCost(base_s=0.04, per_token_s=2e-5, per_item_s=0.0)  # 40 ms + 0.02 ms/token
FLAT = CallCost(base_s=0.04, per_token_s=0.0, per_item_s=0.0)  # size costs nothing
OPENAI = BatchLimits(max_items=2048, max_tokens=300_000, max_wait_s=0.05, scale_factor=64.0)
CAPPED = BatchLimits(max_items=256, max_tokens=100_000, max_wait_s=0.05, scale_factor=64.0)


def pieces(buffered: int, size: int) -> int:
    return -(-buffered // size)


@pytest.mark.parametrize(
    ("tokens", "buffered", "slots", "limits", "cost", "size"),
    [
        (30, 50, 8, CAPPED, BENCH, 7),  # 8 calls of ~6 in ~44 ms, not 1 call of 50 in 70 ms
        (30, 50, 1, CAPPED, BENCH, 50),  # one slot: nothing to share
        (30, 50, 8, CAPPED, FLAT, 50),  # size is free: one call
        (30, 1, 8, CAPPED, BENCH, 1),
        (30, 3, 8, CAPPED, BENCH, 1),  # 3 calls of 1 save 1.2 ms for 0.8 ms of call price
        (30, 800, 8, CAPPED, BENCH, 100),  # one round of 8 even calls
        (30, 3000, 8, CAPPED, BENCH, 188),  # two even rounds, not 12 calls with a half-idle 2nd
        (30, 4096, 8, CAPPED, BENCH, 256),  # exactly two rounds of full batches
        (30, 100_000, 8, OPENAI, BENCH, 1786),  # deep: the fewest rounds, nearly full batches
        (30, 16_384, 8, OPENAI, BENCH, 2048),  # one round of full batches
        (1_000, 400, 8, OPENAI, BENCH, 50),  # tokens bound: 300 per call at most, spread to 8
        (1_000, 50, 4, BatchLimits(64, 4_000, 0.05, 64.0), BENCH, 4),  # never above what fits
    ],
)
def test_spread_length(
    tokens: int, buffered: int, slots: int, limits: BatchLimits, cost: CallCost, size: int
) -> None:
    counts = [tokens] * min(buffered, limits.max_items + 1)
    assert spread_length(counts, buffered, slots, limits, cost) == size


def test_a_slow_base_spreads_less() -> None:
    # A provider with a 300 ms base: splitting 50 items over 8 slots saves the same 26 ms of
    # compute, but each extra call now costs 3 ms of price.
    slow = CallCost(base_s=0.3, per_token_s=2e-5, per_item_s=0.0)
    fast = spread_length([30] * 50, 50, 8, CAPPED, BENCH)
    assert pieces(50, spread_length([30] * 50, 50, 8, CAPPED, slow)) < pieces(50, fast)


@given(
    st.lists(st.integers(min_value=1, max_value=8192), min_size=1, max_size=65),
    st.integers(min_value=1, max_value=20_000),
    st.integers(min_value=1, max_value=64),
    st.integers(min_value=1, max_value=64),
    st.floats(min_value=1e-3, max_value=2.0),
    st.floats(min_value=0.0, max_value=1e-3),
    st.floats(min_value=0.0, max_value=1e-2),
)
def test_spreading_stays_within_limits_and_never_finishes_later(
    counts: list[int],
    extra: int,
    slots: int,
    max_items: int,
    base: float,
    per_token: float,
    per_item: float,
) -> None:
    limits = BatchLimits(max_items=max_items, max_tokens=20_000, max_wait_s=0.05, scale_factor=1.0)
    cost = CallCost(base, per_token, per_item)
    buffered = len(counts) + extra
    size = spread_length(counts, buffered, slots, limits, cost)
    assert 1 <= size <= batch_length(counts, limits)
    if slots == 1:
        assert size == batch_length(counts, limits)
    # The chosen cut finishes the backlog no later, by the model, than the fewest calls would.
    mean = sum(counts) / len(counts)
    fewest = max(-(-buffered // max_items), math.ceil(buffered * mean / limits.max_tokens))

    def finish(k: int) -> float:
        piece = -(-buffered // k)
        return -(-k // slots) * cost.latency(piece * mean, piece)

    if size < batch_length(counts, limits):  # the cut is the spreading's, not the limits'
        assert finish(pieces(buffered, size)) <= finish(fewest) * (1 + 1e-9)


# --------------------------------------------------------------------------- the fill rule


@pytest.mark.parametrize(
    ("rate", "slots", "target"),
    [
        (0.0, 8, 1),  # nothing arriving: no batch-mates to wait for
        (20.0, 8, 1),  # sparse: one item a call keeps the slots nearly idle
        (1_000.0, 8, 8),  # 1000 * 0.04 / (8 * 0.7 - 1000 * 0.0006) = 8
        (3_000.0, 8, 32),  # 120 / (5.6 - 1.8) = 31.6: calls of 19 would keep all 8 busy
        (3_000.0, 4, 121),  # fewer slots: bigger calls (120 / (2.8 - 1.8), rounded up)
        (3_800.0, 4, None),  # 292 would: more than a call takes, so the backlog rules decide
        (9_999.0, 8, None),  # no size keeps up: a backlog
    ],
)
def test_fill_target(rate: float, slots: int, target: int | None) -> None:
    assert fill_target(rate, slots, BENCH, 30.0, CAPPED) == target


@given(st.floats(min_value=1.0, max_value=1e4), st.integers(min_value=1, max_value=64))
def test_calls_of_the_fill_target_keep_the_slots_below_the_utilization(
    rate: float, slots: int
) -> None:
    target = fill_target(rate, slots, BENCH, 30.0, CAPPED)
    if target is None:  # not even the largest call keeps up below 70%
        largest = CAPPED.max_items
        assert rate / largest * BENCH.latency(30.0 * largest, largest) > 0.7 * slots
    else:  # busy slots = calls/s x seconds a call
        assert 1 <= target <= CAPPED.max_items
        busy = rate / target * BENCH.latency(30.0 * target, target)
        assert busy <= 0.7 * slots * (1 + 1e-9)


@pytest.mark.parametrize(
    ("buffered", "target", "rate", "in_flight", "wait"),
    [
        (3, 8, 1_000.0, 2, 0.008),  # the time 8 items take to arrive
        (3, 8, 1_000.0, 0, 0.0),  # the lane's slots are idle: sending now delays nobody
        (8, 8, 1_000.0, 2, 0.0),  # already full enough
        (3, 8, 0.0, 2, 0.0),  # nothing arriving: waiting gains nothing
        (1, 256, 100.0, 2, 0.05),  # never past max_wait
        (1, None, 9_999.0, 2, 0.0),  # a backlog: the depth's wait decides
    ],
)
def test_fill_wait(
    buffered: int, target: int | None, rate: float, in_flight: int, wait: float
) -> None:
    assert fill_wait(buffered, target, rate, in_flight, CAPPED) == pytest.approx(wait)


def test_a_filling_call_waits_then_goes_on_time() -> None:
    counts = [30, 30, 30]
    waiting = decide(CAPPED, counts, 0.0, 0.005, 0, fill_wait_s=0.008)
    assert isinstance(waiting, Wait) and waiting.seconds == pytest.approx(0.003)
    assert decide(CAPPED, counts, 0.0, 0.008, 0, fill_wait_s=0.008) == Flush(FlushReason.TIME)
    assert decide(CAPPED, counts, 0.0, 0.0, 0) == Flush(FlushReason.TIME)  # no fill: at once


def test_spreading_never_cuts_pieces_under_the_fill_target() -> None:
    assert spread_length([30] * 50, 50, 8, CAPPED, BENCH) == 7  # 8 pieces of ~6
    assert spread_length([30] * 50, 50, 8, CAPPED, BENCH, least=20) == 25  # 2 of 25
    assert spread_length([30] * 10, 10, 8, CAPPED, BENCH, least=20) == 10  # one call
