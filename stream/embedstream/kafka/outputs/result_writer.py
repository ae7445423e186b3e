"""Builds the output records (results, retries, dead letters) and hands each to a writer.

At-least-once: the direct writer returns once the broker acknowledged the record, and the
processor commits an input offset only after that. Exactly-once: the staging writer parks the
record in its input partition's outbox, and the partition's transaction writes it together
with the offset commit (kafka/outputs/transactions.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from aiokafka.errors import KafkaError

from embedstream.core.clock import Clock
from embedstream.core.lanes import Priority
from embedstream.core.tracing import NULL_SPAN, TRACEPARENT
from embedstream.kafka.client.partitioning import murmur2, partition_for
from embedstream.kafka.client.protocols import Producer
from embedstream.kafka.client.topics import TopicNames
from embedstream.kafka.outputs.gathered_writes import GatheredWrites, NotAllWritten
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.wire import (
    BACKFILL_HEADER,
    SOURCE_TOPIC,
    TRUNCATED_FROM,
    ChunkResult,
    DocumentComplete,
    DocumentIncomplete,
    EmbedResult,
    Failure,
    Headers,
    RetryState,
    Vector,
    dead_letter_headers,
    result_json,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class Output(NamedTuple):
    """One record to write, and the input record it answers (a NamedTuple rather than a
    frozen dataclass: one is built per result)."""

    origin: Origin
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    # The assignment (a PartitionState) the input was read under. Exactly-once stages an
    # output only if it is still the partition's current one: work finished after a revoke
    # must not join the transactions of a later assignment, which reads that input again.
    owner: object | None = None
    # A partition of its own choosing (the changelog's state records); None: by key.
    partition: int | None = None


class Writer(Protocol):
    async def write(self, output: Output) -> None: ...

    async def write_many(self, outputs: Sequence[Output]) -> None: ...


class OutputUnwritable(Exception):
    """The broker did not take an output for `WRITE_RETRY_S`: the item stays unfinished (its
    offset uncommitted), so it is redone later rather than lost."""


class OutputsUnwritable(OutputUnwritable, NotAllWritten):
    """Some outputs of a `write_many` were not written (see `failures`); the others were."""


WRITE_RETRY_S = 300.0
_tuple_new = tuple.__new__


# Writers of ours waiting at once to join one partition's producer queue (see DirectWriter).
ENQUEUE_WAITERS = 2


class DirectWriter:
    """Produces at once and returns when the broker has acknowledged (at-least-once).

    Many outputs at once go out as record batches per partition (`write_many`): thousands of
    concurrent `send()` calls would instead contend for each partition's open batch, every one
    waking on every drain (in a profile, seven send attempts per record). A failed write
    (broker down longer than the producer's request timeout) is retried with backoff: the
    item cannot be committed before its output is written anyway.

    Every lane's outputs share the one producer. A second producer for the high lane's
    (``high_results_producer``, removed) measured no gain: the high tail under a flood is the
    event loop's, not the producer's queue (benchmarks: lanes)."""

    def __init__(
        self,
        producer: Producer,
        clock: Clock,
        retry_for_s: float = WRITE_RETRY_S,
        first_delay_s: float = 0.5,
    ) -> None:
        self._producer = producer
        self._monotonic = clock.monotonic
        self._retry_for_s = retry_for_s
        self._first_delay_s = first_delay_s
        # Two batches of ours at most wait to enter each partition's queue (one goes in at the
        # next drain, the other is ready for the one after). aiokafka's
        # add_batch subtracts the whole time waited so far on every wake-up, so dozens of
        # writers woken at each drain ran out of request_timeout_ms within seconds
        # (KafkaTimeoutError by the thousand a minute in a soak on Apache Kafka, and commits
        # held back while they were retried).
        self._enqueue_slots: dict[tuple[str, int], asyncio.Semaphore] = {}

    async def write(self, output: Output) -> None:
        await self._retrying(output.topic, lambda: self._send_one(output))

    async def write_many(self, outputs: Sequence[Output]) -> None:
        """Raises `OutputsUnwritable` naming the outputs not written when a partition's batch
        was given up; the other partitions' outputs are written."""
        by_partition: dict[tuple[str, int], list[int]] = {}  # positions in `outputs`
        partitions_of: dict[str, list[int]] = {}  # a call's outputs share a topic or two
        for position, output in enumerate(outputs):
            topic = output.topic
            partitions = partitions_of.get(topic)
            if partitions is None:
                partitions = partitions_of[topic] = sorted(
                    await self._producer.partitions_for(topic)
                )
            partition = output.partition
            if partition is None:
                key = output.key  # (partition_for, without its call for a keyed output)
                if key is None:
                    partition = partition_for(key, partitions)
                else:
                    partition = partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]
            positions = by_partition.get((topic, partition))
            if positions is None:
                by_partition[topic, partition] = [position]
            else:
                positions.append(position)
        failures: dict[int, BaseException] = {}
        for given_up in await asyncio.gather(
            *(self._write_partition(q, positions, outputs) for q, positions in by_partition.items())
        ):
            failures.update(given_up)
        if failures:
            raise OutputsUnwritable(failures)

    async def _write_partition(
        self, queue: tuple[str, int], positions: list[int], outputs: Sequence[Output]
    ) -> dict[int, BaseException]:
        """One partition's outputs, as few batches as fit, one after another;
        the positions of those given up, and why. Each batch is retried on its own: resending
        outputs the broker already took would duplicate them."""
        mine = [outputs[p] for p in positions]
        start = 0
        while start < len(mine):
            send = functools.partial(self._send_batch, queue, mine, start)
            try:
                start += await self._retrying(queue[0], send)
            except OutputUnwritable as exc:  # the batches before this one are written
                return dict.fromkeys(positions[start:], exc)
        return {}

    async def _send_batch(self, queue: tuple[str, int], outputs: list[Output], start: int) -> int:
        """Send outputs[start:] that fit one batch; how many went."""
        topic, partition = queue
        producer = self._producer
        batch = producer.create_batch()
        append = batch.append
        count = 0
        for index in range(start, len(outputs)):
            output = outputs[index]
            added = append(timestamp=None, key=output.key, value=output.value,
                           headers=output.headers)  # fmt: skip
            if added is None:  # the batch is full
                break
            count += 1
        if count == 0:  # larger than a batch: on its own
            await self._send_one(outputs[start])
            return 1
        slots = self._enqueue_slots.setdefault(queue, asyncio.Semaphore(ENQUEUE_WAITERS))
        async with slots:  # only while it joins the queue; acks are awaited outside
            delivered = await producer.send_batch(batch, topic, partition=partition)
        await delivered
        return count

    async def _send_one(self, output: Output) -> None:
        await self._producer.send_and_wait(
            output.topic, output.value, key=output.key, headers=output.headers,
            partition=output.partition,
        )  # fmt: skip

    async def _retrying(self, topic: str, send: Callable[[], Awaitable[T]]) -> T:
        deadline = self._monotonic() + self._retry_for_s
        delay = self._first_delay_s
        while True:
            try:
                return await send()
            except (KafkaError, OSError) as exc:
                if self._monotonic() + delay > deadline:
                    raise OutputUnwritable(f"{topic}: {exc!r}") from exc
                log.warning("write to %s failed (%r); retrying in %.1fs", topic, exc,
                            delay)  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)


class ResultValues(Protocol):
    """The results topic's records in a registry format (wire/formats/results.py)."""

    def encode(self, result: EmbedResult) -> bytes: ...
    def encode_chunk(self, chunk: ChunkResult) -> bytes: ...
    def encode_end(self, end: DocumentComplete | DocumentIncomplete) -> bytes: ...


class ResultWriter:
    def __init__(
        self,
        writer: Writer,
        topics: TopicNames,
        clock: Clock,
        result_values: ResultValues | None = None,
    ) -> None:
        self._writer = writer
        # Retries and dead letters: one coroutine an item, many in the same turn (a failed call's
        # items), written together as record batches.
        self._gathered: GatheredWrites[Output] = GatheredWrites(writer.write_many)
        self._topics = topics
        self._results_topic = topics.results
        self._clock_ms = clock.wall_ms
        # None: records as JSON (the hot path: a result's JSON written from its fields). Set
        # before consuming starts when output_format is a registry format (the schema ids come
        # from registering them): then results, chunks and final records all use it.
        self.result_values = result_values
        self._source_headers: dict[str, tuple[str, bytes]] = {}  # each source's, encoded once

    async def write_outputs(self, outputs: Sequence[Output]) -> None:
        """Result records, written as one batch per partition."""
        await self._writer.write_many(outputs)

    def result_output(
        self,
        item: WorkItem,
        model: str,
        vector: Vector,
        dimensions: int,
        tokens: int,
        latency_ms: float,
        cached: bool,
        index_generation: str,
    ) -> Output:
        """The record of a request's result, encoded: its vector is not needed any more."""
        request = item.request
        values = self.result_values
        if values is None:
            value = result_json(
                request.id, model, vector, dimensions, tokens, request.metadata, item.attempts,
                latency_ms, cached, index_generation,
            )  # fmt: skip
        else:
            value = values.encode(
                EmbedResult(request.id, model, vector, dimensions, tokens, request.metadata,
                            item.attempts, latency_ms, cached, index_generation)
            )  # fmt: skip
        # (Output(...), without the call of its generated __new__: one per result)
        return _tuple_new(Output, (item.origin, self._results_topic, request.id.encode(), value,
                                   self._result_headers(item), item.partition, None))  # fmt: skip

    def chunk_output(self, item: WorkItem, result: ChunkResult) -> Output:
        """The record of a document chunk's result, encoded."""
        values = self.result_values
        value = result.encode() if values is None else values.encode_chunk(result)
        return Output(item.origin, self._results_topic, result.key, value,
                      self._result_headers(item), item.partition)  # fmt: skip

    def _result_headers(self, item: WorkItem) -> Headers:
        headers: Headers = []
        if item.source:
            source = self._source_headers.get(item.source)
            if source is None:
                source = self._source_headers[item.source] = (SOURCE_TOPIC, item.source.encode())
            headers.append(source)
        if item.truncated_from is not None:
            headers.append((TRUNCATED_FROM, str(item.truncated_from).encode()))
        span = item.span  # (tracing off: no call a result)
        if span is not NULL_SPAN and (traceparent := span.traceparent()) is not None:
            headers.append((TRACEPARENT, traceparent))
        if item.priority is Priority.BACKFILL:  # the store lets the live stream's win
            headers.append((BACKFILL_HEADER, b"1"))
        return headers

    def end_value(self, end: DocumentComplete | DocumentIncomplete) -> bytes:
        """A document version's final record in the output format."""
        values = self.result_values
        return end.encode() if values is None else values.encode_end(end)

    async def document_record(
        self,
        key: bytes,
        value: bytes | None,
        origin: Origin,
        owner: object,
        traceparent: bytes | None = None,
        extra_headers: Headers | None = None,
    ) -> None:
        """A document's final record (or its tombstone, value None), keyed by doc_id."""
        headers: Headers = [] if traceparent is None else [(TRACEPARENT, traceparent)]
        headers += extra_headers or []
        await self._writer.write(Output(origin, self._topics.results, key, value, headers, owner))

    async def retry(self, item: WorkItem, not_before_ms: int, error: str) -> None:
        state = RetryState(
            attempts=item.attempts,
            not_before_ms=not_before_ms,
            first_error=item.first_error or error,
            first_failure_ms=item.first_failure_ms or self._clock_ms(),
            high_priority=item.priority is Priority.HIGH,
            enqueued_at_ms=item.timestamp_ms,
        )
        headers = state.headers()
        if item.source:  # read back, the retry is still accounted to its request's topic
            headers.append((SOURCE_TOPIC, item.source.encode()))
        if (traceparent := item.span.traceparent()) is not None:
            headers.append((TRACEPARENT, traceparent))  # read back, it continues the trace
        key = item.request.id.encode()
        await self._gathered.write(
            Output(item.origin, self._topics.retry, key, item.raw, headers, item.partition)
        )

    async def dead_letter(
        self,
        raw: bytes | None,
        key: bytes | None,
        failure: Failure,
        owner: object | None,
        extra_headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        origin = Origin(failure.source_topic, failure.source_partition, failure.source_offset)
        headers = dead_letter_headers(failure) + list(extra_headers)
        await self._gathered.write(
            Output(origin, self._topics.dead_letters, key, raw, headers, owner)
        )
