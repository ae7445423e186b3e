"""The fetcher reads the partitions of a backlog in step, oldest record first (issue 43): the
consumer hands over one partition's whole buffer before the next's, so without this a corpus
read twice reached the cache in two different orders, and the cache kept half of what its
policy keeps in the same order."""

from __future__ import annotations

import asyncio

import orjson
from aiokafka import TopicPartition
from embedstream.core.lanes import InputLane
from embedstream.kafka.consumption.fetcher import Fetcher
from embedstream.kafka.outputs.partitions import Assignment
from embedstream.settings import Settings
from embedstream.testing.kafka import FakeCluster, FakeConsumer

TOPIC = "low"


async def backlog(stamps: dict[int, range]) -> tuple[FakeConsumer, Fetcher]:
    """A partition per entry, its records written at these times (ms), served a whole
    partition first as aiokafka's buffer does."""
    cluster = FakeCluster({TOPIC: len(stamps)})
    for partition, times in stamps.items():
        for t in times:
            value = orjson.dumps({"id": f"{partition}-{t}", "text": "x"})
            cluster.produce(TOPIC, value, partition=partition, timestamp=t)
    consumer = FakeConsumer(cluster)
    await consumer.assign(set(cluster.partitions_of(TOPIC)))
    assignment = Assignment(lambda _topic: InputLane.LOW)
    for tp in sorted(cluster.partitions_of(TOPIC)):
        assignment.add(tp)
    return consumer, Fetcher(consumer, assignment, Settings())


async def fetch_times(fetcher: Fetcher, budget: int) -> list[int]:
    fetched = await fetcher.fetch(budget, asyncio.Event())
    assert fetched is not None
    return sorted(r.timestamp for _, records in fetched for r in records)


async def test_partitions_written_together_are_read_together() -> None:
    # Four partitions written round-robin (partition p at times p, p + 4, ...), as a producer
    # spreading keys writes them.
    _, fetcher = await backlog({p: range(p, 4_000, 4) for p in range(4)})
    first = await fetch_times(fetcher, 400)
    assert len(first) == 400 and max(first) < 500  # not partition 0's first 400 records
    read = first
    while len(read) < 4_000:
        read += await fetch_times(fetcher, 400)
    assert sorted(read) == list(range(4_000))
    # Within one fetch the records may come a partition at a time, never across fetches:
    # every fetch holds records about the same stretch of time.
    for start in range(0, 4_000, 400):
        assert max(read[start : start + 400]) - min(read[start : start + 400]) < 500


async def test_a_partition_behind_is_read_first_until_it_caught_up() -> None:
    # Partition 1 is 600 ms behind partition 0 in what it has left to read.
    consumer, fetcher = await backlog({0: range(600, 1_600), 1: range(0, 1_000)})
    ahead, behind = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    for _ in range(6):
        await fetch_times(fetcher, 100)
    # Partition 0's first slice told where it stands; partition 1 alone since, up to there.
    assert consumer.positions[ahead] <= 15
    assert 585 <= consumer.positions[behind] <= 615
    for _ in range(4):  # caught up: in step from now on
        await fetch_times(fetcher, 100)
    assert abs((consumer.positions[ahead] + 600) - consumer.positions[behind]) <= 30
