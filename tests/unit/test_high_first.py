"""The high lane under a low flood, in the Kafka shell: the fetcher hands over high records
before an older low backlog, so they do not wait behind low work fetched ahead of them."""

from __future__ import annotations

import asyncio

import orjson
from aiokafka import TopicPartition
from embedstream.core.lanes import InputLane
from embedstream.kafka.consumption.fetcher import Fetcher
from embedstream.kafka.outputs.partitions import Assignment
from embedstream.settings import Settings
from embedstream.testing.kafka import FakeCluster, FakeConsumer

HIGH, LOW = TopicPartition("high", 0), TopicPartition("low", 0)
# A buffer whose derived item bound is 1000: the byte bound at 1 KiB an item.
THOUSAND_ITEMS = Settings(max_buffered_bytes=1000 * 1024, max_event_bytes=4096)


def lane_of(topic: str) -> InputLane:
    return InputLane.HIGH if topic == "high" else InputLane.LOW


async def flooded_consumer() -> FakeConsumer:
    """300 low records, then one high record, served oldest first as aiokafka's buffer does."""
    cluster = FakeCluster({"high": 1, "low": 1})
    for i in range(300):
        cluster.produce("low", orjson.dumps({"id": f"low-{i}", "text": "x"}), b"low")
    cluster.produce("high", orjson.dumps({"id": "high-0", "text": "x"}), b"high")
    consumer = FakeConsumer(cluster)
    consumer.oldest_first = True
    await consumer.assign({HIGH, LOW})
    return consumer


async def test_the_fake_consumer_serves_the_older_low_backlog_first() -> None:
    consumer = await flooded_consumer()
    first = await consumer.getmany(max_records=10)
    assert list(first) == [LOW]  # what the processor would get with one call for all lanes
    assert [r.offset for r in first[LOW]] == list(range(10))


async def test_a_high_record_is_handed_over_before_an_older_low_backlog() -> None:
    consumer = await flooded_consumer()
    assignment = Assignment(lane_of)
    assignment.add(HIGH)
    assignment.add(LOW)
    fetcher = Fetcher(consumer, assignment, Settings())
    fetched = await fetcher.fetch(10, asyncio.Event())
    assert fetched is not None
    by_partition = {state.tp: [r.offset for r in records] for state, records in fetched}
    assert by_partition[HIGH] == [0]
    assert by_partition[LOW] == list(range(9))  # the rest of the budget, no more
    assert fetched[0][0].tp == HIGH  # admitted first


async def test_a_stop_during_the_high_fetch_returns_none() -> None:
    consumer = await flooded_consumer()
    assignment = Assignment(lane_of)
    assignment.add(HIGH)
    stopping = asyncio.Event()
    stopping.set()
    consumer.cluster.logs[HIGH].clear()  # nothing buffered: the fetch would wait
    consumer.cluster.appended[HIGH].clear()
    assert await Fetcher(consumer, assignment, Settings()).fetch(10, stopping) is None


FLOOD, TRICKLE = TopicPartition("flood", 0), TopicPartition("trickle", 0)


async def flooded_lane() -> tuple[FakeConsumer, Assignment]:
    """Two low topics of one lane: 300 records of the flood, then one of the trickle, served
    oldest first; the flood already holds 50 items in the buffer, the trickle none."""
    cluster = FakeCluster({"flood": 1, "trickle": 1})
    for i in range(300):
        cluster.produce("flood", orjson.dumps({"id": f"f-{i}", "text": "x"}), b"f")
    cluster.produce("trickle", orjson.dumps({"id": "t-0", "text": "x"}), b"t")
    consumer = FakeConsumer(cluster)
    consumer.oldest_first = True
    await consumer.assign({FLOOD, TRICKLE})
    assignment = Assignment(lambda topic: InputLane.LOW)
    flood = assignment.add(FLOOD)
    assignment.add(TRICKLE)
    for offset in range(50):
        flood.offsets.track(offset)
    return consumer, assignment


async def test_a_trickle_under_its_share_is_handed_over_before_a_floods_backlog() -> None:
    consumer, assignment = await flooded_lane()
    fetcher = Fetcher(consumer, assignment, THOUSAND_ITEMS)
    fetcher.apply_backpressure(provider_blocked=False)  # the shares decide who goes first
    fetched = await fetcher.fetch(10, asyncio.Event())
    assert fetched is not None
    by_partition = {state.tp: [r.offset for r in records] for state, records in fetched}
    assert by_partition[TRICKLE] == [0]
    assert by_partition[FLOOD] == list(range(9))
    assert fetched[0][0].tp == TRICKLE  # admitted first


async def test_with_the_lane_idle_nobody_is_put_first() -> None:
    """Nothing held: no backlog to jump, the flood's records come first (the consumer had
    them first); the trickle's one record rides along, read in step (oldest first)."""
    consumer, assignment = await flooded_lane()
    state = assignment.get(FLOOD)
    assert state is not None
    for offset in range(50):
        state.offsets.complete(offset)
    fetcher = Fetcher(consumer, assignment, THOUSAND_ITEMS)
    fetcher.apply_backpressure(provider_blocked=False)
    fetched = await fetcher.fetch(10, asyncio.Event())
    assert fetched is not None
    by_partition = {state.tp: [r.offset for r in records] for state, records in fetched}
    assert fetched[0][0].tp == FLOOD
    assert by_partition == {FLOOD: list(range(9)), TRICKLE: [0]}


async def test_low_results_waiting_for_the_broker_leave_high_its_reserve() -> None:
    """A flood's results waiting for their acks count their bytes against the bound, and can
    hold more than all of it: the low lane pauses, the high lane keeps fetching within its
    reserve (before it, both paused and the fetch budget was 0: the byte pressure reached
    1.26x the bound in a kafka-flood run)."""
    consumer = await flooded_consumer()
    assignment = Assignment(lane_of)
    assignment.add(HIGH)
    low = assignment.add(LOW)
    for offset in range(100):
        low.offsets.track(offset, size=10)
        low.offsets.hold_bytes(offset, 20_000)  # its result, waiting for the ack: 2 MB in all
    fetcher = Fetcher(consumer, assignment, THOUSAND_ITEMS)
    assert fetcher.pressure > 1000 and fetcher.high_pressure == 0
    fetcher.apply_backpressure(provider_blocked=False)
    high = assignment.get(HIGH)
    assert high is not None and not high.paused and low.paused
    budget = fetcher.budget()
    assert budget > 0
    fetched = await fetcher.fetch(budget, asyncio.Event())
    assert fetched is not None
    assert [(state.tp, [r.offset for r in records]) for state, records in fetched] == [(HIGH, [0])]
