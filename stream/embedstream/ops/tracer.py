"""Chooses the processor's tracer: the no-op one with tracing off, else OpenTelemetry's.

`embedstream.ops.tracing` (and with it opentelemetry, an optional extra) is imported only
when tracing is on, so an install without the extra runs, and a tracing setting without it
fails at start naming the setting.
"""

from __future__ import annotations

from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.errors import ConfigError
from embedstream.settings import Settings


def build_tracer(settings: Settings) -> Tracer:
    if settings.tracing == "off":
        return NULL_TRACER
    try:
        from embedstream.ops.tracing import tracer_from_settings
    except ImportError as exc:
        raise ConfigError(
            "tracing",
            f"is {settings.tracing} but OpenTelemetry is not installed "
            "(pip install 'embedstream[tracing]')",
        ) from exc
    return tracer_from_settings(settings)
