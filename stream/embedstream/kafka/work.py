"""A request in flight through the pipeline, with the Kafka coordinates it must be acked at."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.core.lanes import Priority
from embedstream.wire import EmbedRequest


@dataclass(frozen=True, slots=True)
class Origin:
    topic: str
    partition: int
    offset: int


@dataclass(slots=True)
class WorkItem:
    request: EmbedRequest
    origin: Origin
    raw: bytes
    priority: Priority
    timestamp_ms: int  # when the request first entered Kafka: end-to-end latency starts here
    attempts: int = 0  # calls already made for this request (carried across the retry topic)
    first_failure_ms: int | None = None
    first_error: str | None = None
    generation: int = 0  # assignment generation; stale once its partition is revoked
    model: str = ""  # resolved at intake: the request's, or the configured default
    encoding_format: str = "float"
    tokens: int = 0  # token estimate of the text as sent
    truncated_from: int | None = None  # estimate before truncation (oversize_policy=truncate)
    not_before_ms: int = 0  # a retry's earliest send time (from the retry record's headers)
