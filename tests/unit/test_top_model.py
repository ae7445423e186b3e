from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from embedstream.ops.metrics import Metrics
from embedstream.tools.top.histogram import Histogram
from embedstream.tools.top.rates import compute_rates
from embedstream.tools.top.readings import PartitionLag, Snapshot, lag_lane, parse_exposition
from prometheus_client import CollectorRegistry, generate_latest


def fresh() -> Metrics:
    return Metrics(CollectorRegistry())


def scrape(metrics: Metrics) -> Snapshot:
    return parse_exposition(generate_latest(metrics.registry).decode())


# --------------------------------------------------------------------------- parsing


@pytest.fixture(scope="module")
def parsed() -> Snapshot:
    m = fresh()
    m.set_lag("embed.requests.high", 0, "high", 10)
    m.set_lag("embed.requests.high", 1, "high", 5)
    m.set_lag("embed.requests.low", 0, "low", 7)
    m.set_lag("embed.retry", 2, "retry", 3)
    m.set_lag("embed.results", 0, "other", 1000)  # not a consumed topic: not shown
    m.set_lag_seconds("embed.requests.high", 0, "high", 1.5)
    m.set_lag_seconds("embed.requests.low", 0, "low", 4.0)
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
    for ok in (True, True, True, True, False):
        m.observe_call(0.1, ok=ok)
    return scrape(m)


PARSE_CASES: list[tuple[str, Callable[[Snapshot], object], object]] = [
    ("lag high sums partitions", lambda s: s.lag["high"], 15.0),
    ("lag low", lambda s: s.lag["low"], 7.0),
    ("lag retry", lambda s: s.lag["retry"], 3.0),
    ("lag lanes only", lambda s: sorted(s.lag), ["backfill", "high", "low", "retry"]),
    ("lag seconds is the max", lambda s: s.lag_seconds_max, 4.0),
    (
        "queue depth",
        lambda s: dict(s.queue_depth),
        {"online": 0.0, "high": 3.0, "low": 4.0, "backfill": 0.0, "delayed": 2.0},
    ),
    (
        "results by lane",
        lambda s: dict(s.results),
        {"online": 0.0, "high": 5.0, "low": 2.0, "backfill": 0.0},
    ),
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
    ("wait lanes", lambda s: sorted(s.item_wait), ["backfill", "high", "low", "online"]),
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
    (
        "partitions, with lag and age",
        lambda s: s.partitions,
        (
            PartitionLag("embed.requests.high", 0, "high", 10.0, 1.5),
            PartitionLag("embed.requests.high", 1, "high", 5.0, 0.0),
            PartitionLag("embed.requests.low", 0, "low", 7.0, 4.0),
            PartitionLag("embed.retry", 2, "retry", 3.0, 0.0),
        ),
    ),
    ("calls by outcome", lambda s: dict(s.api_calls), {"ok": 4.0, "error": 1.0}),
    (
        "errors by class",
        lambda s: dict(s.api_errors_by_class),
        {"transient": 1.0, "permanent": 1.0},
    ),
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
    assert dict(snap.lag) == {"high": 0.0, "low": 0.0, "retry": 0.0, "backfill": 0.0}
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


@pytest.mark.parametrize(
    ("topic", "label", "lane"),
    [
        ("orders-interactive", "high", "high"),  # a topic the user named: the label decides
        ("embed.requests.low", "high", "high"),
        ("bulk", "low", "low"),
        ("embed.requests.high", "", "high"),  # no label: the suffix
        ("embed.requests.high", "results", None),  # not a consumed lane
    ],
)
def test_a_lane_label_wins_over_the_topic_name(topic: str, label: str, lane: str | None) -> None:
    assert lag_lane(topic, label) == lane


def test_lag_with_lane_labels_needs_no_topic_naming_convention() -> None:
    text = (
        "# TYPE embedstream_consumer_lag gauge\n"
        'embedstream_consumer_lag{topic="orders",partition="0",lane="high"} 12\n'
        'embedstream_consumer_lag{topic="backfill",partition="3",lane="low"} 40\n'
    )
    snap = parse_exposition(text)
    assert dict(snap.lag) == {"high": 12.0, "low": 40.0, "retry": 0.0, "backfill": 0.0}
    assert [(p.topic, p.partition, p.lane) for p in snap.partitions] == [
        ("backfill", 3, "low"),
        ("orders", 0, "high"),
    ]


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
    ("errors/s", lambda a, b: compute_rates(a, b, 4.0).errors_per_s, 0.5),
    ("dead letters/s", lambda a, b: compute_rates(a, b, 4.0).dead_letters_per_s, 0.25),
    ("retries/s", lambda a, b: compute_rates(a, b, 4.0).retries_per_s, 0.0),
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


@pytest.mark.parametrize(
    ("calls", "errors", "failing"),
    [
        ([True, False], [], False),  # some calls still succeed
        ([False, False], [("TransientError", "connection")], True),  # every call failed
        ([], [("ProviderWideError", "auth")], True),  # refused for everyone
        ([True], [("ProviderWideError", "auth")], True),
        ([], [], False),  # idle: nothing says the provider is down
    ],
)
def test_provider_failing(calls: list[bool], errors: list[tuple[str, str]], failing: bool) -> None:
    m = fresh()
    m.observe_error("ProviderWideError", "auth")  # before the interval: does not count
    m.observe_call(0.1, ok=False)
    before = scrape(m)
    for ok in calls:
        m.observe_call(0.1, ok=ok)
    for error_class, reason in errors:
        m.observe_error(error_class, reason)
    assert compute_rates(before, scrape(m), 2.0).provider_failing is failing
