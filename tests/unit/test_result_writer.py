from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError
from aiokafka.partitioner import DefaultPartitioner
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import GenerationIds
from embedstream.core.lanes import BucketKey, InputLane, Pending
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.engine.batcher import Batcher
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.errors import Reason, TransientError
from embedstream.kafka.client.topics import configured_topics
from embedstream.kafka.consumption.early_retries import WaitingRetries
from embedstream.kafka.outputs.document_runs import DocumentFlow
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import (
    ENQUEUE_WAITERS,
    DirectWriter,
    Output,
    OutputsUnwritable,
    OutputUnwritable,
    ResultWriter,
)
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.ops.metrics import Metrics
from embedstream.settings import load_settings
from embedstream.testing.clock import FakeClock
from embedstream.testing.kafka import FakeBatch, FakeCluster, FakeProducer

from tests.unit.test_outcomes_memory import work_item

OUTPUT = Output(Origin("in", 0, 7), "results", b"id", b"{}", [])


def writer(producer: FakeProducer, retry_for_s: float = 5) -> DirectWriter:
    """Retries a millisecond apart, in real time: the writer's backoff is what is tested."""
    return DirectWriter(producer, SYSTEM_CLOCK, retry_for_s=retry_for_s, first_delay_s=0.001)


def FlakyProducer(failures: int) -> FakeProducer:
    return FakeProducer(FakeCluster({"results": 1}), fail_next=failures)


async def test_a_failed_write_is_retried_until_the_broker_takes_it() -> None:
    producer = FlakyProducer(failures=3)
    await DirectWriter(producer, SYSTEM_CLOCK, retry_for_s=5, first_delay_s=0.001).write(OUTPUT)
    assert [(r.topic, r.value) for r in producer.sent] == [("results", b"{}")]


async def test_a_write_that_keeps_failing_gives_up_without_pretending_success() -> None:
    producer = FlakyProducer(failures=10**6)
    with pytest.raises(OutputUnwritable):
        await DirectWriter(producer, SYSTEM_CLOCK, retry_for_s=0.05, first_delay_s=0.001).write(
            OUTPUT
        )
    assert producer.sent == []


async def test_many_outputs_go_out_as_one_batch_per_partition_keyed_like_the_producer() -> None:
    cluster = FakeCluster({"results": 3})
    producer = FakeProducer(cluster)
    outputs = [
        Output(Origin("in", 0, i), "results", f"id-{i}".encode(), b"v", []) for i in range(50)
    ]
    await DirectWriter(producer, SYSTEM_CLOCK).write_many(outputs)
    records = cluster.records("results")
    assert sorted(r.key or b"" for r in records) == sorted(o.key or b"" for o in outputs)
    partitioner = DefaultPartitioner()
    for record in records:  # the partition a plain send() would have chosen for the key
        assert record.partition == partitioner(record.key, [0, 1, 2], [0, 1, 2])


class CountingProducer(FakeProducer):
    """Counts the metadata look-ups a write makes."""

    asked = 0

    async def partitions_for(self, topic: str) -> set[int]:
        self.asked += 1
        return await super().partitions_for(topic)


async def test_a_call_of_outputs_asks_each_topics_partitions_once() -> None:
    cluster = FakeCluster({"results": 3, "retry": 2})
    producer = CountingProducer(cluster)
    outputs = [
        Output(Origin("in", 0, i), "results" if i % 5 else "retry", f"id-{i}".encode(), b"v", [])
        for i in range(50)
    ]
    await DirectWriter(producer, SYSTEM_CLOCK).write_many(outputs)
    assert producer.asked == 2  # not once per output
    assert len(cluster.records("results")) + len(cluster.records("retry")) == 50


async def test_a_batch_write_the_broker_refuses_is_retried_whole() -> None:
    cluster = FakeCluster({"results": 2})
    producer = FakeProducer(cluster, fail_next=1)
    outputs = [Output(Origin("in", 0, i), "results", b"k%d" % i, b"v", []) for i in range(10)]
    await DirectWriter(producer, SYSTEM_CLOCK, retry_for_s=5, first_delay_s=0.001).write_many(
        outputs
    )
    assert len({r.key for r in cluster.records("results")}) == 10


async def test_a_refused_batch_is_retried_alone_never_the_batches_already_written() -> None:
    cluster = FakeCluster({"results": 1})
    producer = FakeProducer(cluster)
    sent_batches = 0
    real_send_batch = producer.send_batch

    async def flaky(batch: Any, topic: str, *, partition: int) -> Any:
        nonlocal sent_batches
        sent_batches += 1
        if sent_batches == 2:  # the second batch of the partition is refused once
            raise KafkaTimeoutError()
        return await real_send_batch(batch, topic, partition=partition)

    producer.send_batch = flaky  # type: ignore[method-assign]
    producer.create_batch = lambda: FakeBatch(capacity=10)  # type: ignore[method-assign]
    outputs = [Output(Origin("in", 0, i), "results", b"k%d" % i, b"v", []) for i in range(30)]
    await DirectWriter(producer, SYSTEM_CLOCK, retry_for_s=5, first_delay_s=0.001).write_many(
        outputs
    )
    keys = [r.key or b"" for r in cluster.records("results")]
    assert sorted(keys) == sorted(o.key or b"" for o in outputs)  # each exactly once


class QueueingProducer(FakeProducer):
    """Joining a partition's queue takes a moment (aiokafka waits there for the batch
    before it to drain); records how many writers waited to join it at once."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self.joining = 0
        self.most_joining = 0

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
        self.joining += 1
        self.most_joining = max(self.most_joining, self.joining)
        try:
            await asyncio.sleep(0)  # a turn of the loop in which other writers may come
            return await super().send_batch(batch, topic, partition=partition)
        finally:
            self.joining -= 1


async def test_one_writer_at_a_time_joins_a_partitions_queue() -> None:
    """aiokafka's add_batch counts the time waited so far again at every wake-up, so many
    writers waiting on one partition ran out of their timeout within seconds."""
    cluster = FakeCluster({"results": 1})
    producer = QueueingProducer(cluster)
    writer = DirectWriter(producer, SYSTEM_CLOCK)
    calls = [
        [Output(Origin("in", 0, c * 10 + i), "results", b"k%d" % c, b"v", []) for i in range(10)]
        for c in range(20)
    ]
    await asyncio.gather(*(writer.write_many(outputs) for outputs in calls))
    assert len(cluster.records("results")) == 200
    assert producer.most_joining == ENQUEUE_WAITERS


class LeaderlessProducer(FakeProducer):
    """Partition 1 of every topic has no leader: its batches are refused."""

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
        if partition == 1:
            raise KafkaTimeoutError()
        return await super().send_batch(batch, topic, partition=partition)


async def test_a_partition_given_up_fails_only_the_outputs_bound_for_it() -> None:
    cluster = FakeCluster({"results": 2})
    outputs = [Output(Origin("in", 0, i), "results", b"k%d" % i, b"v", []) for i in range(20)]
    with pytest.raises(OutputsUnwritable) as refused:
        await writer(LeaderlessProducer(cluster), retry_for_s=0.01).write_many(outputs)
    written = {r.key for r in cluster.records("results")}
    assert written and {outputs[p].key for p in refused.value.failures}.isdisjoint(written)
    assert len(written) + len(refused.value.failures) == 20


async def test_retries_written_beside_a_refused_partitions_finish_their_items() -> None:
    """One turn's retry records, gathered: those the broker took finish their items (their
    offsets may commit), only those it refused stay unfinished. When every caller failed, an
    item whose record was written was read again after a restart and its retry written twice."""
    cluster = FakeCluster({"embed.retry": 2})
    clock, metrics = FakeClock(), Metrics()
    sink = ResultWriter(writer(LeaderlessProducer(cluster), retry_for_s=0.01),
                configured_topics(load_settings(env={})), clock)  # fmt: skip
    generations = GenerationIds(ChunkingRules(), "m")
    documents = DocumentFlow(sink, metrics, include_text=False, generations=generations)
    outcomes = KafkaOutcomes(sink, metrics, documents, clock)
    finished: list[int] = []
    state = PartitionState(TopicPartition("embed.requests.low", 0), InputLane.LOW,
                           on_progress=lambda: finished.append(1))  # fmt: skip
    items = [work_item(state, offset) for offset in range(8)]
    for item in items:
        state.offsets.track(item.origin.offset)
    error = TransientError(Reason.TIMEOUT, "no answer")
    failed = await asyncio.gather(*(outcomes.retry_later(i, error, 1.0) for i in items),
                                  return_exceptions=True)  # fmt: skip
    written = {r.key for r in cluster.records("embed.retry")}
    assert 0 < len(written) < 8
    assert [outcome is None for outcome in failed] == [
        item.request.id.encode() in written for item in items
    ]
    assert len(finished) == len(written)  # the items of the written ones, no others


async def test_a_handoff_finishes_the_held_retries_written_back_beside_refused_ones() -> None:
    """A revoke hands held retries back to the retry topic, then commits: one record the
    broker refused skipped the finishing of all (and the revoke's commit with it)."""
    cluster = FakeCluster({"embed.retry": 2})
    clock = FakeClock()
    sink = ResultWriter(writer(LeaderlessProducer(cluster), retry_for_s=0.01),
                configured_topics(load_settings(env={})), clock)  # fmt: skip
    finished: list[int] = []
    state = PartitionState(TopicPartition("embed.retry", 0), InputLane.RETRY,
                           on_progress=lambda: finished.append(1))  # fmt: skip
    waiting = WaitingRetries(Batcher(LIMITS, nothing_dispatched), clock)
    for offset in range(8):
        item = work_item(state, offset)
        item.not_before_ms = clock.wall_ms() + 60_000
        state.offsets.track(offset)
        waiting.hold_or_submit(item)
    await waiting.hand_back({state.tp}, sink)
    written = {r.key for r in cluster.records("embed.retry")}
    assert 0 < len(written) < 8 and len(finished) == len(written) and len(waiting) == 0


LIMITS = BatchLimits(max_items=8, max_tokens=1000, max_wait_s=0.1, scale_factor=10)


async def nothing_dispatched(
    key: BucketKey, batch: Sequence[Pending[WorkItem]], why: FlushReason
) -> None:
    raise AssertionError("held retries are not sent")
