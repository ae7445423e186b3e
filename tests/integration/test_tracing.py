"""Tracing on Apache Kafka: a real processor exports OTLP/HTTP to a receiver this test runs.

The receiver decodes the protobuf payloads (opentelemetry-proto), so what is checked is what a
collector would get: trace ids from the producer's traceparent through the process spans to
the results' headers, the links of the call spans, their attributes, and a retry read back from
the retry topic continuing its request's trace.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiokafka import AIOKafkaProducer
from embedsim.config import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import topic_names
from embedstream.tools.embedded import free_port
from embedstream.wire import SOURCE_TOPIC, headers_dict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.integration.helpers import (
    create_all_topics,
    read_topic,
    request,
    running_service,
    settings_for,
    steady_traffic,
    wait_for_ids,
)

pytestmark = pytest.mark.integration

TRACE = "0af7651916cd43dd8448eb211c80319c"
PRODUCER_SPAN = "b7ad6b7169203331"


class OtlpReceiver:
    """An OTLP/HTTP trace endpoint: every span of every export, decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.resources: list[dict[str, Any]] = []
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _export(self, http: web.Request) -> web.Response:
        body = await http.read()
        if http.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            self.resources.append(
                {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            )
            for scope in resource_spans.scope_spans:
                self.spans.extend(scope.spans)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def __aenter__(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[OtlpReceiver]:
    async with OtlpReceiver() as server:
        yield server


def attributes(span: Span) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        found[a.key] = getattr(a.value, kind) if kind else None
    return found


async def publish_traced(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for request_id, traceparent in records:
            key, value = request(request_id, f"traced text {request_id}")
            headers = [("traceparent", traceparent.encode())]
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


async def test_traces_run_from_the_producer_through_the_calls_to_the_results(
    bootstrap: str, unique_prefix: str, receiver: OtlpReceiver
) -> None:
    config = SimulatorConfig(base_ms=2, fail_texts_containing="FLAKY", fail_times=1)
    names = topic_names(unique_prefix)
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, tracing="otlp_http",
            tracing_endpoint=receiver.url, tracing_service_name="traced-embedstream",
            retry_backoff_base_ms=50, max_wait_ms=100,
        )  # fmt: skip
        await create_all_topics(settings)
        traced = [(f"t{i}", f"00-{TRACE[:-2]}{i:02x}-{PRODUCER_SPAN}-01") for i in range(8)]
        async with running_service(settings):
            # Healthy traffic beside the flaky request: its failure is its own, so it costs an
            # attempt and goes through the retry topic.
            # A failed call fails its batch-mates too: the traced requests go once the flaky
            # one has its result, so theirs is a first and only try.
            async with steady_traffic(bootstrap, names.requests_low, rate_per_s=50) as steady:
                await asyncio.sleep(0.3)  # the provider has served calls before FLAKY fails
                await wait_for_ids(bootstrap, names.results, set(steady[:5]), 60)
                flaky = [("FLAKY-1", f"00-{TRACE[:-2]}ff-{PRODUCER_SPAN}-01")]
                await publish_traced(bootstrap, names.requests_low, flaky)
                await wait_for_ids(bootstrap, names.results, {"FLAKY-1"}, 60)
                await publish_traced(bootstrap, names.requests_low, traced)
                await asyncio.sleep(0.5)
            wanted = {i for i, _ in traced} | set(steady)
            await wait_for_ids(bootstrap, names.results, wanted, 60)
        # The service stopped: its tracer exported everything buffered.
    results = {r.key.decode(): headers_dict(r.headers) for r in
               await read_topic(bootstrap, names.results)}  # fmt: skip
    retries = await read_topic(bootstrap, names.retry)

    assert {"service.name": "traced-embedstream"}.items() <= receiver.resources[0].items()
    process = {s.span_id: s for s in receiver.spans if s.kind == Span.SPAN_KIND_CONSUMER}
    calls = [s for s in receiver.spans if s.kind == Span.SPAN_KIND_CLIENT]
    # Every traced request: a process span in the producer's trace, parented by its span, with
    # the messaging attributes; its result carries that trace and that span.
    for request_id, traceparent in traced:
        trace_id = bytes.fromhex(traceparent.split("-")[1])
        [span] = [s for s in process.values() if s.trace_id == trace_id]
        assert span.parent_span_id.hex() == PRODUCER_SPAN
        found = attributes(span)
        assert found["messaging.system"] == "kafka"
        assert found["messaging.destination.name"] == names.requests_low
        assert found["messaging.consumer.group.name"] == settings.group_id
        assert isinstance(found["messaging.kafka.offset"], int)
        assert found["embedstream.outcome"] == "result"
        _, result_trace, result_span, _ = results[request_id]["traceparent"].split("-")
        assert (result_trace, result_span) == (trace_id.hex(), span.span_id.hex())
        assert results[request_id][SOURCE_TOPIC] == names.requests_low
        # The call that carried it links to it, among the other requests of its batch.
        [call] = [c for c in calls if any(link.span_id == span.span_id for link in c.links)]
        assert call.parent_span_id == b""  # a root: a batch has no single parent
        found = attributes(call)
        assert found["gen_ai.operation.name"] == "embeddings"
        assert found["gen_ai.request.model"] == settings.model
        assert found["gen_ai.usage.input_tokens"] > 0
        assert found["embedstream.batch.size"] == len(call.links)  # ratio 1: all sampled
        assert found["embedstream.flush.reason"] in ("size", "tokens", "time", "priority")
    # The flaky request: first try ends in the retry topic, whose record carries the first
    # span; read back, the retry's span is its child, and the result carries the retry's span.
    flaky_trace = bytes.fromhex(f"{TRACE[:-2]}ff")
    first, second = sorted(
        (s for s in process.values() if s.trace_id == flaky_trace),
        key=lambda s: s.start_time_unix_nano,
    )
    assert attributes(first)["embedstream.outcome"] == "retry"
    assert attributes(second)["messaging.destination.name"] == names.retry
    assert second.parent_span_id == first.span_id
    [retry] = [r for r in retries if r.key == b"FLAKY-1"]
    assert headers_dict(retry.headers)["traceparent"].split("-")[2] == first.span_id.hex()
    assert headers_dict(retry.headers)[SOURCE_TOPIC] == names.requests_low
    assert results["FLAKY-1"]["traceparent"].split("-")[2] == second.span_id.hex()
    assert results["FLAKY-1"][SOURCE_TOPIC] == names.requests_low  # not the retry topic
    failed = [c for c in calls if any(link.span_id == first.span_id for link in c.links)]
    assert failed and all(c.status.code == c.status.STATUS_CODE_ERROR for c in failed)
    [retried] = [c for c in calls if any(link.span_id == second.span_id for link in c.links)]
    assert attributes(retried)["embedstream.attempt"] == 2
