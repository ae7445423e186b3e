"""Exactly-once staging and fencing rules of PartitionTransactions, on a fake producer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError, ProducerFenced
from embedstream.kafka.outputs.result_writer import Output
from embedstream.kafka.outputs.transactions import Fenced, PartitionTransactions
from embedstream.kafka.outputs.work import Origin

TP = TopicPartition("in", 0)


@dataclass
class FakeTxnProducer:
    """Records transactions; `fail_commit` raises that error from the next commit."""

    transactional_id: str
    fail_commit: BaseException | None = None
    fatal: bool = False
    committed: list[list[bytes | None]] = field(default_factory=list)
    aborted: int = 0
    stopped: bool = False
    _open: list[bytes | None] = field(default_factory=list)

    @property
    def transaction_state(self) -> str:
        return "FATAL_ERROR" if self.fatal else "READY"

    def pending_futures(self) -> list[asyncio.Future[Any]]:
        return []

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True

    async def begin_transaction(self) -> None:
        assert not self.fatal, "Invalid state transition"
        self._open = []

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: Any = None,
        partition: int | None = None,
    ) -> asyncio.Future[object]:
        self._open.append(value)
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        return None

    async def commit_transaction(self) -> None:
        if self.fail_commit is not None:
            error, self.fail_commit = self.fail_commit, None
            if isinstance(error, ProducerFenced):
                self.fatal = True
            raise error
        self.committed.append(self._open)

    async def abort_transaction(self) -> None:
        self.aborted += 1


class Harness:
    def __init__(self) -> None:
        self.made: list[FakeTxnProducer] = []
        self.txns = PartitionTransactions("g", self._make)

    def _make(self, transactional_id: str) -> FakeTxnProducer:
        self.made.append(FakeTxnProducer(transactional_id))
        return self.made[-1]


def output(offset: int, owner: object) -> Output:
    return Output(Origin("in", 0, offset), "results", b"k", b"v%d" % offset, [], owner)


async def test_outputs_of_an_earlier_assignment_never_join_a_later_ones_transaction() -> None:
    h, old, new = Harness(), object(), object()
    h.txns.open(TP, old)
    await h.txns.assign(TP)
    await h.txns.release(TP)  # revoked ...
    h.txns.open(TP, new)  # ... and assigned back to this member
    await h.txns.assign(TP)
    await h.txns.write(output(0, old))  # finished late, read under the old assignment
    await h.txns.write(output(0, new))  # the same input, read again
    assert await h.txns.commit(TP, 1)
    assert h.made[-1].committed == [[b"v0"]]  # once


async def test_a_commit_waits_for_the_producer_of_a_fresh_assignment() -> None:
    h = Harness()
    h.txns.open(TP, None)
    assert await h.txns.commit(TP, 1) is False  # not committed, not given up
    assert h.made == []
    await h.txns.assign(TP)
    assert await h.txns.commit(TP, 1) is True


async def test_a_failed_transaction_gives_the_partition_up_and_never_retries_its_outputs() -> None:
    """A commit that timed out may have committed on the broker: sending the same outputs
    again could write them twice, so the partition is given up (reassignment fences and reads
    the committed offset) and no new producer is made here."""
    h = Harness()
    h.txns.open(TP, None)
    await h.txns.assign(TP)
    producer = h.made[0]
    producer.fail_commit = KafkaTimeoutError()
    await h.txns.write(output(0, None))
    with pytest.raises(Fenced):
        await h.txns.commit(TP, 1)
    assert producer.aborted == 1 and producer.stopped
    with pytest.raises(Fenced):
        await h.txns.commit(TP, 1)
    assert producer.committed == []
    assert len(h.made) == 1  # re-initialising the id here could fence the rightful owner


async def test_a_fenced_producer_is_closed_and_never_replaced_by_the_committer() -> None:
    h = Harness()
    h.txns.open(TP, None)
    await h.txns.assign(TP)
    h.made[0].fail_commit = ProducerFenced()
    with pytest.raises(Fenced):
        await h.txns.commit(TP, 1)
    assert h.made[0].stopped
    with pytest.raises(Fenced):  # and no begin_transaction on a dead producer
        await h.txns.commit(TP, 1)
    assert len(h.made) == 1
    await h.txns.close()
