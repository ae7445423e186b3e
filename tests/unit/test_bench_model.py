"""The figures of `embedstream bench`: bounds, percentiles, recommendations, rows, fits."""

from __future__ import annotations

import math

import pytest
from embedsim.model import count_tokens
from embedstream.tools.bench.figures import (
    LatencyModel,
    Row,
    ScaleOutRow,
    call_overhead_ms,
    cores_needed,
    fit_call_latency,
    latency_percentiles,
    percentile,
    recommend,
    recommend_max_concurrency,
    recommend_max_wait_ms,
    recommend_scale_factor,
)
from embedstream.tools.bench.workload import make_texts, mean_tokens, poisson_arrivals

REFERENCE = LatencyModel(base_ms=40.0, per_token_ms=0.02, capacity=8)  # the issue's setting


# --------------------------------------------------------------------------- bounds


def test_the_issues_reference_bounds() -> None:
    """X_phys about 12,900 items/s and C/L(1) for 50 callers about 1,230/s (issue 10)."""
    assert REFERENCE.largest_batch(30) == 2048
    assert REFERENCE.latency_ms(2048, 30) == pytest.approx(1268.8)
    assert REFERENCE.physical_bound(30) == pytest.approx(12_913, abs=1)
    assert REFERENCE.closed_loop_bound(50, 30) == pytest.approx(1231.5, abs=0.1)


@pytest.mark.parametrize(
    ("model", "tokens", "batch", "bound"),
    [
        # 300k tokens per call bind before 2048 inputs: B = 300_000 // 200 = 1500.
        (LatencyModel(), 200, 1500, 8 * 1500 / (0.040 + 0.02e-3 * 200 * 1500)),
        # Per-input cost counts like per-token cost.
        (LatencyModel(per_token_ms=0.0, per_input_ms=0.5), 30, 2048, 8 * 2048 / 1.064),
        # A provider serving one call at a time.
        (LatencyModel(capacity=1), 30, 2048, 2048 / 1.2688),
        # An announced budget of 60 requests/min allows one full call per second.
        (LatencyModel(rpm=60.0), 30, 2048, 2048.0),
        # 600k tokens/min of 30-token texts: 333 items/s, whatever the batch.
        (LatencyModel(tpm=600_000.0), 30, 2048, 600_000 / 60 / 30),
        # A text bigger than a call's token budget still goes alone.
        (LatencyModel(max_tokens=100), 300, 1, 8 / (0.040 + 0.02e-3 * 300)),
    ],
)
def test_physical_bound(model: LatencyModel, tokens: float, batch: int, bound: float) -> None:
    assert model.largest_batch(tokens) == batch
    assert model.physical_bound(tokens) == pytest.approx(bound)


@pytest.mark.parametrize(
    ("model", "callers", "bound"),
    [
        (REFERENCE, 1, 1 / 0.0406),
        (REFERENCE, 8, 8 / 0.0406),
        # 10,000 callers would get C/L(1) = 246k/s, but no batcher beats X_phys.
        (REFERENCE, 10_000, REFERENCE.physical_bound(30)),
        # 60 calls/min announced: at best one call of all 50 callers per second.
        (LatencyModel(rpm=60.0), 50, 50.0),
    ],
)
def test_closed_loop_bound(model: LatencyModel, callers: int, bound: float) -> None:
    assert model.closed_loop_bound(callers, 30) == pytest.approx(bound)


def test_open_loop_bound_is_the_offered_rate_up_to_x_phys() -> None:
    assert REFERENCE.open_loop_bound(1000, 30) == 1000
    assert REFERENCE.open_loop_bound(50_000, 30) == pytest.approx(REFERENCE.physical_bound(30))


@pytest.mark.parametrize(
    "changes",
    [{"base_ms": -1.0}, {"per_token_ms": math.nan}, {"capacity": 0}, {"rpm": math.inf}],
)
def test_a_bad_latency_model_is_refused(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(changes))):
        LatencyModel(**changes)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- percentiles


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # between the middle two
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([float(i) for i in range(1, 101)], 99, 99.01),  # numpy's linear rule
        ([float(i) for i in range(1, 101)], 95, 95.05),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_refuses_nothing_and_bad_ranks() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_latency_percentiles_in_ms_from_unsorted_seconds() -> None:
    latencies = [i / 1000 for i in range(100, 0, -1)]  # 1..100 ms, descending
    got = latency_percentiles(latencies)
    assert got is not None
    assert (got.p50_ms, got.p95_ms, got.p99_ms) == pytest.approx((50.5, 95.05, 99.01))
    assert latency_percentiles([]) is None


# --------------------------------------------------------------------------- rows


def test_row_figures() -> None:
    row = Row(
        scenario="backlog",
        kind="backlog",
        items=10_000,
        seconds=2.0,
        bound_per_s=12_500.0,
        latency=None,
        calls=8,
        inputs=10_000,
        client_cpu_s=1.0,
        provider_cpu_s=None,
    )
    assert row.items_per_s == 5000
    assert row.pct_of_bound == 40
    assert row.mean_batch == 1250
    assert row.cpu_us_per_item == 100  # 1 CPU s over 10,000 items
    doc = row.to_json()
    assert doc["items_per_s"] == 5000 and doc["pct_of_bound"] == 40 and doc["latency"] is None
    assert doc["cpu_us_per_item"] == 100


def test_a_row_without_bound_or_calls_says_so() -> None:
    row = Row("e", "endpoint-closed", 0, 0.0, None, None, 0, 0, 0.0, None)
    assert (row.items_per_s, row.pct_of_bound, row.mean_batch) == (0.0, None, None)
    assert row.cpu_us_per_item is None


def test_scale_out_row_cpu_per_thousand_items_and_projection() -> None:
    row = ScaleOutRow(2, 20_000, 4.0, 10.0, 2.0, 40, 20_000, 12_913.0)
    assert row.items_per_s == 5000
    assert row.cpu_s_per_1000 == 0.5
    assert row.provider_cpu_s_per_1000 == 0.1
    assert row.mean_batch == 500
    # 50,000 items/s at 0.5 CPU s per 1,000 items keeps 25 cores busy.
    assert cores_needed(row, 50_000) == pytest.approx(25.0)
    empty = ScaleOutRow(1, 0, 0.0, 0.0, None, 0, 0, None)
    assert empty.cpu_s_per_1000 is None and cores_needed(empty, 1000) is None


# --------------------------------------------------------------------------- recommendations


@pytest.mark.parametrize(
    ("model", "target", "overhead", "wait"),
    [
        (REFERENCE, 100.0, 0.0, 59.0),  # 100 - L(1) 40.6, whole ms down
        (REFERENCE, 100.0, 5.0, 54.0),  # the client's measured overhead comes off too
        (REFERENCE, 300.0, 0.0, 259.0),
        (REFERENCE, 40.0, 0.0, 0.0),  # below one lone call: nothing to spare
        (LatencyModel(base_ms=200.0), 1000.0, 0.0, 799.0),  # a slow hosted API
    ],
)
def test_recommended_max_wait(
    model: LatencyModel, target: float, overhead: float, wait: float
) -> None:
    assert recommend_max_wait_ms(model, target, 30, overhead) == wait


@pytest.mark.parametrize(
    ("model", "tokens", "scale"),
    [
        # b_half = 40 / (0.02 * 30) = 66.7 items per slot, 8 slots.
        (REFERENCE, 30, 533.0),
        # Longer texts: each input costs more, the fixed cost is amortised sooner.
        (REFERENCE, 300, 53.0),
        # A heavier fixed cost makes waiting worth it only for a deeper backlog.
        (LatencyModel(base_ms=200.0), 30, 2667.0),
        # Inputs cost nothing: waiting pays only for the largest batches, K * B.
        (LatencyModel(per_token_ms=0.0), 30, 8 * 2048.0),
        # Never below 1.
        (LatencyModel(base_ms=0.0, capacity=1), 30, 1.0),
    ],
)
def test_recommended_scale_factor(model: LatencyModel, tokens: float, scale: float) -> None:
    assert recommend_scale_factor(model, tokens) == scale


def test_recommended_concurrency_is_the_provider_capacity() -> None:
    assert recommend_max_concurrency(REFERENCE) == 8
    assert recommend_max_concurrency(LatencyModel(capacity=32, rpm=3000)) == 32


def test_recommend_gathers_the_three_with_reasons() -> None:
    rec = recommend(REFERENCE, 100.0, 30)
    assert (rec.max_concurrency, rec.max_wait_ms, rec.scale_factor) == (8, 59.0, 533.0)
    assert rec.reachable
    assert len(rec.reasons) == 3 and "L(1) 40.6 ms" in rec.reasons[1]
    unreachable = recommend(REFERENCE, 30.0, 30)
    assert not unreachable.reachable and "unreachable" in unreachable.reasons[1]


def test_call_overhead_is_the_median_excess_of_small_calls() -> None:
    calls = [(1, 40.6 + 2.0), (6, 43.6 + 4.0), (6, 43.6 + 100.0), (2000, 1240.0 + 900.0)]
    # Small calls exceed L(b) by 2, 4 and 100 ms: the median is 4. The big call is left out.
    assert call_overhead_ms(calls, REFERENCE, 30) == pytest.approx(4.0)
    assert call_overhead_ms([(2000, 5000.0)], REFERENCE, 30) == 0.0
    assert call_overhead_ms([(1, 10.0)], REFERENCE, 30) == 0.0  # faster than modelled: 0


# --------------------------------------------------------------------------- fitting


def test_fit_call_latency_finds_the_line() -> None:
    samples = [(b, 50.0 + 0.75 * b) for b in (1, 10, 100, 1000)]
    fit = fit_call_latency(samples)
    assert fit is not None and fit.calls == 4
    assert (fit.base_ms, fit.per_item_ms) == pytest.approx((50.0, 0.75))


def test_fit_call_latency_needs_two_sizes_and_never_goes_negative() -> None:
    assert fit_call_latency([(8, 40.0), (8, 42.0)]) is None
    fit = fit_call_latency([(1, 100.0), (100, 50.0)])  # bigger calls faster: noise
    assert fit is not None and fit.per_item_ms == 0.0 and fit.base_ms == pytest.approx(75.0)


# --------------------------------------------------------------------------- workload


def test_texts_have_the_asked_tokens_about_four_characters_each_and_are_distinct() -> None:
    texts = make_texts(500, tokens=30, seed=3)
    assert {count_tokens(t) for t in texts} == {30}
    assert mean_tokens(texts) == 30
    assert 100 <= sum(map(len, texts)) / len(texts) <= 140  # "about 120 characters"
    assert len(set(texts)) == len(texts)
    assert make_texts(500, tokens=30, seed=3) == texts  # seeded


def test_poisson_arrivals_are_ascending_within_the_window_at_about_the_rate() -> None:
    arrivals = poisson_arrivals(1000.0, 10.0, seed=5)
    assert arrivals == sorted(arrivals) and arrivals[0] > 0 and arrivals[-1] < 10.0
    assert 9_500 < len(arrivals) < 10_500
    assert poisson_arrivals(1000.0, 10.0, seed=5) == arrivals
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, 1.0)
