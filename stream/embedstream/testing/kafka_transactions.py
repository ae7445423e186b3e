"""The transactional producer of the in-memory Kafka (`embedstream.testing.kafka`): records
and offsets that appear together at commit, fencing by epoch, aiokafka's state machine."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.errors import ProducerFenced
from aiokafka.producer.transaction_manager import TransactionState

from embedstream.kafka.client.protocols import RecordHeaders

if TYPE_CHECKING:
    from embedstream.testing.kafka import FakeCluster


class FakeTransactionManager:
    """aiokafka's transaction state machine, as far as embedstream relies on it."""

    def __init__(self) -> None:
        self.state = TransactionState.UNINITIALIZED

    def to(self, target: TransactionState) -> None:
        if target is TransactionState.IN_TRANSACTION and self.state is not TransactionState.READY:
            # aiokafka asserts the same; begin_transaction from a broken state trips it.
            raise AssertionError(f"Invalid state transition {self.state} -> {target}")
        self.state = target


@dataclass
class FakeTransactionalProducer:
    """A transactional producer on the fake cluster: its records and offsets appear together
    at commit; a newer producer of the same transactional id fences it (FATAL_ERROR, as
    aiokafka). `start_gate` holds `start` (a slow init_transactions); `stall_commits`
    commits time out, leaving it COMMITTING_TRANSACTION."""

    cluster: FakeCluster
    transactional_id: str
    start_gate: asyncio.Event | None = None
    stall_commits: int = 0
    started: bool = False
    stopped: bool = False
    committed_transactions: int = 0
    epoch: int = -1
    manager: FakeTransactionManager = field(default_factory=FakeTransactionManager)
    _records: list[tuple[str, bytes | None, bytes | None, RecordHeaders, int | None]] = field(
        default_factory=list
    )
    _offsets: dict[TopicPartition, int] = field(default_factory=dict)

    @property
    def transaction_state(self) -> str:
        return str(self.manager.state.name)

    def pending_futures(self) -> list[asyncio.Future[Any]]:
        return []  # every future it makes is returned to the caller

    async def start(self) -> None:
        if self.start_gate is not None:
            await self.start_gate.wait()
        self.epoch = self.cluster.init_transactions(self.transactional_id)
        self.manager.to(TransactionState.READY)
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def _check_epoch(self) -> None:
        if self.cluster.txn_epochs.get(self.transactional_id) != self.epoch:
            self.manager.to(TransactionState.FATAL_ERROR)
            raise ProducerFenced()

    async def begin_transaction(self) -> None:
        self.manager.to(TransactionState.IN_TRANSACTION)
        self._records, self._offsets = [], {}

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
            self._check_epoch()
        except ProducerFenced as exc:
            future.set_exception(exc)
        else:
            self._records.append((topic, value, key, tuple(headers or ()), partition))
            future.set_result(None)
        return future

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        self._check_epoch()
        self._offsets.update(offsets)

    async def commit_transaction(self) -> None:
        self._check_epoch()
        self.manager.to(TransactionState.COMMITTING_TRANSACTION)
        if self.stall_commits:
            self.stall_commits -= 1
            raise TimeoutError("no answer to EndTxn (fake)")
        self.cluster.commit_transaction(self.transactional_id, self._records, self._offsets)
        self.committed_transactions += 1
        self.manager.to(TransactionState.READY)

    async def abort_transaction(self) -> None:
        self._records, self._offsets = [], {}
        self.manager.to(TransactionState.READY)
