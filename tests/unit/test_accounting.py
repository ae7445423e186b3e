"""Accounting per source through the Kafka shell on the in-memory cluster: requests, provider
tokens (reported, or estimated where the provider reports none), calls' share and cache
savings, each by the input topic the request came in on, with bounded labels."""

from __future__ import annotations

import orjson
import pytest
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import Reason, TransientError
from embedstream.kafka.consumption.attribution import Sources
from embedstream.ops.accounting import MAX_SOURCES, OTHER, SourceAccounting
from embedstream.ops.metrics import Metrics
from embedstream.testing import eventually, vector_for
from embedstream.testing.kafka import FakeRecord
from embedstream.wire import SOURCE_TOPIC
from prometheus_client import CollectorRegistry

from tests.unit.harness import HIGH, LOW, NAMES, GatedBackend, running


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


class Reports:
    """Reports `per_text` tokens per input as usage (0: reports none); fails 'flaky' once."""

    def __init__(self, per_text: int) -> None:
        self.per_text = per_text
        self.failed = False

    async def embed(self, call: BatchCall) -> BatchOutcome:
        if not self.failed and any("flaky" in t for t in call.texts):
            self.failed = True
            raise TransientError(Reason.MALFORMED_RESPONSE, "no JSON")
        vectors: list[list[float] | str] = [vector_for(t) for t in call.texts]
        return BatchOutcome(vectors, 2, self.per_text * len(call.texts), 0.0)

    async def close(self) -> None:
        return None


async def test_tokens_calls_and_requests_are_counted_per_source() -> None:
    metrics = Metrics()
    async with running(Reports(10), metrics=metrics, max_batch_size=4, max_wait_ms=200) as h:
        for i in range(3):
            h.request(LOW, f"l{i}", f"low text {i}")
        h.request(HIGH, "h0", "high text")
        await eventually(lambda: len(h.results()) == 4)
        await h.service.processor.parts.outcomes.flush()
    assert value(metrics, "embedstream_source_requests_total", source=LOW.topic) == 3
    assert value(metrics, "embedstream_source_requests_total", source=HIGH.topic) == 1
    low = value(metrics, "embedstream_source_tokens_total", source=LOW.topic, basis="reported")
    high = value(metrics, "embedstream_source_tokens_total", source=HIGH.topic, basis="reported")
    assert (low, high) == (30, 10)  # the reported usage, shared by estimate
    calls = [value(metrics, "embedstream_source_calls_total", source=t)
             for t in (LOW.topic, HIGH.topic)]  # fmt: skip
    api_calls = value(metrics, "embedstream_api_calls_total", outcome="ok")
    assert sum(calls) == api_calls  # the shares of each call add up to one call
    assert calls[0] > 0 and calls[1] > 0


async def test_without_reported_usage_the_estimates_are_counted_as_estimated() -> None:
    metrics = Metrics()
    async with running(Reports(0), metrics=metrics) as h:
        h.request(LOW, "a", "some words to estimate")
        await eventually(lambda: len(h.results()) == 1)
        await h.service.processor.parts.outcomes.flush()
    estimated = value(metrics, "embedstream_source_tokens_total", source=LOW.topic,
                      basis="estimated")  # fmt: skip
    assert estimated > 0
    assert value(metrics, "embedstream_source_tokens_total", source=LOW.topic,
                 basis="reported") == 0  # fmt: skip


async def test_a_retry_is_accounted_to_the_topic_its_request_came_in_on_and_counted_once() -> None:
    metrics = Metrics()
    async with running(Reports(5), metrics=metrics, retry_backoff_base_ms=1) as h:
        h.request(LOW, "r", "flaky text")
        await eventually(lambda: len(h.results()) == 1)
        await h.service.processor.parts.outcomes.flush()
        assert len(h.cluster.records(NAMES.retry)) == 1
    assert value(metrics, "embedstream_source_requests_total", source=LOW.topic) == 1
    assert value(metrics, "embedstream_source_requests_total", source=NAMES.retry) == 0
    assert value(metrics, "embedstream_source_tokens_total", source=LOW.topic,
                 basis="reported") == 5  # fmt: skip
    assert value(metrics, "embedstream_source_calls_total", source=NAMES.retry) == 0


async def test_cache_hits_are_savings_of_their_source() -> None:
    metrics = Metrics()
    backend = GatedBackend()
    async with running(backend, metrics=metrics, cache="memory") as h:
        h.request(LOW, "first", "the same text")
        await eventually(lambda: len(h.results()) == 1)
        h.request(HIGH, "again", "the same text")
        await eventually(lambda: len(h.results()) == 2)
        await h.service.processor.parts.outcomes.flush()
        cached = {orjson.loads(r.value or b"")["id"]: orjson.loads(r.value or b"")["cached"]
                  for r in h.results()}  # fmt: skip
    assert cached == {"first": False, "again": True}
    assert value(metrics, "embedstream_source_cache_hits_total", source=HIGH.topic) == 1
    assert value(metrics, "embedstream_source_cache_hits_total", source=LOW.topic) == 0
    saved = value(metrics, "embedstream_source_cache_tokens_saved_total", source=HIGH.topic)
    assert saved == value(metrics, "embedstream_cache_tokens_saved_total")
    assert saved > 0


def test_labels_are_bounded_past_max_sources() -> None:
    accounting = SourceAccounting(CollectorRegistry())
    labels = {accounting.label(f"topic-{i}") for i in range(MAX_SOURCES + 10)}
    assert len(labels) == MAX_SOURCES + 1 and OTHER in labels
    assert accounting.label("topic-0") == "topic-0"  # a known source keeps its label


@pytest.mark.parametrize(
    ("topic", "headers", "source"),
    [
        (LOW.topic, [], LOW.topic),
        (HIGH.topic, [(SOURCE_TOPIC, b"anything")], HIGH.topic),  # only a retry's header counts
        (NAMES.retry, [(SOURCE_TOPIC, HIGH.topic.encode())], HIGH.topic),
        (NAMES.retry, [(SOURCE_TOPIC, b"not-a-configured-topic")], NAMES.retry),  # bounded
        (NAMES.retry, [], NAMES.retry),  # a retry record of an older version
    ],
)
def test_the_source_of_a_record(topic: str, headers: list[tuple[str, bytes]], source: str) -> None:
    sources = Sources(NAMES, NAMES.inputs)
    assert sources.of(FakeRecord(topic, 0, 0, None, b"", headers)) == source


async def test_every_configured_source_has_its_series_from_the_start() -> None:
    metrics = Metrics()
    async with running(GatedBackend(), metrics=metrics):
        pass
    for topic in NAMES.inputs:
        assert (
            metrics.registry.get_sample_value(
                "embedstream_source_cache_tokens_saved_total", {"source": topic}
            )
            == 0.0
        )
        assert (
            metrics.registry.get_sample_value(
                "embedstream_source_tokens_total", {"source": topic, "basis": "estimated"}
            )
            == 0.0
        )
