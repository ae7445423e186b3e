"""The tracing seam: what the engine and the Kafka shell ask of a tracer, and a no-op one.

`embedstream.ops.tracing` implements these Protocols with OpenTelemetry (the only importer of
it); everything else sees only this module. With tracing off every request carries the one
shared :data:`NULL_SPAN` and every call gets :data:`NULL_CALL_SPAN`: a method call that does
nothing, so the hot path pays no allocation and no clock read. Pure: Protocols and no-ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

# Kafka headers as a record carries them (values may be None).
RecordHeaders = Sequence[tuple[str, bytes | None]]
TRACEPARENT = "traceparent"  # the W3C Trace Context header, on inputs and outputs alike


class RequestSpan(Protocol):
    """The process span of one request, document or chunk, from admission to its outcome."""

    def traceparent(self) -> bytes | None:
        """The W3C header value for the outcome records (None: no header)."""

    def child(self, name: str, seq: int) -> RequestSpan:
        """A span inside this one (a document's chunk `seq`)."""

    def event(self, name: str) -> None:
        """Something happened to the request meanwhile (a chunk's retry in memory)."""

    def end(self, outcome: str) -> None:
        """Its outcome is written: result, cached, retry, dead_letter, complete, ..."""


class CallSpan(Protocol):
    """The client span of one provider call."""

    def end(self, *, input_tokens: int | None = None, error: str | None = None) -> None:
        """The call answered (`input_tokens` as the provider reported) or failed (`error`)."""


class Tracer(Protocol):
    def request(
        self, headers: RecordHeaders | None, topic: str, partition: int, offset: int
    ) -> RequestSpan:
        """The process span of a record read, continuing its `traceparent` if it has one."""

    def online(self, traceparent: str | None, key: str) -> RequestSpan:
        """The server span of an online request (caller `key`), continuing its W3C
        `traceparent` header if it has one."""

    def call(
        self, model: str, spans: Iterable[RequestSpan], *, size: int, reason: str, attempt: int
    ) -> CallSpan:
        """A provider call carrying the requests of `spans` (linked, not parented: a batch
        has no single parent). `spans` is consumed only when tracing is on."""

    def close(self) -> None:
        """Export what is still buffered (at the processor's stop)."""


class _NullRequestSpan:
    __slots__ = ()

    def traceparent(self) -> bytes | None:
        return None

    def child(self, name: str, seq: int) -> RequestSpan:
        return self

    def event(self, name: str) -> None:
        return None

    def end(self, outcome: str) -> None:
        return None


class _NullCallSpan:
    __slots__ = ()

    def end(self, *, input_tokens: int | None = None, error: str | None = None) -> None:
        return None


NULL_SPAN: RequestSpan = _NullRequestSpan()
NULL_CALL_SPAN: CallSpan = _NullCallSpan()


class NullTracer:
    """Tracing off: the shared no-op spans, nothing recorded."""

    def request(
        self, headers: RecordHeaders | None, topic: str, partition: int, offset: int
    ) -> RequestSpan:
        return NULL_SPAN

    def online(self, traceparent: str | None, key: str) -> RequestSpan:
        return NULL_SPAN

    def call(
        self, model: str, spans: Iterable[RequestSpan], *, size: int, reason: str, attempt: int
    ) -> CallSpan:
        return NULL_CALL_SPAN

    def close(self) -> None:
        return None


NULL_TRACER: Tracer = NullTracer()
