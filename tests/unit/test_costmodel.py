"""The online call-cost model, with time passed in."""

from __future__ import annotations

import math
import random

import pytest
from embedstream.core.costmodel import (
    MEMORY_CALLS,
    PRIOR,
    CallCost,
    CostModels,
    LatencyFit,
    cost_key,
)
from embedstream.core.lanes import BucketKey, Priority
from hypothesis import given
from hypothesis import strategies as st

TRUE = CallCost(base_s=0.04, per_token_s=2e-5, per_item_s=5e-5)  # the simulator's bench model


def feed(
    fit: LatencyFit, cost: CallCost, calls: int, *, start: float = 0.0, seed: int = 1
) -> float:
    """Observe ``calls`` calls of random sizes, one every 10 ms; return the clock after them."""
    rng = random.Random(seed)
    now = start
    for _ in range(calls):
        items = rng.randint(1, 256)
        tokens = items * rng.randint(5, 120)
        fit.observe(tokens, items, cost.latency(tokens, items), now)
        now += 0.01
    return now


def test_before_any_call_the_prior_answers() -> None:
    fit = LatencyFit()
    assert fit.cost() == PRIOR
    assert CostModels().cost(("m", "float", None)) == PRIOR


@pytest.mark.parametrize(
    ("tokens", "items"), [(30, 1), (1_000, 32), (7_680, 256), (60_000, 2048), (300_000, 2048)]
)
def test_the_fit_recovers_the_providers_latency(tokens: int, items: int) -> None:
    fit = LatencyFit()
    feed(fit, TRUE, 200)
    assert fit.cost().latency(tokens, items) == pytest.approx(TRUE.latency(tokens, items), rel=0.02)


def test_texts_of_one_length_still_predict_well_along_that_length() -> None:
    # tokens = 30 * items in every call: per_token and per_item cannot be told apart, yet any
    # split the fit picks predicts calls of such texts.
    fit = LatencyFit()
    for i in range(100):
        items = 1 + (i * 37) % 256
        fit.observe(30 * items, items, TRUE.latency(30 * items, items), i * 0.01)
    for items in (1, 7, 64, 256):
        predicted = fit.cost().latency(30 * items, items)
        assert predicted == pytest.approx(TRUE.latency(30 * items, items), rel=0.02)


def test_one_outlier_barely_moves_a_settled_fit() -> None:
    fit = LatencyFit()
    now = feed(fit, TRUE, 100)
    before = fit.cost().latency(3_000, 100)
    fit.observe(3_000, 100, 5.0, now)  # a 5 s pause where ~0.1 s was due
    assert fit.cost().latency(3_000, 100) == pytest.approx(before, rel=0.05)


def test_a_provider_that_slows_down_is_followed_within_a_few_half_lives() -> None:
    fit = LatencyFit(half_life_s=10.0)
    now = feed(fit, TRUE, 300)
    slower = CallCost(base_s=0.2, per_token_s=4e-5, per_item_s=5e-5)
    rng = random.Random(2)
    for _ in range(200):  # 40 s of the slower provider, a call every 0.2 s
        items = rng.randint(1, 256)
        tokens = items * rng.randint(5, 120)
        fit.observe(tokens, items, slower.latency(tokens, items), now)
        now += 0.2
    assert fit.cost().latency(5_000, 100) == pytest.approx(slower.latency(5_000, 100), rel=0.05)


def test_after_a_long_silence_old_calls_weigh_little_and_the_prior_is_back_in_play() -> None:
    fit = LatencyFit(half_life_s=10.0)
    now = feed(fit, TRUE, 100)
    remembered = fit.weight
    fit.observe(100, 1, TRUE.latency(100, 1), now + 600.0)  # 60 half-lives later
    assert fit.weight < 1.01 + remembered * 2**-59


def test_a_clock_read_out_of_order_adds_no_weight() -> None:
    fit = LatencyFit(half_life_s=10.0)
    fit.observe(100, 1, 0.05, 100.0)
    fit.observe(100, 1, 0.05, 90.0)  # earlier than the last reading: no time decay, no growth
    assert fit.weight == pytest.approx(1.0 + (1 - 1 / MEMORY_CALLS))


@pytest.mark.parametrize("latency", [0.0, -1.0, math.nan, math.inf])
def test_latencies_that_say_nothing_are_ignored(latency: float) -> None:
    fit = LatencyFit()
    fit.observe(100, 1, latency, 0.0)
    assert fit.observations == 0
    assert fit.cost() == PRIOR


def test_coefficients_never_go_negative() -> None:
    # Bigger calls answered faster (a warming cache, a noisy network): the slope pins at 0.
    fit = LatencyFit()
    for i in range(50):
        items = 1 + i * 5
        fit.observe(30 * items, items, 0.2 - 0.0005 * items, i * 0.01)
    cost = fit.cost()
    assert cost.per_token_s == 0.0 and cost.per_item_s == 0.0
    assert cost.base_s == pytest.approx(0.2 - 0.0005 * 123, rel=0.2)  # about the mean


observations = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=300_000),  # tokens
        st.integers(min_value=1, max_value=2048),  # items
        st.floats(min_value=1e-4, max_value=600.0),  # latency, seconds
        st.floats(min_value=0.0, max_value=30.0),  # time since the previous call
    ),
    max_size=40,
)


@given(observations)
def test_any_history_gives_finite_non_negative_coefficients(
    history: list[tuple[int, int, float, float]],
) -> None:
    fit = LatencyFit()
    now = 0.0
    for tokens, items, latency, gap in history:
        now += gap
        fit.observe(tokens, items, latency, now)
        cost = fit.cost()
        for value in (cost.base_s, cost.per_token_s, cost.per_item_s):
            assert math.isfinite(value) and value >= 0.0


@given(
    st.floats(min_value=0.001, max_value=1.0),
    st.floats(min_value=0.0, max_value=1e-4),
    st.floats(min_value=0.0, max_value=1e-3),
)
def test_any_provider_of_this_shape_is_learnt(
    base: float, per_token: float, per_item: float
) -> None:
    true = CallCost(base, per_token, per_item)
    fit = LatencyFit()
    feed(fit, true, 150)
    for tokens, items in ((50, 1), (2_000, 64), (30_000, 512)):
        assert fit.cost().latency(tokens, items) == pytest.approx(
            true.latency(tokens, items), rel=0.05, abs=0.002
        )


def test_buckets_learn_apart_and_the_least_recently_used_is_forgotten() -> None:
    models = CostModels(max_buckets=2)
    models.observe("a", 100, 1, 0.5, 0.0)
    models.observe("b", 100, 1, 0.05, 0.0)
    assert models.cost("a").latency(100, 1) > models.cost("b").latency(100, 1)
    models.observe("a", 100, 1, 0.5, 1.0)  # "a" used last: "b" is the one to go
    models.observe("c", 100, 1, 0.05, 2.0)
    assert models.fit("a").observations == 2
    assert models.cost("b") == PRIOR


def test_a_calls_cost_does_not_depend_on_its_lane() -> None:
    high = BucketKey(Priority.HIGH, "m", "float", 256)
    low = BucketKey(Priority.LOW, "m", "float", 256)
    assert cost_key(high) == cost_key(low) != cost_key(BucketKey(Priority.LOW, "m", "base64", 256))
