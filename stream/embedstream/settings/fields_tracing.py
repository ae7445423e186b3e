"""Settings of tracing: the OpenTelemetry exporter, where it sends, and how much it samples."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, TracingMode, setting

_TR = Group.TRACING


@dataclass(frozen=True)
class TracingFields:
    tracing: TracingMode = setting(
        "off",
        "off, otlp_http or otlp_grpc: export a span per request and per provider call "
        "(needs the tracing extra; otlp_grpc also opentelemetry-exporter-otlp-proto-grpc).",
        _TR,
    )
    tracing_endpoint: str | None = setting(
        None,
        "OTLP collector URL; unset: http://localhost:4318 (HTTP, /v1/traces added) or "
        "http://localhost:4317 (gRPC).",
        _TR,
    )
    tracing_headers: str | None = setting(
        None,
        "JSON object of headers for every export (or a _FILE variable). Never logged.",
        _TR,
        secret=True,
    )
    tracing_sample_ratio: float = setting(
        1.0,
        "Share of new traces recorded (a request with a traceparent follows its sampled flag).",
        _TR,
        ge=0,
        le=1,
    )
    tracing_service_name: str = setting("embedstream", "service.name of the exported spans.", _TR)
