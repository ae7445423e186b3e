"""The bench's stage profile of a lane process: read from an exposition as `embedstream run`
serves it (each lane process's series labelled with its process), and from record times."""

from __future__ import annotations

from embedstream.tools.bench.lane_stages import lane_stages, record_stages
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


def exposition() -> str:
    registry = CollectorRegistry()
    wait = Histogram(
        "embedstream_item_wait_seconds", "", ["lane", "process"],
        buckets=(0.01, 0.1, 1.0), registry=registry,
    )  # fmt: skip
    calls = Histogram(
        "embedstream_api_latency_seconds", "", ["process"],
        buckets=(0.05, 0.5, 5.0), registry=registry,
    )  # fmt: skip
    waits = Counter(
        "embedstream_budget_waits", "", ["lane", "reason", "process"], registry=registry
    )
    for seconds in (0.005, 0.005, 0.05, 0.05):
        wait.labels("high", "high").observe(seconds)
    wait.labels("low", "bulk").observe(0.9)  # another lane, another process: not counted
    for seconds in (0.04, 0.04, 0.04, 0.3):
        calls.labels("high").observe(seconds)
    calls.labels("bulk").observe(4.0)
    waits.labels("high", "slots", "high").inc(3)
    waits.labels("low", "slots", "bulk").inc(50)
    return generate_latest(registry).decode()


def test_a_lane_process_s_stages_are_its_own_series_only() -> None:
    stages = lane_stages(exposition(), "high", "high")
    assert stages["calls"] == 4  # the bulk process's call is not high's
    assert stages["call_mean_ms"] == 105.0  # (40 * 3 + 300) / 4
    assert stages["batcher_wait_mean_ms"] == 27.5
    assert stages["budget_waits_slots"] == 3
    # The P99 rank falls in the (0.05, 0.5] bucket: interpolated inside it, as Prometheus does.
    p99 = stages["call_p99_ms"]
    assert p99 is not None and 50 < p99 <= 500


def test_record_times_split_the_way_at_publication() -> None:
    scheduled = {"high-1": 10.0, "high-2": 11.0}
    requested = {"high-1": 10_005, "high-2": 11_002}  # ms on the wall clock
    written = {"high-1": 10_105, "high-2": 11_052}
    stages = record_stages(scheduled, requested, written, wall_offset=0.0)
    assert stages["published_p99_ms"] == 5.0
    assert stages["processed_p50_ms"] == 100.0
    assert stages["processed_p99_ms"] == 100.0
