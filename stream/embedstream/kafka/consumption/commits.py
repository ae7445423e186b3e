"""Commits each partition's safe offset (below it, every record read has its outcome written).

At-least-once: explicit offsets through the consumer, never a bare `commit()`; a commit that
fails during a rebalance is retried next time, never fatal. Exactly-once: the offset goes into
the partition's transaction together with its staged outputs (kafka/outputs/transactions.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from embedstream.core.offsets import PartitionOffsets
from embedstream.kafka.consumption.member import OffsetCommitting, commit_offsets
from embedstream.kafka.outputs.transactions import Fenced, PartitionTransactions

log = logging.getLogger(__name__)


class OffsetCommitter:
    def __init__(
        self,
        consumer: OffsetCommitting,
        trackers: Mapping[TopicPartition, PartitionOffsets],
        transactions: PartitionTransactions | None,
    ) -> None:
        self._consumer = consumer
        self._trackers = trackers
        self._transactions = transactions
        # Commit rounds finished (periodic and at hand-offs), whether or not anything was due:
        # what is not committed after a round began is not safe to commit (tests wait on it).
        self.rounds = 0

    async def commit(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Commit what is safe of `partitions`; the partitions found lost meanwhile (another
        member's producer fenced ours): their work is the caller's to drop."""
        try:
            return await self._commit_due(partitions)
        finally:
            self.rounds += 1

    async def _commit_due(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        due: dict[TopicPartition, int] = {}
        for tp in partitions:
            tracker = self._trackers.get(tp)
            offset = tracker.to_commit() if tracker else None
            safe = tracker.safe_offset() if tracker and offset is None else None
            if safe is not None and self._staged_below(tp, safe):
                offset = safe  # outputs waiting all the same (a batch job's record)
            if offset is not None:
                due[tp] = offset
        if not due:
            return set()
        if self._transactions is not None:
            return await self._commit_in_transactions(self._transactions, due)
        if await commit_offsets(self._consumer, due):
            self._mark(due)
        return set()

    async def _commit_in_transactions(
        self, transactions: PartitionTransactions, due: dict[TopicPartition, int]
    ) -> set[TopicPartition]:
        lost: set[TopicPartition] = set()
        for tp, offset in due.items():
            try:
                committed = await transactions.commit(tp, offset)
            except Fenced as exc:
                log.error("giving up %s (%s); dropping its work", tp, exc)
                lost.add(tp)
                continue
            except (KafkaError, TimeoutError, OSError):
                continue  # logged by the transactions; the outputs stay staged for next time
            if committed:
                self._mark({tp: offset})
        return lost

    def _staged_below(self, tp: TopicPartition, offset: int) -> bool:
        return self._transactions is not None and self._transactions.staged_below(tp, offset)

    def _mark(self, committed: dict[TopicPartition, int]) -> None:
        for tp, offset in committed.items():
            tracker = self._trackers.get(tp)
            if tracker is not None:
                tracker.mark_committed(offset)
