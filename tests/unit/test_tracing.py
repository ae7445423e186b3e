"""Tracing through the Kafka shell on the in-memory cluster, spans on the SDK's in-memory
exporter: process spans continue the incoming traceparent, a call span links every request
it carries, outcome records carry their request's traceparent, a retry continues its trace."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import ConfigError, PermanentItemError, Reason, TransientError
from embedstream.ops.tracer import build_tracer
from embedstream.ops.tracing import OtelTracer, UnsampledSpan
from embedstream.settings import load_settings
from embedstream.testing import eventually, vector_for
from embedstream.wire import SOURCE_TOPIC, headers_dict
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.unit.harness import HIGH, LOW, NAMES, GatedBackend, Harness, running

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0736"  # + two hex digits per test
PARENT_SPAN = "00f067aa0ba902b7"


def traceparent(suffix: str, sampled: bool = True) -> bytes:
    return f"00-{TRACE_ID}{suffix}-{PARENT_SPAN}-{'01' if sampled else '00'}".encode()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


def tracer_on(exporter: InMemorySpanExporter, ratio: float = 1.0) -> OtelTracer:
    return OtelTracer(exporter, service_name="test", sample_ratio=ratio, group_id="g",
                      provider_name="openai", schedule_delay_ms=10)  # fmt: skip


def finished(tracer: OtelTracer, exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    tracer.provider.force_flush()
    return list(exporter.get_finished_spans())


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def header(h: Harness, topic: str, name: str) -> list[str]:
    return [headers_dict(r.headers).get(name, "") for r in h.cluster.records(topic)]


async def test_a_request_continues_its_trace_and_the_call_links_every_request(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = tracer_on(exporter)
    async with running(GatedBackend(), tracer=tracer, max_batch_size=3, max_wait_ms=200) as h:
        for i in range(3):
            h.request(LOW, f"r{i}", f"text {i}", traceparent=traceparent(f"0{i}"))
        await eventually(lambda: len(h.results()) == 3)
        await h.service.processor.parts.outcomes.flush()
        spans = finished(tracer, exporter)
    process = sorted((s for s in spans if s.kind is SpanKind.CONSUMER), key=lambda s: s.name)
    [call] = [s for s in spans if s.kind is SpanKind.CLIENT]
    assert len(process) == 3
    assert {hex_trace(s) for s in process} == {f"{TRACE_ID}0{i}" for i in range(3)}
    for span in process:
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_SPAN
        assert span.attributes is not None
        assert span.attributes["messaging.system"] == "kafka"
        assert span.attributes["messaging.destination.name"] == LOW.topic
        assert span.attributes["messaging.destination.partition.id"] == "0"
        assert span.attributes["messaging.consumer.group.name"] == "g"
        assert span.attributes["embedstream.outcome"] == "result"
        assert span.attributes["messaging.kafka.offset"] in (0, 1, 2)
    # One call of three requests from three traces: a root linked to each, parented by none.
    assert call.parent is None
    assert {f"{link.context.span_id:016x}" for link in call.links} == {
        f"{s.context.span_id:016x}" for s in process if s.context is not None
    }
    assert call.attributes is not None
    assert call.attributes["gen_ai.operation.name"] == "embeddings"
    assert call.attributes["gen_ai.request.model"] == "text-embedding-3-small"
    assert call.attributes["gen_ai.usage.input_tokens"] == 3  # as the backend reported
    assert call.attributes["embedstream.batch.size"] == 3
    assert call.attributes["embedstream.flush.reason"] == "size"
    assert call.attributes["embedstream.attempt"] == 1
    # Each result carries its own request's span, so a consumer continues the trace.
    by_id = {orjson.loads(r.value or b"")["id"]: headers_dict(r.headers) for r in h.results()}
    for span in process:
        assert span.context is not None
        [request_id] = [
            k for k in by_id if by_id[k]["traceparent"].split("-")[1] == hex_trace(span)
        ]
        assert by_id[request_id]["traceparent"].split("-")[2] == f"{span.context.span_id:016x}"
        assert by_id[request_id][SOURCE_TOPIC] == LOW.topic


class FailOnce:
    """Fails the first call with a transient error that costs an attempt; then answers."""

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error

    async def embed(self, call: BatchCall) -> BatchOutcome:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return BatchOutcome([vector_for(t) for t in call.texts], 2, 0, 0.0)

    async def close(self) -> None:
        return None


async def test_a_retry_record_carries_the_trace_and_reading_it_back_continues_it(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = tracer_on(exporter)
    backend = FailOnce(TransientError(Reason.MALFORMED_RESPONSE, "no JSON"))
    async with running(backend, tracer=tracer, retry_backoff_base_ms=1) as h:
        h.request(HIGH, "r", "hello", traceparent=traceparent("aa"))
        await eventually(lambda: len(h.results()) == 1)
        await h.service.processor.parts.outcomes.flush()
        spans = finished(tracer, exporter)
        [retry_header] = header(h, NAMES.retry, "traceparent")
        [result_header] = header(h, NAMES.results, "traceparent")
        [retry_source] = header(h, NAMES.retry, SOURCE_TOPIC)
        [result_source] = header(h, NAMES.results, SOURCE_TOPIC)
    first, second = sorted(
        (s for s in spans if s.kind is SpanKind.CONSUMER), key=lambda s: s.start_time or 0
    )
    assert first.attributes is not None and first.attributes["embedstream.outcome"] == "retry"
    assert first.name == f"process {HIGH.topic}" and second.name == f"process {NAMES.retry}"
    assert hex_trace(first) == hex_trace(second) == f"{TRACE_ID}aa"
    assert first.context is not None and second.parent is not None
    assert second.parent.span_id == first.context.span_id  # the retry's parent: the first try
    assert retry_header.split("-")[2] == f"{first.context.span_id:016x}"
    assert second.context is not None
    assert result_header.split("-")[2] == f"{second.context.span_id:016x}"
    # The retry is still accounted to the topic the request came in on.
    assert retry_source == result_source == HIGH.topic
    failed, ok = sorted(
        (s for s in spans if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0
    )
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "malformed_response"
    assert ok.attributes is not None and ok.attributes["embedstream.attempt"] == 2
    assert ok.attributes["gen_ai.usage.input_tokens"] == 0


async def test_a_dead_letter_carries_the_trace_and_its_span_fails(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = tracer_on(exporter)
    backend = FailOnce(PermanentItemError(Reason.REJECTED, "no"))
    async with running(backend, tracer=tracer) as h:
        h.request(LOW, "r", "hello", traceparent=traceparent("bb"))
        await eventually(lambda: len(h.cluster.records(NAMES.dead_letters)) == 1)
        # The span ends once the write returns to the item's own path, a turn or two later.
        await eventually(
            lambda: any(s.kind is SpanKind.CONSUMER for s in finished(tracer, exporter))
        )
        spans = finished(tracer, exporter)
        [letter] = header(h, NAMES.dead_letters, "traceparent")
    [process] = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert process.status.status_code is StatusCode.ERROR
    assert process.context is not None
    assert letter == f"00-{TRACE_ID}bb-{process.context.span_id:016x}-01"


async def test_a_refused_record_passes_the_producers_traceparent_on() -> None:
    async with running(GatedBackend()) as h:  # tracing off: still carried on, as received
        h.cluster.produce(LOW.topic, b"not json", b"k", [("traceparent", traceparent("cc"))])
        await eventually(lambda: len(h.cluster.records(NAMES.dead_letters)) == 1)
        assert header(h, NAMES.dead_letters, "traceparent") == [traceparent("cc").decode()]


async def test_document_chunks_are_children_of_the_document_and_the_final_record_carries_it(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = tracer_on(exporter)
    small: dict[str, Any] = {"chunk_max_tokens": 40, "chunk_overlap_tokens": 0,
                             "chunk_min_tokens": 0}  # fmt: skip
    text = "\n\n".join(f"{w:_<5} " * 12 for w in ("alpha", "beta"))
    async with running(GatedBackend(), tracer=tracer, **small) as h:
        value = orjson.dumps({"doc_id": "d", "text": text})
        h.cluster.produce(LOW.topic, value, b"d", [("traceparent", traceparent("dd"))])
        await eventually(lambda: len(h.results()) == 3)
        await h.service.processor.parts.outcomes.flush()
        spans = finished(tracer, exporter)
        headers = [headers_dict(r.headers) for r in h.results()]
    [document] = [s for s in spans if s.name == f"process {LOW.topic}"]
    chunks = [s for s in spans if s.name.startswith("chunk ")]
    assert document.context is not None
    assert len(chunks) == 2
    assert all(
        c.parent is not None and c.parent.span_id == document.context.span_id for c in chunks
    )
    assert document.attributes is not None
    assert document.attributes["embedstream.outcome"] == "complete"
    assert {h["traceparent"].split("-")[1] for h in headers} == {f"{TRACE_ID}dd"}
    final = headers[-1]["traceparent"].split("-")[2]
    assert final == f"{document.context.span_id:016x}"  # the final record: the document's span
    chunk_ids = {f"{c.context.span_id:016x}" for c in chunks if c.context is not None}
    assert {h["traceparent"].split("-")[2] for h in headers[:-1]} == chunk_ids


async def test_sampling_new_traces_by_ratio_and_continued_ones_by_their_flag(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = tracer_on(exporter, ratio=0.0)
    async with running(GatedBackend(), tracer=tracer) as h:
        h.request(LOW, "new", "a")  # no traceparent: a new trace, sampled at ratio 0: never
        h.request(LOW, "unsampled", "b", traceparent=traceparent("ee", sampled=False))
        h.request(LOW, "sampled", "c", traceparent=traceparent("ff"))
        await eventually(lambda: len(h.results()) == 3)
        await h.service.processor.parts.outcomes.flush()
        spans = finished(tracer, exporter)
        flags = [int(tp.split("-")[3], 16) for tp in header(h, NAMES.results, "traceparent")]
    # Only the sampled request's span and its call's span were recorded.
    assert {hex_trace(s) for s in spans if s.kind is SpanKind.CONSUMER} == {f"{TRACE_ID}ff"}
    assert len([s for s in spans if s.kind is SpanKind.CLIENT]) == 1
    assert sorted(f & 1 for f in flags) == [0, 0, 1]  # unsampled traces still propagate


async def test_tracing_off_adds_no_traceparent() -> None:
    async with running(GatedBackend()) as h:
        h.request(LOW, "r", "hello", traceparent=traceparent("11"))
        await eventually(lambda: len(h.results()) == 1)
        assert "traceparent" not in headers_dict(h.results()[0].headers)


def test_tracing_without_opentelemetry_fails_at_start_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "embedstream.ops.tracing", None)  # as if not installed
    settings = load_settings(env={}, overrides={"tracing": "otlp_http"})
    with pytest.raises(ConfigError, match="embedstream\\[tracing\\]") as info:
        build_tracer(settings)
    assert info.value.setting == "tracing"
    assert build_tracer(load_settings(env={})).request(None, "t", 0, 0).traceparent() is None


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"tracing_endpoint": "collector:4318"}, "tracing_endpoint"),
        ({"tracing_headers": "[1]"}, "tracing_headers"),
        ({"tracing_headers": '{"a": 1}'}, "tracing_headers"),
        ({"tracing_sample_ratio": 1.5}, "tracing_sample_ratio"),
        ({"tracing_service_name": " "}, "tracing_service_name"),
    ],
)
def test_bad_tracing_settings_fail_naming_the_setting(
    overrides: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={}, overrides=overrides)
    assert info.value.setting == setting


def test_new_traces_are_sampled_by_the_ratio_once(exporter: InMemorySpanExporter) -> None:
    """The ratio decides once (not again in the SDK: 1% of 1% would record nothing)."""
    tracer = OtelTracer(exporter, service_name="t", sample_ratio=0.25, group_id="g",
                        provider_name="openai", rng=random.Random(7))  # fmt: skip
    spans = [tracer.request(None, "t", 0, offset) for offset in range(2000)]
    for span in spans:
        span.end("result")
    recorded = len(finished(tracer, exporter))
    assert 400 <= recorded <= 600  # 500 expected
    unsampled = [s.traceparent() for s in spans if isinstance(s, UnsampledSpan)]
    assert len(unsampled) == 2000 - recorded
    assert all(tp is not None and tp.endswith(b"-00") for tp in unsampled)
    assert len(set(unsampled)) == len(unsampled)  # each a trace of its own


async def test_an_online_request_continues_its_callers_trace_and_the_call_links_it(
    exporter: InMemorySpanExporter,
) -> None:
    import aiohttp
    from embedstream.app.gateway import Gateway
    from embedstream.testing import RecordingBackend

    tracer = tracer_on(exporter)
    settings = load_settings(env={}, overrides={"metrics_port": 0})
    gateway = Gateway(settings, RecordingBackend(), port=0, tracer=tracer)
    started = asyncio.Event()
    task = asyncio.create_task(gateway.run(started))
    await started.wait()
    try:
        url = f"http://127.0.0.1:{gateway.online.port}/v1/embeddings"
        headers = {"traceparent": traceparent("07").decode()}
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, json={"input": ["a", "b"]}, headers=headers) as answer,
        ):
            assert answer.status == 200
    finally:
        gateway.stop()
        await task
    spans = finished(tracer, exporter)
    [server] = [s for s in spans if s.kind is SpanKind.SERVER]
    [call] = [s for s in spans if s.kind is SpanKind.CLIENT]
    assert hex_trace(server) == f"{TRACE_ID}07"
    assert server.parent is not None and f"{server.parent.span_id:016x}" == PARENT_SPAN
    assert server.attributes is not None
    assert server.attributes["embedstream.lane"] == "online"
    assert server.attributes["embedstream.outcome"] == "200"
    assert server.context is not None
    assert [link.context.span_id for link in call.links] == [server.context.span_id]
