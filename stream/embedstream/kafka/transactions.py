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
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    ProducerFenced,
)

from embedstream.kafka.sink import Output

log = logging.getLogger(__name__)

TXN_TIMEOUT_S = 30.0
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

    def drop_below(self, offset: int) -> None:
        for key in [k for k in self._by_offset if k < offset]:
            del self._by_offset[key]


def transactional_id(group_id: str, topic: str, partition: int) -> str:
    return f"embedstream-{group_id}-{topic}-{partition}"


class PartitionTransactions:
    """The outboxes and transactional producers of the partitions this member owns."""

    def __init__(self, group_id: str, make_producer: Callable[[str], Any]) -> None:
        self._group_id = group_id
        self._make_producer = make_producer
        self._producers: dict[Any, Any] = {}
        self._outboxes: dict[Any, Outbox] = {}
        self._owners: dict[Any, object | None] = {}
        self._starting: set[Any] = set()  # opened; the producer not started yet
        self._locks: dict[Any, asyncio.Lock] = {}

    # The staging writer the sink uses in exactly-once mode.
    async def write(self, output: Output) -> None:
        for tp, outbox in self._outboxes.items():
            if tp.topic == output.origin.topic and tp.partition == output.origin.partition:
                if output.owner is None or output.owner is self._owners.get(tp):
                    outbox.stage(output)
                    return
                break  # read under an earlier assignment, which this one reads again
        # The partition was revoked while this item was in flight: its next owner redoes it.
        log.debug("dropping an output of unowned %s-%d", output.origin.topic,
                  output.origin.partition)  # fmt: skip

    async def write_many(self, outputs: Sequence[Output]) -> None:
        for output in outputs:
            await self.write(output)

    def staged(self) -> int:
        return sum(len(o) for o in self._outboxes.values())

    def open(self, tp: Any, owner: object | None = None) -> None:
        """A fresh outbox, at once: records read from here on have somewhere to stage.
        `owner` is the assignment (PartitionState) whose outputs it takes."""
        self._outboxes[tp] = Outbox()
        self._owners[tp] = owner
        self._starting.add(tp)
        self._locks.setdefault(tp, asyncio.Lock())

    async def assign(self, tp: Any) -> None:
        """Start the partition's producer, which fences the previous owner's transactions.

        Commits wait for it (same lock), so nothing is committed before the fence is up."""
        async with self._locks[tp]:
            try:
                if tp not in self._producers:
                    await self._start_producer(tp)
            except (KafkaError, TimeoutError, OSError) as exc:
                # Nothing raised out of a rebalance callback: the next commit gives the
                # partition up and asks for a rebalance, which brings a new attempt.
                log.error("transactional producer for %s did not start (%r)", tp, exc)
            finally:
                self._starting.discard(tp)

    async def release(self, tp: Any) -> None:
        self._outboxes.pop(tp, None)
        self._owners.pop(tp, None)
        self._starting.discard(tp)
        producer = self._producers.pop(tp, None)
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), TXN_TIMEOUT_S)

    async def close(self) -> None:
        """Stop every partition's producer (at shutdown)."""
        for tp in list(self._producers):
            await self.release(tp)

    async def commit(self, tp: Any, offset: int) -> bool:
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
        outbox = self._outboxes.get(tp)
        if outbox is None:
            raise Fenced(f"{tp} is not assigned here")
        async with self._locks[tp]:
            if tp in self._starting:
                return False  # assigned a moment ago: its producer (the fence) comes first
            producer = self._producers.get(tp)
            if producer is None or _is_fatal(producer):
                await self._drop_producer(tp)
                raise Fenced(f"{tp}: no usable transactional producer; waiting for reassignment")
            outputs = outbox.below(offset)
            try:
                await asyncio.wait_for(
                    self._transaction(producer, outputs, {tp: offset}), TXN_TIMEOUT_S
                )
            except FENCING_ERRORS as exc:
                await self._drop_producer(tp)
                raise Fenced(f"{tp}: producer fenced by a newer owner ({exc!r})") from exc
            except (KafkaError, TimeoutError, OSError, AssertionError) as exc:
                # AssertionError: aiokafka's transaction state machine after a cut-off commit.
                await self._drop_producer(tp)
                raise Fenced(f"{tp}: transaction failed, outcome unknown ({exc!r})") from exc
            outbox.drop_below(offset)
            return True

    async def _transaction(self, producer: Any, outputs: list[Output], offsets: Any) -> None:
        await producer.begin_transaction()
        sends: list[asyncio.Future[Any]] = []
        try:
            for o in outputs:
                sends.append(await producer.send(o.topic, o.value, key=o.key, headers=o.headers))
            delivered = await asyncio.gather(*sends, return_exceptions=True)
            failed = next((d for d in delivered if isinstance(d, BaseException)), None)
            if failed is not None:
                raise failed
            await producer.send_offsets_to_transaction(offsets, self._group_id)
            await producer.commit_transaction()
        except BaseException:
            # Retrieve every send's outcome (none left to log "never retrieved"), then abort.
            await asyncio.gather(*sends, return_exceptions=True)
            if not _is_fatal(producer):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(producer.abort_transaction(), 5)
            raise

    async def _start_producer(self, tp: Any) -> Any:
        producer = self._make_producer(transactional_id(self._group_id, tp.topic, tp.partition))
        await asyncio.wait_for(producer.start(), TXN_TIMEOUT_S)  # init_transactions fences
        self._producers[tp] = producer
        return producer

    async def _drop_producer(self, tp: Any) -> None:
        producer = self._producers.pop(tp, None)
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 5)


def _is_fatal(producer: Any) -> bool:
    """aiokafka's transaction manager went to FATAL_ERROR: the producer can do nothing more
    (and begin_transaction would trip an assertion)."""
    manager = getattr(producer, "_txn_manager", None)
    return bool(manager is not None and manager.is_fatal_error())
