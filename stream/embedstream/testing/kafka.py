"""An in-memory Kafka for unit tests: a cluster of partition logs, a consumer and a producer
that implement the shell's Protocols (`embedstream.kafka.client.protocols`).

Real code, shared by the tests: the processor loop runs against it unchanged, so revokes,
pauses, commits and retry records can be driven step by step without a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from aiokafka.partitioner import DefaultPartitioner

from embedstream.kafka.client.protocols import RebalanceListener, RecordHeaders

# The transactional fakes live apart (one job a module); imported from here as before.
from embedstream.testing.kafka_transactions import (
    FakeTransactionalProducer as FakeTransactionalProducer,
)
from embedstream.testing.kafka_transactions import (
    FakeTransactionManager as FakeTransactionManager,
)

_PARTITIONER = DefaultPartitioner()


@dataclass(frozen=True, slots=True)
class FakeRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders = ()
    timestamp: int = 0


class FakeCluster:
    """Topics as lists of records per partition; `produce` appends and wakes fetchers."""

    def __init__(self, topics: Mapping[str, int]) -> None:
        self.logs: dict[TopicPartition, list[FakeRecord]] = {
            TopicPartition(topic, p): [] for topic, count in topics.items() for p in range(count)
        }
        self.arrived = asyncio.Event()
        # The order each record was appended in, across partitions (per partition, parallel
        # to its log): a consumer serving the oldest first reads it.
        self.appended: dict[TopicPartition, list[int]] = {tp: [] for tp in self.logs}
        self._appends = 0
        self.group_offsets: dict[TopicPartition, int] = {}  # the group's committed offsets
        # Transactions: the current epoch of each transactional id, and committed transactions
        # whose markers are not written yet (only while `hold_markers`): their records and
        # offsets appear when the id is initialised again, as the broker completes a pending
        # transaction before it answers InitProducerId.
        self.txn_epochs: dict[str, int] = {}
        self.hold_markers = False
        self._incomplete: dict[str, list[Callable[[], None]]] = {}

    def init_transactions(self, transactional_id: str) -> int:
        for complete in self._incomplete.pop(transactional_id, []):
            complete()
        epoch = self.txn_epochs.get(transactional_id, -1) + 1
        self.txn_epochs[transactional_id] = epoch
        return epoch

    def commit_transaction(
        self,
        transactional_id: str,
        records: Sequence[tuple[str, bytes | None, bytes | None, RecordHeaders, int | None]],
        offsets: Mapping[TopicPartition, int],
    ) -> None:
        def complete() -> None:
            for topic, value, key, headers, partition in records:
                self.produce(topic, value, key, headers, partition=partition)
            self.group_offsets.update(offsets)

        if self.hold_markers:
            self._incomplete.setdefault(transactional_id, []).append(complete)
        else:
            complete()

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.logs if tp.topic == topic)

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: RecordHeaders = (),
        *,
        partition: int | None = None,
        timestamp: int = 0,
    ) -> FakeRecord:
        tps = self.partitions_of(topic)
        if not tps:
            raise KeyError(f"no topic {topic}")
        if partition is None:  # by key as aiokafka does (murmur2), whichever way it is sent
            ids = list(range(len(tps)))
            partition = _PARTITIONER(key, ids, ids) if key is not None else 0
        tp = TopicPartition(topic, partition)
        log = self.logs[tp]
        record = FakeRecord(topic, partition, len(log), key, value, tuple(headers), timestamp)
        log.append(record)
        self.appended[tp].append(self._appends)
        self._appends += 1
        self.arrived.set()
        return record

    async def read_to_end(
        self, topic: str, pick: Callable[[list[TopicPartition]], list[TopicPartition]]
    ) -> AsyncIterator[FakeRecord]:
        """The picked partitions' records as they are now (a reader in no group)."""
        for tp in pick(self.partitions_of(topic)):
            for record in list(self.logs[tp]):
                yield record

    def records(self, topic: str) -> list[FakeRecord]:
        return [r for tp in self.partitions_of(topic) for r in self.logs[tp]]


class FakeConsumer:
    """A group member alone in its group: `start` assigns every partition of the subscribed
    topics; `revoke` and `assign` replay a rebalance through the listener."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.listener: RebalanceListener | None = None
        self.topics: list[str] = []
        self.assigned: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        self.commits: list[dict[TopicPartition, int]] = []
        self.stopped = False
        self.rejoins_requested = 0
        # getmany calls begun: one begun after an event means the loop has handled every
        # fetch before it (tests wait on this rather than on time).
        self.fetches = 0
        # False: partitions are served in name order. True: as aiokafka's buffer does under
        # a backlog, the partition whose next record was appended first is served first
        # (its fetch completed first), so a newer record waits behind an older backlog.
        self.oldest_first = False

    def request_rejoin(self) -> None:
        self.rejoins_requested += 1

    def subscribe(self, topics: list[str], *, listener: Any) -> None:
        self.topics, self.listener = list(topics), listener

    async def start(self) -> None:
        await self.assign({tp for t in self.topics for tp in self.cluster.partitions_of(t)})

    async def stop(self) -> None:
        self.stopped = True

    async def assign(self, tps: set[TopicPartition]) -> None:
        self.assigned |= tps
        for tp in tps:  # read at assignment, as aiokafka does before any listener runs
            self.positions[tp] = self.cluster.group_offsets.get(tp, 0)
        if self.listener is not None:
            await self.listener.on_partitions_assigned(set(tps))

    async def revoke(self, tps: set[TopicPartition]) -> None:
        if self.listener is not None:
            await self.listener.on_partitions_revoked(set(tps))
        self.assigned -= tps
        self.paused -= tps

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[FakeRecord]]:
        self.fetches += 1
        only = set(partitions)
        batch = self._take(max_records, only)
        if not batch:
            self.cluster.arrived.clear()
            try:
                await asyncio.wait_for(self.cluster.arrived.wait(), timeout_ms / 1000)
            except TimeoutError:
                return {}
            batch = self._take(max_records, only)
        return batch

    def _serving_order(self, only: set[TopicPartition]) -> list[TopicPartition]:
        fetchable = sorted(tp for tp in self.assigned - self.paused if not only or tp in only)
        if not self.oldest_first:
            return fetchable
        waiting = [tp for tp in fetchable if self.positions[tp] < len(self.cluster.logs[tp])]
        return sorted(waiting, key=lambda tp: self.cluster.appended[tp][self.positions[tp]])

    def _take(
        self, max_records: int | None, only: set[TopicPartition]
    ) -> dict[TopicPartition, list[FakeRecord]]:
        budget = max_records if max_records is not None else 10**9
        batch: dict[TopicPartition, list[FakeRecord]] = {}
        for tp in self._serving_order(only):
            log = self.cluster.logs[tp]
            start = self.positions[tp]
            records = log[start : start + budget]
            if records:
                batch[tp] = records
                self.positions[tp] = start + len(records)
                budget -= len(records)
        return batch

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.positions[partition] = offset

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused |= set(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused -= set(partitions)

    def highwater(self, partition: TopicPartition) -> int | None:
        return len(self.cluster.logs[partition])

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.cluster.logs[tp]) for tp in partitions}

    async def position(self, partition: TopicPartition) -> int:
        return self.positions[partition]

    @property
    def committed_offsets(self) -> dict[TopicPartition, int]:
        """The group's committed offsets (kept by the cluster: transactions commit them too)."""
        return self.cluster.group_offsets

    async def committed(self, partition: TopicPartition) -> int | None:
        return self.cluster.group_offsets.get(partition)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))
        self.cluster.group_offsets.update(offsets)


@dataclass
class FakeBatch:
    """A record batch under construction (aiokafka's BatchBuilder, without the bytes)."""

    capacity: int = 1000
    records: list[tuple[bytes | None, bytes | None, RecordHeaders]] = field(default_factory=list)

    def append(
        self, *, timestamp: int | None, key: bytes | None, value: bytes | None, headers: Any
    ) -> object | None:
        if len(self.records) >= self.capacity:
            return None
        self.records.append((key, value, tuple(headers or ())))
        return len(self.records)

    def record_count(self) -> int:
        return len(self.records)


@dataclass
class FakeProducer:
    """Appends to the cluster; `fail_next` sends raise KafkaConnectionError (a broker outage)."""

    cluster: FakeCluster
    fail_next: int = 0
    started: bool = False
    stopped: bool = False
    sent: list[FakeRecord] = field(default_factory=list)

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: RecordHeaders | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            future.set_result(self._write(topic, value, key, headers, partition))
        except KafkaConnectionError as exc:
            future.set_exception(exc)
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: RecordHeaders | None = None,
        partition: int | None = None,
    ) -> FakeRecord:
        return self._write(topic, value, key, headers, partition)

    def create_batch(self) -> FakeBatch:
        return FakeBatch()

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            for key, value, headers in batch.records:
                self._write(topic, value, key, headers, partition=partition)
            future.set_result(None)
        except KafkaConnectionError as exc:
            future.set_exception(exc)
        return future

    async def partitions_for(self, topic: str) -> set[int]:
        return {tp.partition for tp in self.cluster.partitions_of(topic)}

    def _write(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Any] | None,
        partition: int | None = None,
    ) -> FakeRecord:
        if self.fail_next:
            self.fail_next -= 1
            raise KafkaConnectionError("broker down (fake)")
        record = self.cluster.produce(topic, value, key, tuple(headers or ()), partition=partition)
        self.sent.append(record)
        return record
