"""Exactly-once delivery: outputs and input offsets committed in one Kafka transaction.

One transactional producer per input partition, its transactional id derived from the group,
topic and partition. aiokafka's `send_offsets_to_transaction` sends only the group id (no
KIP-447 generation fencing), so fencing comes from the transactional id instead: when a
partition moves, the new owner's producer initialises the same id, which bumps the epoch,
aborts the old owner's open transaction and makes every later write of the old owner (a
paused or partitioned zombie) fail.

Outputs are staged per input partition, keyed by input offset. A commit takes exactly the
outputs below the partition's safe offset (everything before it is finished), so a committed
transaction never holds an output whose input offset it does not also commit: after a crash
the next owner re-reads precisely the inputs whose outputs were never visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    ProducerFenced,
)

from embedstream.kafka.client.protocols import TransactionalProducer
from embedstream.kafka.outputs.result_writer import Output

log = logging.getLogger(__name__)

TXN_TIMEOUT_S = 30.0
ABORT_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0
# Answers that mean a newer producer holds this transactional id.
FENCING_ERRORS = (ProducerFenced, InvalidProducerEpoch)


class Fenced(Exception):
    """Another member owns this partition now; this process must let it go."""


class Outbox:
    """Outputs waiting for their partition's next transaction, by input offset. Pure."""

    def __init__(self) -> None:
        self._by_offset: dict[int, list[Output]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_offset.values())

    def stage(self, output: Output) -> None:
        self._by_offset.setdefault(output.origin.offset, []).append(output)

    def below(self, offset: int) -> list[Output]:
        """Outputs of every input offset below `offset`, in offset order."""
        return [o for k in sorted(k for k in self._by_offset if k < offset)
                for o in self._by_offset[k]]  # fmt: skip

    def has_below(self, offset: int) -> bool:
        return any(k < offset for k in self._by_offset)

    def drop_below(self, offset: int) -> None:
        for key in [k for k in self._by_offset if k < offset]:
            del self._by_offset[key]


def transactional_id(group_id: str, topic: str, partition: int) -> str:
    return f"embedstream-{group_id}-{topic}-{partition}"


@dataclass(eq=False)
class _Partition:
    """One input partition's transaction state. The lock outlives assignments: a release waits
    for a transaction in progress, and the next assignment's fence waits for the release."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    producer: TransactionalProducer | None = None
    outbox: Outbox | None = None  # None while the partition is not assigned here
    owner: object | None = None  # the assignment (PartitionState) whose outputs it takes
    starting: bool = False  # opened; the producer (the fence) not started yet


class PartitionTransactions:
    """The outboxes and transactional producers of the partitions this member owns."""

    def __init__(
        self, group_id: str, make_producer: Callable[[str], TransactionalProducer]
    ) -> None:
        self._group_id = group_id
        self._make_producer = make_producer
        self._partitions: dict[TopicPartition, _Partition] = {}

    # The staging writer the results writer uses in exactly-once mode.
    async def write(self, output: Output) -> None:
        for tp, part in self._partitions.items():
            if tp.topic == output.origin.topic and tp.partition == output.origin.partition:
                if part.outbox is not None and (output.owner is None or output.owner is part.owner):
                    part.outbox.stage(output)
                    return
                break  # read under an earlier assignment, which this one reads again
        # The partition was revoked while this item was in flight: its next owner redoes it.
        log.debug("dropping an output of unowned %s-%d", output.origin.topic,
                  output.origin.partition)  # fmt: skip

    async def write_many(self, outputs: Sequence[Output]) -> None:
        for output in outputs:
            await self.write(output)

    def staged(self) -> int:
        return sum(len(p.outbox) for p in self._partitions.values() if p.outbox is not None)

    def staged_below(self, tp: TopicPartition, offset: int) -> bool:
        """Outputs below ``offset`` wait for the partition's next transaction (committed even
        if its offset has not moved: a batch job closed by its form time)."""
        part = self._partitions.get(tp)
        return part is not None and part.outbox is not None and part.outbox.has_below(offset)

    def open(self, tp: TopicPartition, owner: object | None = None) -> None:
        """A fresh outbox, at once: records read from here on have somewhere to stage.
        `owner` is the assignment (PartitionState) whose outputs it takes."""
        part = self._partitions.setdefault(tp, _Partition())
        part.outbox, part.owner, part.starting = Outbox(), owner, True

    async def assign(self, tp: TopicPartition) -> bool:
        """Start the partition's producer, which fences the previous owner's transactions;
        False if it did not start (the caller gives the partition up) or the partition was
        released meanwhile.

        Commits wait for it (same lock), so nothing is committed before the fence is up."""
        part = self._partitions[tp]
        owner = part.owner
        async with part.lock:
            try:
                if part.producer is None:
                    producer = await self._start_producer(tp)
                    if part.outbox is None or part.owner is not owner:
                        # Released (or assigned anew) while it started: not this one's.
                        part.producer = None
                        await _stop(producer)
                        return False
                    part.producer = producer
                return True
            except (KafkaError, TimeoutError, OSError) as exc:
                log.error("transactional producer for %s did not start (%r)", tp, exc)
                return False
            finally:
                part.starting = False

    async def release(self, tp: TopicPartition) -> None:
        part = self._partitions.setdefault(tp, _Partition())
        part.outbox, part.owner, part.starting = None, None, False
        async with part.lock:
            # After a transaction in progress: a producer is never stopped in its middle.
            await self._drop_producer(part)

    async def close(self) -> None:
        """Stop every partition's producer (at shutdown), all at once: each may take
        STOP_TIMEOUT_S when a broker is out, and one after another they added up."""
        started = [tp for tp, part in self._partitions.items() if part.producer is not None]
        await asyncio.gather(*(self.release(tp) for tp in started))

    async def commit(self, tp: TopicPartition, offset: int) -> bool:
        """Write the outputs below `offset` and commit `offset`, atomically; False when the
        partition's producer is still starting (nothing done: try again next time).

        Raises Fenced if another member owns the partition, and also when the transaction
        failed in any other way: its outcome is then unknown (a commit that timed out may have
        committed on the broker), so retrying the same outputs could write them twice. The
        partition is given up instead; when it is assigned again, a new producer fences
        whatever is pending and the committed offset read after that fence says what is done
        (see Handoff). A new producer is never made here: initialising the transactional id
        would fence the rightful owner if this member were the zombie.
        """
        part = self._partitions.get(tp)
        outbox = part.outbox if part is not None else None
        if part is None or outbox is None:
            raise Fenced(f"{tp} is not assigned here")
        async with part.lock:
            if part.starting:
                return False  # assigned a moment ago: its producer (the fence) comes first
            producer = part.producer
            if producer is None or _is_fatal(producer):
                await self._drop_producer(part)
                raise Fenced(f"{tp}: no usable transactional producer; waiting for reassignment")
            outputs = outbox.below(offset)
            try:
                await asyncio.wait_for(
                    self._transaction(producer, outputs, {tp: offset}), TXN_TIMEOUT_S
                )
            except FENCING_ERRORS as exc:
                await self._drop_producer(part)
                raise Fenced(f"{tp}: producer fenced by a newer owner ({exc!r})") from exc
            except (KafkaError, TimeoutError, OSError, AssertionError) as exc:
                # AssertionError: aiokafka's transaction state machine after a cut-off commit.
                await self._drop_producer(part)
                raise Fenced(f"{tp}: transaction failed, outcome unknown ({exc!r})") from exc
            outbox.drop_below(offset)
            return True

    async def _transaction(
        self,
        producer: TransactionalProducer,
        outputs: list[Output],
        offsets: Mapping[TopicPartition, int],
    ) -> None:
        await producer.begin_transaction()
        sends: list[asyncio.Future[object]] = []
        try:
            for o in outputs:
                sends.append(await producer.send(o.topic, o.value, key=o.key, headers=o.headers,
                                                 partition=o.partition))  # fmt: skip
            delivered = await asyncio.gather(*sends, return_exceptions=True)
            failed = next((d for d in delivered if isinstance(d, BaseException)), None)
            if failed is not None:
                raise failed
            await producer.send_offsets_to_transaction(offsets, self._group_id)
            await producer.commit_transaction()
        except BaseException:
            # Every send's outcome is retrieved when it comes (none left to be logged as
            # "never retrieved"), without waiting here for sends the broker may never answer:
            # that wait ran past TXN_TIMEOUT_S while the broker was down.
            for send in sends:
                send.add_done_callback(_retrieve)
            if not _is_fatal(producer):  # (mid-commit, aiokafka refuses: suppressed)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.abort_transaction(), ABORT_TIMEOUT_S)
            raise

    async def _start_producer(self, tp: TopicPartition) -> TransactionalProducer:
        producer = self._make_producer(transactional_id(self._group_id, tp.topic, tp.partition))
        try:
            await asyncio.wait_for(producer.start(), TXN_TIMEOUT_S)  # init_transactions fences
        except BaseException:
            await _stop(producer)  # no "Unclosed AIOKafkaProducer" for one that never started
            raise
        return producer

    async def _drop_producer(self, part: _Partition) -> None:
        producer, part.producer = part.producer, None
        if producer is not None:
            await _stop(producer)


def _is_fatal(producer: TransactionalProducer) -> bool:
    """The producer's transaction manager went to FATAL_ERROR: it can do nothing more (and
    begin_transaction would trip an assertion)."""
    return producer.transaction_state == "FATAL_ERROR"


async def _stop(producer: TransactionalProducer) -> None:
    _retrieve_internal_failures(producer)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(producer.stop(), STOP_TIMEOUT_S)
    _retrieve_internal_failures(producer)


def _retrieve_internal_failures(producer: TransactionalProducer) -> None:
    """aiokafka parks a fatal error (ProducerFenced) on futures nobody awaits once no commit
    is in progress: its transaction waiter, and the drain waiter of every batch its sender
    failed. Each would be logged as "Future exception was never retrieved" when collected (a
    fenced zombie logged hundreds). The error is handled here (the producer is dropped), so
    mark them retrieved."""
    for future in producer.pending_futures():
        if future.done():
            _retrieve(future)
        else:  # it may fail after this: retrieved when it does
            future.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if future.done() and not future.cancelled():
        future.exception()
