"""The demo's summary model (pure): figures from a real metrics registry, latencies from result
records, outcomes from the verify report, the tables and the lanes phase in words."""

from __future__ import annotations

import dataclasses
import io

import pytest
from embedstream.ops.metrics import Metrics
from embedstream.tools.demo.phases import LanesPhase, Phase, RequestPhase, plan
from embedstream.tools.demo.summary import (
    CACHE_OFF,
    CacheFigures,
    LaneFigures,
    Outcomes,
    PhaseFigures,
    lanes_lines,
    latencies_by_phase,
    measure,
    percentile,
    render,
    share,
)
from embedstream.tools.top.readings import Snapshot, parse_exposition, snapshot_of
from embedstream.tools.verify.report import RequestInfo, ResultRecord, build_report
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console


def snapshot(metrics: Metrics) -> Snapshot:
    return snapshot_of(metrics.registry.collect())


def text_of(renderable: object, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, highlight=False, color_system=None).print(renderable)
    return out.getvalue()


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


def test_a_lane_with_a_span_of_its_own_has_its_own_rate() -> None:
    metrics = Metrics()
    before = snapshot(metrics)
    for _ in range(600):
        metrics.observe_result("low", 1.0)
    for _ in range(10):
        metrics.observe_result("high", 0.05)
    after = snapshot(metrics)
    lanes = LanesPhase(600, 5.0).sent(10)
    spans = {"low": 2.0, "high": 2.5}  # the backlog drained in 2 s; high ran for 2.5 s
    figures = measure(lanes, before, after, 3.0, {}, spans)
    assert figures.per_second(figures.lanes["low"].items, "low") == 300.0
    assert figures.per_second(figures.lanes["high"].items, "high") == 4.0
    assert figures.per_second(figures.total.items) == 610 / 3.0  # the phase's own span
    assert figures.per_second(10, "retry") == 10 / 3.0  # a lane without a span: the phase's
    assert measure(lanes, before, after, 3.0, {}).lane_seconds == {}


def test_cache_figures_are_the_phase_increase_and_absent_without_look_ups() -> None:
    metrics = Metrics()
    metrics.count_cache_lookups({"memory": 5}, misses=5, tokens_saved=50)  # an earlier phase
    before = snapshot(metrics)
    metrics.count_cache_lookups({"memory": 3, "redis": 4}, misses=13, tokens_saved=70)
    after = snapshot(metrics)
    figures = measure(LanesPhase(20, 50.0), before, after, 1.0, {})
    assert figures.cache == CacheFigures(hits=7, lookups=20, tokens_saved=70)
    assert figures.cache.describe() == "cache: 7 hits of 20 look-ups, 70 tokens saved"
    assert measure(LanesPhase(20, 50.0), after, after, 1.0, {}).cache is None


def test_no_call_means_no_mean_batch() -> None:
    empty = snapshot(Metrics())
    figures = measure(LanesPhase(0, 50.0), empty, empty, 1.0, {})
    assert figures.calls == 0 and figures.mean_batch is None
    assert figures.total == LaneFigures(0, None, None)


def test_latencies_are_grouped_by_phase_and_lane() -> None:
    sparse, lanes = plan(5, 10.0, 3, 50.0)
    assert isinstance(lanes, LanesPhase)
    results = [
        ResultRecord("sparse-0", {"latency_ms": 12.0}),  # high (0 % 5)
        ResultRecord("sparse-1", {"latency_ms": 30}),
        ResultRecord("sparse-1", {"latency_ms": 31.0}),  # a duplicate: a consumer saw it too
        ResultRecord("lanes-5", {"latency_ms": 900.0}),  # the backlog: low
        ResultRecord("lanes-6", {"latency_ms": "slow"}),  # unreadable: left out
        ResultRecord("lanes-7", {}),
        ResultRecord("lanes-8", {"latency_ms": 40.0}),  # the first high request, once sent
        ResultRecord("elsewhere-1", {"latency_ms": 1.0}),  # not the demo's
    ]
    assert latencies_by_phase(results, [sparse, lanes.sent(1)]) == {
        "sparse": {"high": [12.0], "low": [30.0, 31.0]},
        "lanes": {"high": [40.0], "low": [900.0]},
    }
    # The phase as planned (no high request sent yet) knows no high id.
    assert latencies_by_phase(results, [lanes])["lanes"] == {"high": [], "low": [900.0]}


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


def _figures(phase: RequestPhase, mean_batch: float, p99: float) -> PhaseFigures:
    return PhaseFigures(
        phase=phase,
        seconds=2.0,
        lanes={"high": LaneFigures(40, 70.0, p99 / 2), "low": LaneFigures(160, 80.0, p99)},
        total=LaneFigures(200, 78.0, p99),
        calls=round(200 / mean_batch),
        mean_batch=mean_batch,
        dead_letters=0,
    )


def _lanes(high: LaneFigures, low: LaneFigures) -> PhaseFigures:
    """The lanes phase: a backlog of 9,000 drained in 2.4 s, high requests for 2.5 s."""
    return PhaseFigures(
        phase=LanesPhase(9000, 50.0, first=200).sent(high.items),
        seconds=2.5,
        lanes={"high": high, "low": low},
        total=LaneFigures(high.items + low.items, 1_000.0, 2_000.0),
        calls=70,
        mean_batch=130.0,
        dead_letters=0,
        lane_seconds={"low": 2.4, "high": 2.5},
    )


def test_the_summary_has_a_table_per_phase_and_the_counted_outcomes() -> None:
    sparse, _ = plan(200, 40.0, 9000, 50.0)
    lanes = _lanes(LaneFigures(120, 100.0, 400.0), LaneFigures(9000, 1_000.0, 2_000.0))
    text = text_of(render([_figures(sparse, 1.1, 232.0), lanes], Outcomes(9320, 9320, 0, 0, 0, 0)))
    assert "sparse: 200 requests at 40/s, done in 2.0 s" in text
    assert "lanes: 9,000 low requests at once, then high ones at 50/s, done in 2.5 s" in text
    rows = [line.split() for line in text.splitlines()]
    # lane items items/s calls mean-batch P50 P99
    assert [row for row in rows if row[:1] == ["all"]] == [
        ["all", "200", "100", "182", "1.1", "78", "232"],
        ["all", "9,120", "3,648", "70", "130.0", "1,000", "2,000"],
    ]
    # The sparse phase's lanes over its 2 s; in the lanes phase, the backlog over its drain
    # (9,000 in 2.4 s) and the high requests over their own stretch (120 in 2.5 s).
    assert [row[:3] for row in rows if row[:1] == ["high"]] == [
        ["high", "40", "20"],
        ["high", "120", "48"],
    ]
    assert [row[:3] for row in rows if row[:1] == ["low"]] == [
        ["low", "160", "80"],
        ["low", "9,000", "3,750"],
    ]
    assert "the low backlog drained in 2.4 s" in text
    assert "lost 0, duplicates 0, dead letters 0, wrong vectors 0" in text
    assert "every request has exactly one result" in text
    assert CACHE_OFF in text  # with the hint that turns it on
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_lanes_phase_puts_the_high_lane_beside_the_low_backlog_in_words() -> None:
    figures = _lanes(LaneFigures(120, 95.0, 410.0), LaneFigures(9000, 1_020.0, 1_990.0))
    assert str(lanes_lines(figures)) == (
        "the low backlog drained in 2.4 s; 120 high requests sent meanwhile\n"
        "waited 1/11 of low's P50 and 1/5 of its P99: high requests are served first"
    )


def test_the_lanes_phase_claims_no_priority_the_figures_do_not_show() -> None:
    figures = _lanes(LaneFigures(3, 120.0, 260.0), LaneFigures(50, 110.0, 250.0))
    words = str(lanes_lines(figures))
    assert "waited 109% of low's P50 and 104% of its P99" in words
    assert "served first" not in words


def test_the_lanes_phase_says_so_when_no_high_request_had_a_result() -> None:
    figures = _lanes(LaneFigures(0, None, None), LaneFigures(20, 30.0, 50.0))
    assert str(lanes_lines(figures)) == (
        "the low backlog drained in 2.4 s; no high request had a result meanwhile"
    )


def test_only_the_lanes_phase_has_lines_in_words() -> None:
    sparse, _ = plan(200, 40.0, 9000, 50.0)
    assert lanes_lines(_figures(sparse, 1.1, 232.0)) is None


@pytest.mark.parametrize(
    ("part", "whole", "words"),
    [
        (50.0, 1_000.0, "1/20"),
        (95.0, 1_020.0, "1/11"),
        (100.0, 200.0, "1/2"),
        (100.0, 199.0, "50%"),  # more than half: a percentage
        (80.0, 100.0, "80%"),
        (150.0, 100.0, "150%"),
        (0.0, 100.0, "0%"),
        (5.0, 0.0, "-"),
        (5_000.0, 1_000_000.0, "1/200"),
        (1.0, 12_345.0, "1/12,345"),
    ],
)
def test_a_share_is_a_fraction_when_small_a_percentage_otherwise(
    part: float, whole: float, words: str
) -> None:
    assert share(part, whole) == words


def test_with_a_cache_each_phase_says_what_it_saved() -> None:
    (lanes,) = plan(0, 40.0, 3000, 50.0)
    cached = CacheFigures(hits=2900, lookups=3000, tokens_saved=87_000)
    figures = dataclasses.replace(_figures(lanes, 10.0, 100.0), cache=cached)
    text = text_of(render([figures], Outcomes(3000, 3000, 0, 0, 0, 0), cache_on=True))
    assert "cache: 2,900 hits of 3,000 look-ups, 87,000 tokens saved" in text
    assert CACHE_OFF not in text


def test_the_summary_says_when_something_went_wrong() -> None:
    text = text_of(render([], Outcomes(10, 8, 2, 0, 0, None)))
    assert "lost 2, duplicates 0, dead letters 0, wrong vectors not checked" in text
    assert "not every request has exactly one result" in text
