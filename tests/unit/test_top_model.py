from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

import pytest
from embedstream.ops.metrics import Metrics
from embedstream.tools.top.model import (
    FRAME_WIDTH,
    Histogram,
    Snapshot,
    TargetView,
    compute_rates,
    fmt_count,
    fmt_ms,
    fmt_rate,
    lag_lane,
    parse_exposition,
    render_frame,
    target_row,
    total_row,
)
from prometheus_client import CollectorRegistry, generate_latest

NOW = datetime(2024, 5, 6, 7, 8, 9)
URL = "http://127.0.0.1:9464/metrics"


def fresh() -> Metrics:
    return Metrics(CollectorRegistry())


def scrape(metrics: Metrics) -> Snapshot:
    return parse_exposition(generate_latest(metrics.registry).decode())


def row_cells(lines: list[str], name: str) -> list[str]:
    """The whitespace-separated cells of the table row whose target is ``name``."""
    matches = [line.split() for line in lines if line.split()[:1] == [name]]
    assert len(matches) == 1, lines
    return matches[0]


# --------------------------------------------------------------------------- parsing


@pytest.fixture(scope="module")
def parsed() -> Snapshot:
    m = fresh()
    m.set_lag("embed.requests.high", 0, 10)
    m.set_lag("embed.requests.high", 1, 5)
    m.set_lag("embed.requests.low", 0, 7)
    m.set_lag("embed.retry", 2, 3)
    m.set_lag("embed.results", 0, 1000)  # not a consumed topic: not shown
    m.set_lag_seconds("embed.requests.high", 0, 1.5)
    m.set_lag_seconds("embed.requests.low", 0, 4.0)
    m.set_queue_depth("high", 3)
    m.set_queue_depth("low", 4)
    m.set_queue_depth("delayed", 2)
    for _ in range(5):
        m.observe_result("high", 0.1)
    for _ in range(2):
        m.observe_result("low", 0.1)
    m.observe_flush("high", "size", items=3, tokens=30, waits_s=[0.002, 0.002, 0.002])
    m.observe_flush("low", "size", items=10, tokens=90, waits_s=[0.3])
    m.observe_flush("low", "time", items=1, tokens=9, waits_s=[])
    m.observe_error("transient", "rate_limited")
    m.observe_error("permanent", "bad_request")
    m.count_dead_letter("bad_request")
    m.count_retry("rate_limited")
    m.count_retry("rate_limited")
    m.count_retry("server_error")
    m.set_in_flight_calls(2)
    m.set_concurrency_limit(8)
    m.set_paused_partitions(1)
    m.set_ready(True)
    return scrape(m)


PARSE_CASES: list[tuple[str, Callable[[Snapshot], object], object]] = [
    ("lag high sums partitions", lambda s: s.lag["high"], 15.0),
    ("lag low", lambda s: s.lag["low"], 7.0),
    ("lag retry", lambda s: s.lag["retry"], 3.0),
    ("lag lanes only", lambda s: sorted(s.lag), ["high", "low", "retry"]),
    ("lag seconds is the max", lambda s: s.lag_seconds_max, 4.0),
    ("queue depth", lambda s: dict(s.queue_depth), {"high": 3.0, "low": 4.0, "delayed": 2.0}),
    ("results by lane", lambda s: dict(s.results), {"high": 5.0, "low": 2.0}),
    ("results total", lambda s: s.results_total, 7.0),
    (
        "flushes by reason",
        lambda s: dict(s.flushes),
        {"size": 2.0, "tokens": 0.0, "time": 1.0, "drain": 0.0, "priority": 0.0},
    ),
    ("batch count", lambda s: s.batch_size.count, 3.0),
    ("batch sum", lambda s: s.batch_size.sum, 14.0),
    ("batch bucket le=4", lambda s: s.batch_size.cumulative_at(4.0), 2.0),
    ("batch bucket le=8", lambda s: s.batch_size.cumulative_at(8.0), 2.0),
    ("batch bucket le=16", lambda s: s.batch_size.cumulative_at(16.0), 3.0),
    ("batch +Inf bucket last", lambda s: s.batch_size.buckets[-1], (math.inf, 3.0)),
    ("wait lanes", lambda s: sorted(s.item_wait), ["high", "low"]),
    ("wait high count", lambda s: s.item_wait["high"].count, 3.0),
    ("wait high le=0.0025", lambda s: s.item_wait["high"].cumulative_at(0.0025), 3.0),
    ("wait low le=0.25", lambda s: s.item_wait["low"].cumulative_at(0.25), 0.0),
    ("wait low le=0.5", lambda s: s.item_wait["low"].cumulative_at(0.5), 1.0),
    ("api errors summed", lambda s: s.api_errors, 2.0),
    ("dead letters", lambda s: s.dead_letters, 1.0),
    ("retries summed", lambda s: s.retries, 3.0),
    ("in flight", lambda s: s.in_flight, 2.0),
    ("concurrency limit", lambda s: s.concurrency_limit, 8.0),
    ("paused partitions", lambda s: s.paused_partitions, 1.0),
    ("ready", lambda s: s.ready, True),
]


@pytest.mark.parametrize(
    ("get", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse(parsed: Snapshot, get: Callable[[Snapshot], object], expected: object) -> None:
    value = get(parsed)
    if isinstance(expected, float):
        assert value == pytest.approx(expected)
    else:
        assert value == expected


def test_parse_fresh_metrics() -> None:
    snap = scrape(fresh())
    assert dict(snap.lag) == {"high": 0.0, "low": 0.0, "retry": 0.0}
    assert snap.results_total == 0
    assert snap.ready is False
    assert snap.batch_size.count == 0


def test_parse_ignores_foreign_metrics_and_absent_ready() -> None:
    text = "# TYPE other_total counter\nother_total 5\n# TYPE embedstream_in_flight_calls gauge\n"
    text += "embedstream_in_flight_calls 4\n"
    snap = parse_exposition(text)
    assert snap.in_flight == 4
    assert snap.ready is None
    assert snap.results_total == 0


def test_parse_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_exposition("this is { not exposition\n")


@pytest.mark.parametrize(
    ("topic", "lane"),
    [
        ("embed.requests.high", "high"),
        ("requests.high", "high"),
        ("embed.requests.low", "low"),
        ("team-a.embed.retry", "retry"),
        ("embed.results", None),
        ("embed.dlq", None),
    ],
)
def test_lag_lane(topic: str, lane: str | None) -> None:
    assert lag_lane(topic) == lane


# --------------------------------------------------------------------------- quantiles


HIST = Histogram(((1.0, 0.0), (2.0, 4.0), (4.0, 8.0), (math.inf, 8.0)), sum=20.0, count=8.0)


@pytest.mark.parametrize(
    ("histogram", "q", "expected"),
    [
        (HIST, 0.25, 1.5),
        (HIST, 0.5, 2.0),
        (HIST, 0.75, 3.0),
        (HIST, 1.0, 4.0),
        (HIST, 0.0, 1.0),
        # the first bucket starts at 0
        (Histogram(((1.0, 4.0), (math.inf, 4.0)), 2.0, 4.0), 0.5, 0.5),
        # a rank in +Inf answers the largest finite bound
        (Histogram(((1.0, 0.0), (2.0, 0.0), (math.inf, 5.0)), 50.0, 5.0), 0.5, 2.0),
        # no observations, or no +Inf bucket: no answer
        (Histogram(((1.0, 0.0), (math.inf, 0.0))), 0.5, None),
        (Histogram(((1.0, 3.0), (2.0, 3.0)), 1.0, 3.0), 0.5, None),
        (Histogram(), 0.99, None),
    ],
)
def test_quantile(histogram: Histogram, q: float, expected: float | None) -> None:
    result = histogram.quantile(q)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


def test_quantile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        HIST.quantile(1.5)


def test_merge_same_and_different_layouts() -> None:
    merged = HIST.merge(HIST)
    assert merged.buckets == ((1.0, 0.0), (2.0, 8.0), (4.0, 16.0), (math.inf, 16.0))
    assert (merged.sum, merged.count) == (40.0, 16.0)
    other = Histogram(((3.0, 1.0), (math.inf, 1.0)), 3.0, 1.0)
    union = HIST.merge(other)
    assert union.bounds == (1.0, 2.0, 3.0, 4.0, math.inf)
    assert [c for _, c in union.buckets] == [0.0, 4.0, 5.0, 9.0, 9.0]
    assert Histogram().merge(HIST) == HIST


# --------------------------------------------------------------------------- rates


@pytest.fixture(scope="module")
def two_snapshots() -> tuple[Snapshot, Snapshot]:
    """Known history before the first snapshot, and known increases between the two."""
    m = fresh()
    for _ in range(100):
        m.observe_result("high", 1.0)
    # Old waits of 3 s and one huge batch: present in both snapshots, so in no delta.
    m.observe_flush("high", "size", items=1000, tokens=5000, waits_s=[3.0] * 100)
    m.observe_error("transient", "rate_limited")
    first = scrape(m)
    for _ in range(30):
        m.observe_result("high", 1.0)
    for _ in range(10):
        m.observe_result("low", 1.0)
    m.observe_flush("high", "size", items=10, tokens=100, waits_s=[0.02] * 10)  # (0.01, 0.025]
    m.observe_flush("low", "time", items=30, tokens=300, waits_s=[0.07] * 10)  # (0.05, 0.1]
    m.observe_error("transient", "rate_limited")
    m.observe_error("transient", "server_error")
    m.count_dead_letter("bad_request")
    return first, scrape(m)


RATE_CASES: list[tuple[str, Callable[[Snapshot, Snapshot], float | None], float | None]] = [
    ("items/s", lambda a, b: compute_rates(a, b, 4.0).items_per_s(), 10.0),
    ("items/s high", lambda a, b: compute_rates(a, b, 4.0).items_per_s("high"), 7.5),
    ("items/s low", lambda a, b: compute_rates(a, b, 4.0).items_per_s("low"), 2.5),
    ("items/s other elapsed", lambda a, b: compute_rates(a, b, 0.5).items_per_s(), 80.0),
    ("batch mean", lambda a, b: compute_rates(a, b, 4.0).batch_mean, 20.0),
    ("p25", lambda a, b: compute_rates(a, b, 4.0).item_wait_quantile(0.25), 0.0175),
    ("p50", lambda a, b: compute_rates(a, b, 4.0).item_wait_quantile(0.5), 0.025),
    ("p75", lambda a, b: compute_rates(a, b, 4.0).item_wait_quantile(0.75), 0.075),
    ("p99", lambda a, b: compute_rates(a, b, 4.0).item_wait_quantile(0.99), 0.099),
    ("p50 high", lambda a, b: compute_rates(a, b, 4.0).item_wait_quantile(0.5, "high"), 0.0175),
    ("p50 low", lambda a, b: compute_rates(a, b, 4.0).item_wait_quantile(0.5, "low"), 0.075),
    ("errors delta", lambda a, b: compute_rates(a, b, 4.0).api_errors, 2.0),
    ("dlq delta", lambda a, b: compute_rates(a, b, 4.0).dead_letters, 1.0),
    ("flushes size", lambda a, b: compute_rates(a, b, 4.0).flushes["size"], 1.0),
    ("flushes time", lambda a, b: compute_rates(a, b, 4.0).flushes["time"], 1.0),
    # Same snapshot twice: nothing happened, so no batch mean and no quantiles.
    ("idle items/s", lambda a, b: compute_rates(b, b, 4.0).items_per_s(), 0.0),
    ("idle batch mean", lambda a, b: compute_rates(b, b, 4.0).batch_mean, None),
    ("idle p99", lambda a, b: compute_rates(b, b, 4.0).item_wait_quantile(0.99), None),
]


@pytest.mark.parametrize(
    ("compute", "expected"), [c[1:] for c in RATE_CASES], ids=[c[0] for c in RATE_CASES]
)
def test_rates(
    two_snapshots: tuple[Snapshot, Snapshot],
    compute: Callable[[Snapshot, Snapshot], float | None],
    expected: float | None,
) -> None:
    result = compute(*two_snapshots)
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


def test_rates_after_restart_count_everything_new(two_snapshots: tuple[Snapshot, Snapshot]) -> None:
    m = fresh()
    for _ in range(6):
        m.observe_result("low", 1.0)
    m.observe_flush("low", "size", items=6, tokens=60, waits_s=[0.02] * 6)
    restarted = scrape(m)
    rates = compute_rates(two_snapshots[1], restarted, 2.0)
    assert rates.items_per_s() == pytest.approx(3.0)
    assert rates.batch_mean == pytest.approx(6.0)
    assert rates.item_wait_quantile(0.5) == pytest.approx(0.0175)


def test_rates_need_positive_elapsed(two_snapshots: tuple[Snapshot, Snapshot]) -> None:
    with pytest.raises(ValueError):
        compute_rates(*two_snapshots, elapsed_s=0.0)


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (fmt_count, None, "-"),
        (fmt_count, 0.0, "0"),
        (fmt_count, 9999.0, "9999"),
        (fmt_count, 12345.0, "12.3k"),
        (fmt_count, 123456.0, "123k"),
        (fmt_count, 4_500_000.0, "4.5M"),
        (fmt_rate, 12.34, "12.3"),
        (fmt_rate, 850.0, "850"),
        (fmt_rate, 12_345.0, "12.3k"),
        (fmt_ms, 2.5, "2.50"),
        (fmt_ms, 37.5, "37.5"),
        (fmt_ms, 1200.0, "1200"),
    ],
)
def test_formats(fmt: Callable[[float | None], str], value: float | None, text: str) -> None:
    assert fmt(value) == text


@pytest.fixture(scope="module")
def views(two_snapshots: tuple[Snapshot, Snapshot]) -> list[TargetView]:
    first, second = two_snapshots
    m = fresh()
    m.set_lag("embed.requests.high", 0, 40)
    m.set_lag("embed.requests.low", 0, 12345)
    m.set_lag_seconds("embed.requests.low", 0, 2.5)
    m.set_in_flight_calls(3)
    m.set_concurrency_limit(8)
    m.set_paused_partitions(2)
    m.set_ready(True)
    lagging = scrape(m)
    return [
        TargetView(URL, second, compute_rates(first, second, 4.0)),
        TargetView("http://10.0.0.7:9464/metrics", lagging, compute_rates(lagging, lagging, 2.0)),
        TargetView("http://10.0.0.8:9464/metrics", error="unreachable"),
    ]


def test_render_rows(views: list[TargetView]) -> None:
    lines = render_frame(views, NOW, interval_s=2.0)
    assert lines[0].startswith("embedstream top  2024-05-06 07:08:09  targets 2/3 up")
    # fixed width: every line but the header is the same width
    assert {len(line) for line in lines[1:]} == {FRAME_WIDTH}
    # TARGET, LAG HI, LAG LO, LAG S, ITEMS/S, BATCH, P50, P99, ERRORS, DLQ, PAUSED, INFL, READY
    assert (
        " ".join(row_cells(lines, "127.0.0.1:9464"))
        == "127.0.0.1:9464 0 0 0.0 10.0 20.0 25.0 99.0 3 1 0 0/0 no"
    )
    assert (
        " ".join(row_cells(lines, "10.0.0.7:9464"))
        == "10.0.0.7:9464 40 12.3k 2.5 0.0 - - - 0 0 2 3/8 yes"
    )
    assert row_cells(lines, "10.0.0.8:9464") == ["10.0.0.8:9464", "down", "(unreachable)"]
    # the total: sums, the worst lag age, quantiles over all targets' increases
    assert (
        " ".join(row_cells(lines, "TOTAL"))
        == "TOTAL 40 12.3k 2.5 10.0 20.0 25.0 99.0 3 1 2 3/8 1/3"
    )


def test_first_refresh_has_no_rates(two_snapshots: tuple[Snapshot, Snapshot]) -> None:
    lines = render_frame([TargetView(URL, two_snapshots[0])], NOW)
    cells = row_cells(lines, "127.0.0.1:9464")
    assert cells[4:8] == ["-", "-", "-", "-"]  # items/s, batch, P50, P99
    assert cells[8] == "1"  # errors total is known from one snapshot
    assert row_cells(lines, "TOTAL")[4] == "-"


def test_all_down() -> None:
    views = [TargetView(URL, error="timeout"), TargetView("http://h:1/metrics", error="HTTP 500")]
    lines = render_frame(views, NOW)
    assert "targets 0/2 up" in lines[0]
    assert row_cells(lines, "127.0.0.1:9464") == ["127.0.0.1:9464", "down", "(timeout)"]
    assert row_cells(lines, "h:1") == ["h:1", "down", "(HTTP", "500)"]
    assert row_cells(lines, "TOTAL") == ["TOTAL", *["-"] * 11, "0/2"]
    assert total_row(views).items_per_s is None


def test_rows_keep_their_width_with_long_names_and_huge_values() -> None:
    m = fresh()
    m.set_lag("embed.requests.high", 0, 10**20)
    view = TargetView("http://a-very-long-host-name.example.internal:9464/metrics", scrape(m))
    lines = render_frame([view], NOW)
    assert {len(line) for line in lines[1:]} == {FRAME_WIDTH}
    assert "…" in lines[2]
    assert "#" in lines[2]
    assert target_row(view).lag_high == 1e20
