"""The demo's summary model (pure): the plan, figures from a real metrics registry, latencies
from result records, outcomes from the verify report, and the tables."""

from __future__ import annotations

import dataclasses
import io

import pytest
from embedstream.ops.metrics import Metrics
from embedstream.tools.demo.summary import (
    CACHE_OFF,
    CacheFigures,
    LaneFigures,
    Outcomes,
    Phase,
    PhaseFigures,
    latencies_by_phase,
    measure,
    percentile,
    plan,
    render,
)
from embedstream.tools.top.model import Snapshot, parse_exposition, snapshot_of
from embedstream.tools.verify.report import RequestInfo, ResultRecord, build_report
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console


def snapshot(metrics: Metrics) -> Snapshot:
    return snapshot_of(metrics.registry.collect())


def text_of(renderable: object, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, highlight=False, color_system=None).print(renderable)
    return out.getvalue()


# ----------------------------------------------------------------------------- the plan


def test_a_sparse_phase_then_a_burst_with_distinct_ids() -> None:
    sparse, burst = plan(10, 40.0, 25)
    assert (sparse.name, sparse.items, sparse.rate) == ("sparse", 10, 40.0)
    assert (burst.name, burst.items, burst.rate) == ("burst", 25, None)
    ids = [rid for phase in (sparse, burst) for rid, _ in phase.requests()]
    assert len(ids) == len(set(ids)) == 35
    assert ids[0] == "sparse-0" and ids[10] == "burst-10"  # numbers run on: distinct texts
    lanes = [lane for phase in (sparse, burst) for _, lane in phase.requests()]
    assert lanes.count("high") == 7  # one in five


def test_an_empty_sparse_phase_is_left_out() -> None:
    assert [phase.name for phase in plan(0, 40.0, 5)] == ["burst"]


def test_sparse_requests_are_spaced_a_burst_goes_at_once() -> None:
    sparse, burst = plan(4, 20.0, 4)
    assert [sparse.send_at(i) for i in range(4)] == [0.0, 0.05, 0.1, 0.15]
    assert {burst.send_at(i) for i in range(4)} == {0.0}


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_a_phase_rate_must_be_positive_and_finite(rate: float) -> None:
    with pytest.raises(ValueError, match="rate"):
        Phase("sparse", 3, rate)


@pytest.mark.parametrize(
    ("phase", "words"),
    [
        (Phase("sparse", 200, 40.0), "sparse: 200 requests at 40/s"),
        (Phase("burst", 3000), "burst: 3,000 requests at once"),
    ],
)
def test_a_phase_describes_itself(phase: Phase, words: str) -> None:
    assert phase.describe() == words


# ----------------------------------------------------------------------------- figures


@pytest.mark.parametrize(
    ("values", "q", "want"),
    [
        ([], 0.5, None),
        ([7.0], 0.99, 7.0),
        ([float(v) for v in range(1, 101)], 0.5, 50.0),
        ([float(v) for v in range(1, 101)], 0.99, 99.0),
        ([float(v) for v in range(100, 0, -1)], 0.99, 99.0),  # order does not matter
        ([1.0, 2.0, 3.0, 1000.0], 0.99, 1000.0),
        ([1.0, 2.0], 0.0, 1.0),
    ],
)
def test_percentile_is_a_value_that_occurred(
    values: list[float], q: float, want: float | None
) -> None:
    assert percentile(values, q) == want


def test_a_phase_counts_only_what_the_registry_gained_during_it() -> None:
    metrics = Metrics()
    # Earlier work (another phase) must not leak into this phase's figures.
    metrics.observe_flush("low", "size", 100, 1000, [0.01] * 100)
    for _ in range(100):
        metrics.observe_result("low", 0.5)
    before = snapshot(metrics)
    for items in (1, 1, 2):
        metrics.observe_flush("high", "time", items, 10, [0.0] * items)
    for _ in range(3):
        metrics.observe_result("high", 0.02)
    metrics.observe_result("low", 0.02)
    metrics.count_dead_letter("too_long")
    after = snapshot(metrics)

    figures = measure(Phase("sparse", 5, 10.0), before, after, 2.0, {"high": [30.0, 10.0]})
    assert figures.lanes["high"] == LaneFigures(3, 10.0, 30.0)
    assert figures.lanes["low"] == LaneFigures(1, None, None)
    assert figures.total == LaneFigures(4, 10.0, 30.0)
    assert (figures.calls, figures.mean_batch, figures.dead_letters) == (3, 4 / 3, 1)
    assert figures.per_second(figures.total.items) == 2.0


def test_registry_and_exposition_give_the_same_snapshot() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.observe_flush("low", "size", 64, 640, [0.02] * 64)
    metrics.observe_result("high", 0.1)
    metrics.set_lag("embed.requests.low", 3, "low", 17)
    parsed = parse_exposition(generate_latest(metrics.registry).decode())
    assert snapshot(metrics) == parsed


def test_cache_figures_are_the_phase_increase_and_absent_without_look_ups() -> None:
    metrics = Metrics()
    metrics.count_cache_lookups({"memory": 5}, misses=5, tokens_saved=50)  # an earlier phase
    before = snapshot(metrics)
    metrics.count_cache_lookups({"memory": 3, "redis": 4}, misses=13, tokens_saved=70)
    after = snapshot(metrics)
    figures = measure(Phase("burst", 20), before, after, 1.0, {})
    assert figures.cache == CacheFigures(hits=7, lookups=20, tokens_saved=70)
    assert figures.cache.describe() == "cache: 7 hits of 20 look-ups, 70 tokens saved"
    assert measure(Phase("burst", 20), after, after, 1.0, {}).cache is None


def test_no_call_means_no_mean_batch() -> None:
    empty = snapshot(Metrics())
    figures = measure(Phase("burst", 0), empty, empty, 1.0, {})
    assert figures.calls == 0 and figures.mean_batch is None
    assert figures.total == LaneFigures(0, None, None)


def test_latencies_are_grouped_by_phase_and_lane() -> None:
    phases = plan(5, 10.0, 5)
    results = [
        ResultRecord("sparse-0", {"latency_ms": 12.0}),  # high (0 % 5)
        ResultRecord("sparse-1", {"latency_ms": 30}),
        ResultRecord("sparse-1", {"latency_ms": 31.0}),  # a duplicate: a consumer saw it too
        ResultRecord("burst-5", {"latency_ms": 900.0}),  # high
        ResultRecord("burst-6", {"latency_ms": "slow"}),  # unreadable: left out
        ResultRecord("burst-7", {}),
        ResultRecord("elsewhere-1", {"latency_ms": 1.0}),  # not the demo's
    ]
    assert latencies_by_phase(results, phases) == {
        "sparse": {"high": [12.0], "low": [30.0, 31.0]},
        "burst": {"high": [900.0], "low": []},
    }


# ----------------------------------------------------------------------------- outcomes


def _report(requested: list[str], resulted: list[str], dead: list[str]) -> Outcomes:
    info = RequestInfo("text", None, None, "demo.requests.low")
    report = build_report(
        {rid: info for rid in requested},
        [(rid, {"id": rid}) for rid in resulted],
        [(rid, {}) for rid in dead],
    )
    return Outcomes.from_report(report)


def test_outcomes_are_counted_from_the_verify_report() -> None:
    outcomes = _report(["a", "b", "c", "d"], ["a", "a", "b"], ["c"])
    assert outcomes == Outcomes(
        requests=4, results=3, lost=1, duplicates=1, dead_letters=1, misattributed=None
    )
    assert not outcomes.ok


@pytest.mark.parametrize(
    ("outcomes", "ok"),
    [
        (Outcomes(3, 3, 0, 0, 0, 0), True),
        (Outcomes(3, 3, 0, 0, 0, None), True),  # a real endpoint: vectors not checked
        (Outcomes(3, 2, 1, 0, 0, 0), False),
        (Outcomes(3, 4, 0, 1, 0, 0), False),
        (Outcomes(3, 2, 0, 0, 1, 0), False),
        (Outcomes(3, 3, 0, 0, 0, 1), False),
    ],
)
def test_ok_means_exactly_one_result_each(outcomes: Outcomes, ok: bool) -> None:
    assert outcomes.ok is ok


# ----------------------------------------------------------------------------- the tables


def _figures(phase: Phase, mean_batch: float, p99: float) -> PhaseFigures:
    return PhaseFigures(
        phase=phase,
        seconds=2.0,
        lanes={"high": LaneFigures(40, 70.0, p99 / 2), "low": LaneFigures(160, 80.0, p99)},
        total=LaneFigures(200, 78.0, p99),
        calls=round(200 / mean_batch),
        mean_batch=mean_batch,
        dead_letters=0,
    )


def test_the_summary_has_a_table_per_phase_and_the_counted_outcomes() -> None:
    sparse, burst = plan(200, 40.0, 3000)
    text = text_of(
        render(
            [_figures(sparse, 1.1, 232.0), _figures(burst, 200.0, 3295.0)],
            Outcomes(3200, 3200, 0, 0, 0, 0),
        )
    )
    assert "sparse: 200 requests at 40/s, done in 2.0 s" in text
    assert "burst: 3,000 requests at once, done in 2.0 s" in text
    rows = [line.split() for line in text.splitlines()]
    all_rows = [row for row in rows if row[:1] == ["all"]]
    # lane items items/s calls mean-batch P50 P99
    assert all_rows == [
        ["all", "200", "100", "182", "1.1", "78", "232"],
        ["all", "200", "100", "1", "200.0", "78", "3,295"],
    ]
    assert [row[:3] for row in rows if row[:1] == ["high"]] == [["high", "40", "20"]] * 2
    assert "lost 0, duplicates 0, dead letters 0, wrong vectors 0" in text
    assert "every request has exactly one result" in text
    assert CACHE_OFF in text  # with the hint that turns it on
    assert max(len(line) for line in text.splitlines()) <= 80


def test_with_a_cache_each_phase_says_what_it_saved() -> None:
    (burst,) = plan(0, 40.0, 3000)
    cached = CacheFigures(hits=2900, lookups=3000, tokens_saved=87_000)
    figures = dataclasses.replace(_figures(burst, 10.0, 100.0), cache=cached)
    text = text_of(render([figures], Outcomes(3000, 3000, 0, 0, 0, 0), cache_on=True))
    assert "cache: 2,900 hits of 3,000 look-ups, 87,000 tokens saved" in text
    assert CACHE_OFF not in text


def test_the_summary_says_when_something_went_wrong() -> None:
    text = text_of(render([], Outcomes(10, 8, 2, 0, 0, None)))
    assert "lost 2, duplicates 0, dead letters 0, wrong vectors not checked" in text
    assert "not every request has exactly one result" in text
