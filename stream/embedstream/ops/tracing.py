"""OpenTelemetry tracing: the only importer of opentelemetry (an optional extra, `tracing`).

Implements the Protocols of `embedstream.core.tracing`:

- a process span (kind CONSUMER) per request read, continuing the record's W3C `traceparent`
  when it has one, with the messaging attributes; a document's chunks are child spans of their
  document's span;
- a client span per provider call with a LINK to each request span it carries (a batch has no
  single parent), the GenAI embeddings attributes, batch size, flush reason, attempt, status;
- the `traceparent` of a request's span, for the headers of its outcome records.

Sampling: new traces by `tracing_sample_ratio` (decided before the SDK is asked: an unsampled
new trace costs two random numbers), a continued trace by its sampled flag, and a call span
whenever one of the requests it carries is sampled (never orphaned by its own dice).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from embedstream.core.tracing import (
    NULL_CALL_SPAN,
    TRACEPARENT,
    CallSpan,
    RecordHeaders,
    RequestSpan,
)
from embedstream.errors import ConfigError
from embedstream.settings import Settings, header_map

_PROPAGATOR = TraceContextTextMapPropagator()
# A call carries up to max_batch_size requests, each one link; the SDK keeps 128 by default.
MIN_LINKS = 128
FAILED_OUTCOMES = frozenset({"dead_letter", "incomplete"})


class _ParentOrLinked(Sampler):
    """A span follows its parent's sampled flag; a root linked to a sampled span (a provider
    call carrying a sampled request) is sampled. Other roots reach the SDK only once
    `OtelTracer.request` has sampled them by the ratio, so they are sampled here."""

    def __init__(self) -> None:
        self._inner = ParentBased(ALWAYS_ON)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> Any:
        if links and any(link.context.trace_flags.sampled for link in links):
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return self._inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return "ParentOrLinked"


class OtelRequestSpan:
    __slots__ = ("_header", "_tracer", "span")

    def __init__(self, span: trace.Span, tracer: OtelTracer) -> None:
        self.span = span
        self._tracer = tracer
        self._header: bytes | None = None

    def traceparent(self) -> bytes | None:
        if self._header is None:
            ctx = self.span.get_span_context()
            self._header = (
                f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode()
            )
        return self._header

    def child(self, name: str, seq: int) -> RequestSpan:
        parent = trace.set_span_in_context(self.span)
        span = self._tracer.otel.start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes={"embedstream.chunk.seq": seq}
        )
        return OtelRequestSpan(span, self._tracer)

    def event(self, name: str) -> None:
        self.span.add_event(name)

    def end(self, outcome: str) -> None:
        if self.span.is_recording():
            self.span.set_attribute("embedstream.outcome", outcome)
            if outcome in FAILED_OUTCOMES:
                self.span.set_status(Status(StatusCode.ERROR, outcome))
            self.span.end()


class UnsampledSpan:
    """A new trace the ratio did not sample, decided before the SDK is asked (the hot path at
    a small ratio): ids for the outputs' traceparent (flag 00, so downstream does not record
    either), nothing recorded."""

    __slots__ = ("_header",)

    def __init__(self, trace_id: int, span_id: int) -> None:
        self._header = f"00-{trace_id:032x}-{span_id:016x}-00".encode()

    def traceparent(self) -> bytes | None:
        return self._header

    def child(self, name: str, seq: int) -> RequestSpan:
        return self

    def event(self, name: str) -> None:
        return None

    def end(self, outcome: str) -> None:
        return None


class OtelCallSpan:
    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def end(self, *, input_tokens: int | None = None, error: str | None = None) -> None:
        if error is not None:
            self.span.set_attribute("error.type", error)
            self.span.set_status(Status(StatusCode.ERROR, error))
        if input_tokens is not None:
            self.span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        self.span.end()


class OtelTracer:
    """Spans of one processor, on a TracerProvider of its own (never the global one: tests
    and several processors in one process each export their own)."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        service_name: str,
        sample_ratio: float,
        group_id: str,
        provider_name: str,
        max_links: int = MIN_LINKS,
        schedule_delay_ms: float = 1000.0,
        rng: random.Random | None = None,
    ) -> None:
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}),
            sampler=_ParentOrLinked(),
            span_limits=SpanLimits(max_links=max(MIN_LINKS, max_links)),
            shutdown_on_exit=False,
        )
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter, schedule_delay_millis=schedule_delay_ms)
        )
        self.otel: trace.Tracer = self.provider.get_tracer("embedstream")
        self._group_id = group_id
        self._provider_name = provider_name
        self._ratio = sample_ratio
        self._rng = rng or random.Random()

    def request(
        self, headers: RecordHeaders | None, topic: str, partition: int, offset: int
    ) -> RequestSpan:
        parent = None
        for name, value in headers or ():
            if name == TRACEPARENT and value:
                parent = _PROPAGATOR.extract({TRACEPARENT: value.decode("ascii", "replace")})
        if parent is None and self._rng.random() >= self._ratio:
            return UnsampledSpan(self._rng.getrandbits(128) or 1, self._rng.getrandbits(64) or 1)
        span = self.otel.start_span(f"process {topic}", context=parent, kind=SpanKind.CONSUMER)
        if span.is_recording():  # an unsampled span would drop them: not even built
            span.set_attributes({
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": topic,
                "messaging.destination.partition.id": str(partition),
                "messaging.kafka.offset": offset,
                "messaging.consumer.group.name": self._group_id,
            })  # fmt: skip
        return OtelRequestSpan(span, self)

    def online(self, traceparent: str | None, key: str) -> RequestSpan:
        parent = _PROPAGATOR.extract({TRACEPARENT: traceparent}) if traceparent else None
        if parent is None and self._rng.random() >= self._ratio:
            return UnsampledSpan(self._rng.getrandbits(128) or 1, self._rng.getrandbits(64) or 1)
        span = self.otel.start_span("POST /v1/embeddings", context=parent, kind=SpanKind.SERVER)
        if span.is_recording():
            span.set_attributes({
                "http.request.method": "POST",
                "http.route": "/v1/embeddings",
                "embedstream.lane": "online",
                "embedstream.caller": key,
            })  # fmt: skip
        return OtelRequestSpan(span, self)

    def call(
        self, model: str, spans: Iterable[RequestSpan], *, size: int, reason: str, attempt: int
    ) -> CallSpan:
        # One link per span: an online request's inputs share its span.
        contexts = {
            id(s): s.span.get_span_context()
            for s in spans
            if isinstance(s, OtelRequestSpan) and s.span.get_span_context().trace_flags.sampled
        }
        links = [Link(context) for context in contexts.values()]
        if not links:  # no sampled request aboard: nobody would follow this span
            return NULL_CALL_SPAN
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.provider.name": self._provider_name,
            "gen_ai.request.model": model,
            "embedstream.batch.size": size,
            "embedstream.flush.reason": reason,
            "embedstream.attempt": attempt,
        }
        span = self.otel.start_span(
            f"embeddings {model}",
            context=Context(),  # a root: linked to its requests, parented by none
            kind=SpanKind.CLIENT,
            attributes=attributes,
            links=links,
        )
        return OtelCallSpan(span)

    def close(self) -> None:
        """Export what is buffered, then stop the exporter."""
        self.provider.shutdown()


def otlp_exporter(settings: Settings) -> SpanExporter:
    """The exporter `tracing` names; ConfigError naming `tracing` if its package is missing."""
    headers = header_map(settings.tracing_headers, "tracing_headers")
    endpoint = settings.tracing_endpoint
    if settings.tracing == "otlp_http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = (endpoint or "http://localhost:4318").rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        return OTLPSpanExporter(endpoint=url, headers=headers or None, timeout=10)
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )
    except ImportError as exc:
        raise ConfigError(
            "tracing", "otlp_grpc needs opentelemetry-exporter-otlp-proto-grpc installed"
        ) from exc
    target = endpoint or "http://localhost:4317"
    return GrpcSpanExporter(
        endpoint=target, insecure=target.startswith("http://"), headers=headers or None
    )


def tracer_from_settings(settings: Settings) -> OtelTracer:
    return OtelTracer(
        otlp_exporter(settings),
        service_name=settings.tracing_service_name,
        sample_ratio=settings.tracing_sample_ratio,
        group_id=settings.group_id,
        provider_name=settings.provider_profile,
        max_links=settings.max_batch_size,
    )
