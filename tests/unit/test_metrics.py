from __future__ import annotations

import pytest
from embedstream.ops.metrics import METRIC_NAMES, PROCESSOR_METRIC_NAMES, Metrics
from prometheus_client import REGISTRY, CollectorRegistry


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Metrics:
    return Metrics(registry)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_default_is_a_fresh_registry_not_the_global_one() -> None:
    first, second = Metrics(), Metrics()
    assert first.registry is not REGISTRY
    assert first.registry is not second.registry


def test_known_series_start_at_zero(registry: CollectorRegistry, metrics: Metrics) -> None:
    assert sample(registry, "embedstream_queue_depth", lane="delayed") == 0
    assert sample(registry, "embedstream_flushes_total", reason="drain") == 0
    assert sample(registry, "embedstream_api_calls_total", outcome="error") == 0
    assert sample(registry, "embedstream_results_total", lane="low") == 0


def test_gauge_setters(registry: CollectorRegistry, metrics: Metrics) -> None:
    metrics.set_queue_depth("high", 7)
    metrics.set_buffered_items(12)
    metrics.set_adaptive_wait(0.25)
    metrics.set_in_flight_calls(3)
    metrics.set_concurrency_limit(8)
    metrics.set_paused_partitions(2)
    metrics.set_ready(True)
    assert sample(registry, "embedstream_queue_depth", lane="high") == 7
    assert sample(registry, "embedstream_buffered_items") == 12
    assert sample(registry, "embedstream_adaptive_wait_seconds") == 0.25
    assert sample(registry, "embedstream_in_flight_calls") == 3
    assert sample(registry, "embedstream_concurrency_limit") == 8
    assert sample(registry, "embedstream_paused_partitions") == 2
    assert sample(registry, "embedstream_ready") == 1
    metrics.set_ready(False)
    assert sample(registry, "embedstream_ready") == 0


def test_observe_flush(registry: CollectorRegistry, metrics: Metrics) -> None:
    metrics.observe_flush("low", "time", items=3, tokens=300, waits_s=[0.1, 0.2, 0.3])
    assert sample(registry, "embedstream_flushes_total", reason="time") == 1
    assert sample(registry, "embedstream_batch_size_count") == 1
    assert sample(registry, "embedstream_batch_size_sum") == 3
    assert sample(registry, "embedstream_batch_size_bucket", le="2.0") == 0
    assert sample(registry, "embedstream_batch_size_bucket", le="4.0") == 1
    assert sample(registry, "embedstream_batch_tokens_sum") == 300
    assert sample(registry, "embedstream_item_wait_seconds_count", lane="low") == 3
    assert sample(registry, "embedstream_item_wait_seconds_sum", lane="low") == pytest.approx(0.6)
    assert sample(registry, "embedstream_item_wait_seconds_count", lane="high") == 0


def test_batch_size_buckets_are_powers_of_two_to_2048(registry: CollectorRegistry) -> None:
    Metrics(registry)
    bounds = [
        s.labels["le"]
        for family in registry.collect()
        if family.name == "embedstream_batch_size"
        for s in family.samples
        if s.name.endswith("_bucket")
    ]
    assert bounds == [str(float(2**i)) for i in range(12)] + ["+Inf"]


def test_observe_call_and_error(registry: CollectorRegistry, metrics: Metrics) -> None:
    metrics.observe_call(0.5, ok=True)
    metrics.observe_call(1.5, ok=False)
    metrics.observe_error("TransientError", "rate_limited")
    assert sample(registry, "embedstream_api_calls_total", outcome="ok") == 1
    assert sample(registry, "embedstream_api_calls_total", outcome="error") == 1
    assert sample(registry, "embedstream_api_latency_seconds_count") == 2
    assert sample(registry, "embedstream_api_latency_seconds_sum") == 2.0
    errors = sample(
        registry,
        "embedstream_api_errors_total",
        error_class="TransientError",
        reason="rate_limited",
    )
    assert errors == 1


def test_outcome_counters(registry: CollectorRegistry, metrics: Metrics) -> None:
    metrics.observe_result("high", 2.0)
    metrics.observe_result("high", -1.0)  # producer clock ahead of ours
    metrics.count_retry("timeout")
    metrics.count_dead_letter("too_long")
    assert sample(registry, "embedstream_results_total", lane="high") == 2
    assert sample(registry, "embedstream_end_to_end_latency_seconds_count", lane="high") == 2
    assert sample(registry, "embedstream_end_to_end_latency_seconds_sum", lane="high") == 2.0
    assert sample(registry, "embedstream_retries_total", reason="timeout") == 1
    assert sample(registry, "embedstream_dead_letters_total", reason="too_long") == 1


def test_a_calls_results_are_counted_and_observed_at_once(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    metrics.observe_results("low", [0.5, 1.5, -2.0])  # the last: producer clock ahead
    metrics.observe_results("low", [])
    assert sample(registry, "embedstream_results_total", lane="low") == 3
    assert sample(registry, "embedstream_end_to_end_latency_seconds_count", lane="low") == 3
    assert sample(registry, "embedstream_end_to_end_latency_seconds_sum", lane="low") == 2.0
    assert sample(registry, "embedstream_results_total", lane="high") in (None, 0)


def test_results_counted_reads_the_lanes_asked_for(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    metrics.observe_results("low", [0.1, 0.2, 0.3])
    metrics.observe_results("high", [0.1])
    metrics.observe_result("low", 0.4)  # a cache hit's
    assert metrics.results_counted("low") == 4
    assert metrics.results_counted("high", "low") == 5
    assert metrics.results_counted("online") == 0
    for lane in ("low", "high"):  # what the counter says
        counted = sample(registry, "embedstream_results_total", lane=lane)
        assert metrics.results_counted(lane) == counted


def test_lag_and_forget_partition(registry: CollectorRegistry, metrics: Metrics) -> None:
    metrics.set_lag("embed.requests.high", 0, "high", 42)
    metrics.set_lag_seconds("embed.requests.high", 0, "high", 1.5)
    metrics.set_lag("embed.requests.high", 1, "high", 5)
    labels = {"topic": "embed.requests.high", "partition": "0", "lane": "high"}
    assert sample(registry, "embedstream_consumer_lag", **labels) == 42
    assert sample(registry, "embedstream_consumer_lag_seconds", **labels) == 1.5

    metrics.forget_partition("embed.requests.high", 0, "high")
    assert sample(registry, "embedstream_consumer_lag", **labels) is None
    assert sample(registry, "embedstream_consumer_lag_seconds", **labels) is None
    other = {"topic": "embed.requests.high", "partition": "1", "lane": "high"}
    assert sample(registry, "embedstream_consumer_lag", **other) == 5
    # Forgetting twice, or a partition never seen, is harmless.
    metrics.forget_partition("embed.requests.high", 0, "high")
    metrics.forget_partition("embed.retry", 9, "retry")


def test_instances_do_not_interfere() -> None:
    first, second = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    first.count_retry("timeout")
    first.set_buffered_items(10)
    assert first.registry.get_sample_value("embedstream_retries_total", {"reason": "timeout"}) == 1
    assert (
        second.registry.get_sample_value("embedstream_retries_total", {"reason": "timeout"}) is None
    )
    assert second.registry.get_sample_value("embedstream_buffered_items") == 0


def test_metric_names_match_registry(registry: CollectorRegistry) -> None:
    Metrics(registry)
    # prometheus-client strips "_total" from counter family names; the exposition adds it back.
    exposed = {
        family.name + "_total" if family.type == "counter" else family.name
        for family in registry.collect()
    }
    assert exposed == PROCESSOR_METRIC_NAMES
    assert all(name.startswith("embedstream_") for name in METRIC_NAMES)
