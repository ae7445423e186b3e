"""Builds the output records (results, retries, dead letters) and hands each to a writer.

At-least-once: the direct writer returns once the broker acknowledged the record, and the
processor commits an input offset only after that. Exactly-once: the staging writer parks the
record in its input partition's outbox, and the partition's transaction writes it together
with the offset commit (stream/transactions.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from stream.events import HEADER_PREFIX, EmbedResult, Failure, dead_letter_headers
from stream.topics import TopicNames
from stream.work import Origin, WorkItem

RETRY_ATTEMPTS = HEADER_PREFIX + "retry.attempts"
RETRY_NOT_BEFORE = HEADER_PREFIX + "retry.not_before"
RETRY_FIRST_ERROR = HEADER_PREFIX + "retry.first_error"
RETRY_FIRST_FAILURE = HEADER_PREFIX + "retry.first_failure"
PRIORITY = HEADER_PREFIX + "priority"
ENQUEUED_AT = HEADER_PREFIX + "enqueued_at"
# On a result whose text was cut to the per-input limit: the token estimate before cutting.
TRUNCATED_FROM = HEADER_PREFIX + "truncated_from_tokens"

Headers = list[tuple[str, bytes]]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Output:
    """One record to write, and the input record it answers."""

    origin: Origin
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers


class Writer(Protocol):
    async def write(self, output: Output) -> None: ...


class DirectWriter:
    """Produces at once and returns when the broker has acknowledged (at-least-once)."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    async def write(self, output: Output) -> None:
        await self._producer.send_and_wait(
            output.topic, output.value, key=output.key, headers=output.headers
        )


class Sink:
    def __init__(self, writer: Writer, topics: TopicNames) -> None:
        self._writer = writer
        self._topics = topics

    async def result(self, item: WorkItem, result: EmbedResult) -> None:
        headers: Headers = []
        if item.truncated_from is not None:
            headers.append((TRUNCATED_FROM, str(item.truncated_from).encode()))
        key = item.request.id.encode()
        await self._writer.write(
            Output(item.origin, self._topics.results, key, result.encode(), headers)
        )

    async def retry(self, item: WorkItem, not_before_ms: int, error: str) -> None:
        headers: Headers = [
            (RETRY_ATTEMPTS, str(item.attempts).encode()),
            (RETRY_NOT_BEFORE, str(not_before_ms).encode()),
            (RETRY_FIRST_ERROR, (item.first_error or error).encode()[:1024]),
            (RETRY_FIRST_FAILURE, str(item.first_failure_ms or now_ms()).encode()),
            (PRIORITY, item.priority.name.lower().encode()),
            (ENQUEUED_AT, str(item.timestamp_ms).encode()),
        ]
        key = item.request.id.encode()
        await self._writer.write(Output(item.origin, self._topics.retry, key, item.raw, headers))

    async def dead_letter(self, raw: bytes | None, key: bytes | None, failure: Failure) -> None:
        origin = Origin(failure.source_topic, failure.source_partition, failure.source_offset)
        headers = dead_letter_headers(failure)
        await self._writer.write(Output(origin, self._topics.dead_letters, key, raw, headers))
