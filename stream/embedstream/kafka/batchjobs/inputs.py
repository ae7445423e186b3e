"""A job's input records, read again from their partition by offset, a slice at a time.

A job names its records by offset and keeps nothing else: its file is written, and later its
outcomes, from the records read again here (a reader in no group, committed records only). An
offset no longer in the partition (a document version compacted away behind a newer one, a
record past its retention) is simply not returned: the caller counts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from embedstream.core.batch_jobs import JobOffsets
from embedstream.errors import EmbedStreamError
from embedstream.kafka.client.clients import KafkaTarget, make_reader
from embedstream.kafka.client.protocols import Record
from embedstream.wire.batch_jobs import JobStream

POLL_MS = 500
READ_TIMEOUT_S = 300.0  # a job's records, read to its last offset

# How a job's records are read: (its stream, its offsets, records a slice) -> slices.
ReadRecords = Callable[[JobStream, JobOffsets, int], AsyncIterator[list[Record]]]


class JobRecordsUnread(EmbedStreamError):
    """A job's records could not be read (no broker, or not within READ_TIMEOUT_S)."""

    reason = "batch_records_unread"


def kafka_records(kafka: KafkaTarget, client_id: str) -> ReadRecords:
    def read(stream: JobStream, offsets: JobOffsets, size: int) -> AsyncIterator[list[Record]]:
        return _read(kafka, client_id, stream, offsets, size)

    return read


async def _read(
    kafka: KafkaTarget, client_id: str, stream: JobStream, offsets: JobOffsets, size: int
) -> AsyncIterator[list[Record]]:
    first, last = offsets.first, offsets.last
    if first is None or last is None:
        return
    tp = TopicPartition(stream.topic, stream.partition)
    consumer: Any = make_reader(kafka, client_id=f"{client_id}-batch-jobs")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_TIMEOUT_S
    try:
        await asyncio.wait_for(consumer.start(), READ_TIMEOUT_S)
        consumer.assign([tp])
        consumer.seek(tp, first)
        pending: list[Record] = []
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise JobRecordsUnread(f"{tp}: records {first}..{last} not read in time")
            got = await consumer.getmany(tp, timeout_ms=min(POLL_MS, int(remaining * 1000)),
                                         max_records=size)  # fmt: skip
            for record in got.get(tp, ()):
                if record.offset > last:
                    break
                if record.offset in offsets:
                    pending.append(record)
                if len(pending) >= size:
                    yield pending
                    pending = []
            position = await consumer.position(tp)
            end = consumer.last_stable_offset(tp)
            if position > last or (end is not None and position >= end and not got.get(tp)):
                break
        if pending:
            yield pending
    except (KafkaError, OSError, TimeoutError) as exc:
        raise JobRecordsUnread(f"{tp}: {exc!r}") from exc
    finally:
        await consumer.stop()
