"""`observe_all`: a batch of observations gives the samples observing them one by one gives."""

from __future__ import annotations

import math
import random

import pytest
from embedstream.ops.histograms import observe_all
from prometheus_client import CollectorRegistry, Histogram

BOUNDS = (0.01, 0.1, 1.0, 10.0)


def _samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("le", "")): s.value
        for family in histogram.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def _pair() -> tuple[Histogram, Histogram]:
    one_by_one = Histogram("h", "h", ["lane"], buckets=BOUNDS, registry=CollectorRegistry())
    batched = Histogram("h", "h", ["lane"], buckets=BOUNDS, registry=CollectorRegistry())
    return one_by_one, batched


@pytest.mark.parametrize(
    "values",
    [
        [],
        [0.0],
        [0.01, 0.1, 1.0, 10.0],  # on the bounds: `le` includes them
        [0.0100001, 0.099, 10.5, 1e9, math.inf],
        [random.Random(seed).expovariate(2.0) for seed in range(500)],
    ],
)
def test_the_same_samples_as_one_by_one(values: list[float]) -> None:
    one_by_one, batched = _pair()
    child = one_by_one.labels(lane="low")  # the series exists with no observation too
    for value in values:
        child.observe(value)
    observe_all(batched.labels(lane="low"), values)
    expected, got = _samples(one_by_one), _samples(batched)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key


def test_a_floor_lifts_values_below_it() -> None:
    one_by_one, batched = _pair()
    values = [-0.5, -1e-9, 0.005, 2.0]
    for value in values:
        one_by_one.labels(lane="high").observe(max(value, 0.0))
    observe_all(batched.labels(lane="high"), values, floor=0.0)
    assert _samples(batched) == pytest.approx(_samples(one_by_one))
    assert _samples(batched)[("h_bucket", "0.01")] == 3


@pytest.mark.parametrize("values", [[math.nan, -0.5, 0.2], [0.3, math.nan, -1.0], [-2.0]])
def test_a_floor_with_a_nan_anywhere(values: list[float]) -> None:
    one_by_one, batched = _pair()
    child = one_by_one.labels(lane="low")
    for value in values:
        child.observe(max(value, 0.0) if value == value else value)
    observe_all(batched.labels(lane="low"), values, floor=0.0)
    expected, got = _samples(one_by_one), _samples(batched)
    for key, value in expected.items():
        if key != ("h_sum", ""):
            assert got[key] == value, key
    assert got[("h_bucket", "0.01")] == expected[("h_bucket", "0.01")] >= 1


def test_nan_counts_in_no_bucket_as_observe_has_it() -> None:
    one_by_one, batched = _pair()
    for value in (0.5, math.nan):
        one_by_one.labels(lane="low").observe(value)
    observe_all(batched.labels(lane="low"), iter([0.5, math.nan]))
    expected, got = _samples(one_by_one), _samples(batched)
    assert got[("h_bucket", "+Inf")] == expected[("h_bucket", "+Inf")] == 1
    assert got[("h_count", "")] == expected[("h_count", "")] == 1
    assert math.isnan(got[("h_sum", "")]) and math.isnan(expected[("h_sum", "")])


def test_a_labelled_parent_is_refused_as_observe_refuses_it() -> None:
    parent, _ = _pair()
    with pytest.raises(ValueError, match="missing label values"):
        observe_all(parent, [0.5])
