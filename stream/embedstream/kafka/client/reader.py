"""Read whole topics once, from the beginning to their ends as the first fetch reports them.

The reader joins no consumer group and commits nothing: it assigns every partition, seeks to
the beginning and stops once each partition's position has reached the last stable offset its
first fetch response carried. That end comes from the fetch rather than `end_offsets()`, which
the embedded demo broker answers wrongly (1 for every partition). With ``read_committed``
positions jump over transaction markers, so "done" is ``position >= end``, never equality.
Records produced after that first fetch are not returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from embedstream.errors import EmbedStreamError
from embedstream.kafka.client.clients import KafkaTarget, make_reader, partitions_of
from embedstream.kafka.client.connection import as_connection

_POLL_MS = 500


class ReadError(EmbedStreamError):
    """A topic could not be read completely: no broker, no such topic, or the timeout ran out."""

    reason = "verify_read"


@dataclass(frozen=True, slots=True)
class TopicRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


async def read_topic(
    kafka: KafkaTarget,
    topic: str,
    *,
    timeout_s: float = 120.0,
    client_id: str = "embedstream-verify",
) -> AsyncGenerator[TopicRecord, None]:
    """Every record of ``topic`` up to its end offsets at start, partition by partition in
    offset order (partitions interleave). Raises :class:`ReadError` after ``timeout_s``."""
    async for record in read_topics(kafka, [topic], timeout_s=timeout_s, client_id=client_id):
        yield record


async def read_topics(
    kafka: KafkaTarget,
    topics: Sequence[str],
    *,
    timeout_s: float = 120.0,
    client_id: str = "embedstream-verify",
    pick: Callable[[list[TopicPartition]], list[TopicPartition]] | None = None,
    isolation_level: str = "read_committed",
) -> AsyncGenerator[TopicRecord, None]:
    """Like :func:`read_topic` for several topics through one consumer; with ``pick``, only
    the partitions it picks of each topic's (given in partition order). ``read_uncommitted``
    reads to the high watermark: records of open and aborted transactions too."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    bootstrap = as_connection(kafka).bootstrap_servers
    consumer = make_reader(
        kafka,
        client_id=client_id,
        isolation_level=isolation_level,
        request_timeout_ms=max(1000, min(40_000, int(timeout_s * 1000))),
    )
    try:
        await asyncio.wait_for(consumer.start(), timeout_s)
    except (KafkaError, OSError, TimeoutError) as exc:
        await consumer.stop()
        raise ReadError(
            f"no Kafka broker answered at {bootstrap} within {timeout_s:g}s ({type(exc).__name__})"
        ) from exc
    try:
        tps: list[TopicPartition] = []
        for topic in topics:
            found = await partitions_of(consumer, topic)
            if not found:
                raise ReadError(f"topic {topic} does not exist on {bootstrap}")
            found = sorted(found, key=lambda tp: tp.partition)
            tps.extend(found if pick is None else pick(found))
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = {}
        pending = set(tps)
        while True:
            for tp in list(pending):
                if tp not in ends:
                    end = (
                        consumer.last_stable_offset(tp)
                        if isolation_level == "read_committed"
                        else consumer.highwater(tp)
                    )
                    if end is None:
                        continue  # no fetch response for it yet
                    ends[tp] = end
                if await consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
                    consumer.pause(tp)  # stop fetching what we no longer need
            if not pending:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                behind = {tp: (await consumer.position(tp), ends.get(tp, -1)) for tp in pending}
                raise ReadError(_timeout_message(timeout_s, behind))
            batch = await consumer.getmany(
                *pending, timeout_ms=max(1, min(_POLL_MS, int(remaining * 1000)))
            )
            for tp, records in batch.items():
                end = ends.get(tp, consumer.last_stable_offset(tp))
                for record in records:
                    if end is None or record.offset < end:
                        yield _convert(record)
    finally:
        await consumer.stop()


def _convert(record: Any) -> TopicRecord:
    return TopicRecord(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        headers=tuple(record.headers or ()),
        timestamp_ms=record.timestamp,
    )


def _timeout_message(timeout_s: float, behind: dict[TopicPartition, tuple[int, int]]) -> str:
    where = ", ".join(
        f"{tp.topic}[{tp.partition}] at {position} of {end}"
        for tp, (position, end) in sorted(behind.items())
    )
    return f"could not read to the end within {timeout_s:g}s: {where}"
