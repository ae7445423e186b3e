"""The consumption shell every consumer-group member of ours runs: the processor's fetch loop
(`kafka/consumption/processor_loop.py`) and the store writer's feed
(`kafka/consumption/store_feed.py`) alike.

A member subscribes with its handling of rebalances (`Rebalances`: what it finishes and
commits before revoked partitions go, what it sets up for assigned ones), starts the consumer,
runs its own loop until that returns, then stops the consumer within a bound (aiokafka's stop
waits for a rebalance in progress). Offsets are committed explicitly, never with a bare
`commit()`: one a rebalance under way refuses is logged and left to the next commit (or to
the next owner, who reads those records again), never fatal.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from embedstream.engine.bounded import bounded
from embedstream.kafka.client.protocols import Consumer

log = logging.getLogger(__name__)

# A member's consumer stop when it has no closing budget of its own (the store writer, a
# backfill): aiokafka's waits for a rebalance in progress.
STOP_TIMEOUT_S = 10.0


class Rebalances(Protocol):
    """A member's side of a rebalance; aiokafka waits for each before the group goes on."""

    async def on_assigned(self, assigned: set[TopicPartition]) -> None: ...

    async def on_revoked(self, revoked: set[TopicPartition]) -> None: ...


class OffsetCommitting(Protocol):
    """What committing asks of the consumer."""

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None: ...


async def consume(
    consumer: Consumer,
    topics: Sequence[str],
    rebalances: Rebalances,
    loop: Callable[[], Awaitable[None]],
    *,
    stop_within_s: Callable[[], float] = lambda: STOP_TIMEOUT_S,
    starting: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
) -> None:
    """Subscribe to `topics`, start, run `loop` to its end, stop (also after a failed start:
    no unclosed client) within `stop_within_s()` seconds. `starting` wraps the start (it
    turns aiokafka's errors there into the user's)."""
    consumer.subscribe(list(topics), listener=Listener(rebalances))
    try:
        with starting():
            await consumer.start()
        await loop()
    finally:
        await bounded(consumer.stop(), stop_within_s(), "the consumer's stop")


async def commit_offsets(consumer: OffsetCommitting, offsets: Mapping[TopicPartition, int]) -> bool:
    """Commit these offsets (each the next record to read); False, logged, when the commit
    failed (a rebalance under way): what it would have covered is committed later, or read
    again by the next owner."""
    try:
        await consumer.commit(offsets)
    except (CommitFailedError, IllegalStateError, KafkaError) as exc:
        log.warning("commit of %d partitions failed (%r); will retry", len(offsets), exc)
        return False
    return True


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka checks the class
    """The rebalance listener aiokafka calls; it hands each change to the member."""

    def __init__(self, rebalances: Rebalances) -> None:
        self._rebalances = rebalances

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._rebalances.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._rebalances.on_assigned(set(assigned))
