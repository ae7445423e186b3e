"""The one place that reads aiokafka's private attributes, which no public call replaces.

- a transactional producer's state (`_txn_manager.state`): begin_transaction on a producer in
  FATAL_ERROR trips an assertion, so the exactly-once code must know it is dead;
- the futures aiokafka parks a fatal error on (`_txn_manager._transaction_waiter`, each batch's
  `_drain_waiter` and `future` in `_message_accumulator._batches` / `_pending_batches`), which
  are marked retrieved once the producer is dropped;
- a consumer's group coordinator (`_coordinator.request_rejoin`) and its client (`_client`, a
  fresh metadata request).

Each read goes through :func:`_private`, which raises :class:`PrivateApiMissing` naming the
attribute and the supported aiokafka range instead of silently reading None, and
`tests/unit/test_aiokafka_private.py` checks every name against the installed version.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.producer.message_accumulator import MessageBatch

from embedstream.kafka.client.protocols import RecordHeaders

# Keep in step with the aiokafka pin in pyproject.toml.
SUPPORTED_AIOKAFKA = ">=0.12,<0.15"


class PrivateApiMissing(RuntimeError):
    """The installed aiokafka lacks a private attribute embedstream relies on."""


def _private(obj: object, name: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise PrivateApiMissing(
            f"aiokafka {aiokafka.__version__}: {type(obj).__name__} has no attribute {name!r}, "
            f"which embedstream's exactly-once and rebalance code needs; embedstream supports "
            f"aiokafka{SUPPORTED_AIOKAFKA}"
        ) from None


class AiokafkaTransactionalProducer:
    """An AIOKafkaProducer with a transactional id, as a `TransactionalProducer`: the public
    calls passed through, plus its transaction state and the futures it leaves behind."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer
        _private(producer, "_txn_manager")  # fail at construction, not at the first commit
        _private(producer, "_message_accumulator")

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def begin_transaction(self) -> None:
        await self.producer.begin_transaction()

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: RecordHeaders | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[object]:
        future: asyncio.Future[object] = await self.producer.send(
            topic, value, key=key, headers=headers, partition=partition
        )
        return future

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        await self.producer.send_offsets_to_transaction(offsets, group_id)

    async def commit_transaction(self) -> None:
        await self.producer.commit_transaction()

    async def abort_transaction(self) -> None:
        await self.producer.abort_transaction()

    @property
    def transaction_state(self) -> str:
        """READY between transactions, FATAL_ERROR once fenced or failed for good."""
        manager = _private(self.producer, "_txn_manager")
        if manager is None:  # no transactional id
            return "READY"
        return str(_private(manager, "state").name)

    def pending_futures(self) -> list[asyncio.Future[Any]]:
        """The futures aiokafka may park a fatal error on: its transaction waiter and each
        queued or in-flight batch's drain waiter and delivery future."""
        manager = _private(self.producer, "_txn_manager")
        accumulator = _private(self.producer, "_message_accumulator")
        found = [] if manager is None else [_private(manager, "_transaction_waiter")]
        queued: Mapping[Any, Sequence[Any]] = _private(accumulator, "_batches")
        batches = [b for queue in queued.values() for b in queue]
        batches += list(_private(accumulator, "_pending_batches"))
        for batch in batches:
            found += [_private(batch, "_drain_waiter"), _private(batch, "future")]
        return [f for f in found if isinstance(f, asyncio.Future)]


def request_rejoin(consumer: object) -> None:
    """Ask the group coordinator for a rebalance (aiokafka has no public call for it). A
    consumer that is not aiokafka's (the fakes) is asked directly if it can."""
    if isinstance(consumer, AIOKafkaConsumer):
        coordinator = _private(consumer, "_coordinator")
        if coordinator is not None:  # None before start
            _private(coordinator, "request_rejoin")()
        return
    rejoin = getattr(consumer, "request_rejoin", None)
    if rejoin is not None:
        rejoin()


async def fetch_cluster(consumer: AIOKafkaConsumer) -> Any:
    """Fresh cluster metadata through the consumer's own client."""
    return await _private(consumer, "_client").fetch_all_metadata()


def missing_private_attributes(producer: AIOKafkaProducer, consumer: AIOKafkaConsumer) -> list[str]:
    """Every private name above that the installed aiokafka lacks, on a transactional producer
    and a group consumer (neither started), for the unit test."""
    missing: list[str] = []

    def check(label: str, obj: object, *names: str) -> None:
        missing.extend(f"{label}.{n}" for n in names if not hasattr(obj, n))

    check("AIOKafkaProducer", producer, "_txn_manager", "_message_accumulator")
    manager = getattr(producer, "_txn_manager", None)
    check("TransactionManager", manager, "state", "_transaction_waiter")
    accumulator = getattr(producer, "_message_accumulator", None)
    check("MessageAccumulator", accumulator, "_batches", "_pending_batches")
    if accumulator is not None and hasattr(accumulator, "create_builder"):
        batch = MessageBatch(TopicPartition("t", 0), accumulator.create_builder(), 1.0, 0.0)
        check("MessageBatch", batch, "_drain_waiter", "future")
    else:
        missing.append("MessageAccumulator.create_builder (to check MessageBatch)")
    check("AIOKafkaConsumer", consumer, "_coordinator", "_client")
    check("GroupCoordinator", GroupCoordinator, "request_rejoin")
    check("AIOKafkaClient", getattr(consumer, "_client", None), "fetch_all_metadata")
    return missing
