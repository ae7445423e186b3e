"""Builds the output records (results, retries, dead letters) and hands each to a writer.

At-least-once: the direct writer returns once the broker acknowledged the record, and the
processor commits an input offset only after that. Exactly-once: the staging writer parks the
record in its input partition's outbox, and the partition's transaction writes it together
with the offset commit (kafka/transactions.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from aiokafka.errors import KafkaError

from embedstream.core.lanes import Priority
from embedstream.kafka.admin import TopicNames
from embedstream.kafka.protocols import Producer
from embedstream.kafka.work import Origin, WorkItem
from embedstream.wire import (
    TRUNCATED_FROM,
    EmbedResult,
    Failure,
    Headers,
    RetryState,
    dead_letter_headers,
)

log = logging.getLogger(__name__)


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
    # The assignment (a PartitionState) the input was read under. Exactly-once stages an
    # output only if it is still the partition's current one: work finished after a revoke
    # must not join the transactions of a later assignment, which reads that input again.
    owner: object | None = None


class Writer(Protocol):
    async def write(self, output: Output) -> None: ...


class OutputUnwritable(Exception):
    """The broker did not take an output for `WRITE_RETRY_S`: the item stays unfinished (its
    offset uncommitted), so it is redone later rather than lost."""


WRITE_RETRY_S = 300.0


class DirectWriter:
    """Produces at once and returns when the broker has acknowledged (at-least-once).

    A failed write (broker down longer than the producer's request timeout) is retried with
    backoff: the item cannot be committed before its output is written anyway."""

    def __init__(
        self, producer: Producer, retry_for_s: float = WRITE_RETRY_S, first_delay_s: float = 0.5
    ) -> None:
        self._producer = producer
        self._retry_for_s = retry_for_s
        self._first_delay_s = first_delay_s

    async def write(self, output: Output) -> None:
        deadline = time.monotonic() + self._retry_for_s
        delay = self._first_delay_s
        while True:
            try:
                await self._producer.send_and_wait(
                    output.topic, output.value, key=output.key, headers=output.headers
                )
                return
            except (KafkaError, OSError) as exc:
                if time.monotonic() + delay > deadline:
                    raise OutputUnwritable(f"{output.topic}: {exc!r}") from exc
                log.warning("write to %s failed (%r); retrying in %.1fs", output.topic, exc,
                            delay)  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)


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
            Output(item.origin, self._topics.results, key, result.encode(), headers, item.partition)
        )

    async def retry(self, item: WorkItem, not_before_ms: int, error: str) -> None:
        state = RetryState(
            attempts=item.attempts,
            not_before_ms=not_before_ms,
            first_error=item.first_error or error,
            first_failure_ms=item.first_failure_ms or now_ms(),
            high_priority=item.priority is Priority.HIGH,
            enqueued_at_ms=item.timestamp_ms,
        )
        headers = state.headers()
        key = item.request.id.encode()
        await self._writer.write(
            Output(item.origin, self._topics.retry, key, item.raw, headers, item.partition)
        )

    async def dead_letter(
        self, raw: bytes | None, key: bytes | None, failure: Failure, owner: object | None
    ) -> None:
        origin = Origin(failure.source_topic, failure.source_partition, failure.source_offset)
        headers = dead_letter_headers(failure)
        await self._writer.write(
            Output(origin, self._topics.dead_letters, key, raw, headers, owner)
        )
