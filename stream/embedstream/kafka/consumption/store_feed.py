"""Feeds a vector store from the results topic: the store writer's consumer loop.

One consumer-group member of its own group reads the results topic (read_committed, so an
exactly-once processor's aborted outputs never reach the store), decodes every record with
:func:`embedstream.wire.decode_output`, and hands each fetched batch to the store in one
``apply`` (one transaction). Offsets are committed only after ``apply`` returned and the dead
letters of the batch were acknowledged: a crash anywhere before replays the batch, which the
store's idempotent writes turn into the same rows.

- A record that does not decode, a row the store refuses (another model or dimension) and a
  record the database refuses on its own (found by splitting the batch) go to the dead-letter
  topic with a reason; the rest of the batch is written and the loop goes on.
- A store outage (a retriable :class:`StoreError`) keeps the batch in hand and retries it with
  backoff: nothing is committed, nothing skipped; ``store_problem`` says why for ``/readyz``.
- Revoked partitions: the revoke waits for the batch in hand to be written and committed (a
  store outage gives the batch up instead, seeking back, so the rebalance is not held).
- ``stop()``: the batch in hand is finished and committed, then the loop ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition

from embedstream.core.backoff import Backoff
from embedstream.errors import InvalidEvent, Reason, RegistryUnavailable, StoreError
from embedstream.kafka.client.protocols import Consumer, Record
from embedstream.kafka.consumption.member import commit_offsets, consume
from embedstream.kafka.outputs.result_writer import ResultWriter
from embedstream.wire import Failure
from embedstream.wire.result_records import OutputRecord, decode_output, output_of

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 500
STORE_BACKOFF = Backoff(base_s=0.5, cap_s=30.0)


class Refusal(Protocol):
    """A record of a batch the store did not write (``stores.base.Rejected`` is one)."""

    @property
    def record_index(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def message(self) -> str: ...


class RecordStore(Protocol):
    """What the feed asks of a store (``stores.pgvector.PgVectorStore`` satisfies it):
    ``apply`` writes a batch in one transaction and returns the records it refused."""

    async def open(self) -> None: ...
    async def apply(self, records: Sequence[OutputRecord]) -> Sequence[Refusal]: ...
    async def close(self) -> None: ...


class FramedValues(Protocol):
    """Reads a registry-framed value (``engine.schema_decoders.FramedOutputs`` does)."""

    async def decode(self, raw: bytes) -> dict[str, Any]: ...


class FeedObserver(Protocol):
    """What the feed reports (``ops.store_metrics.StoreMetrics`` is one)."""

    def transaction(self, seconds: float, committed: bool) -> None: ...
    def written(self, records: Sequence[OutputRecord]) -> None: ...
    def rejected(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class _Decoded:
    record: Record
    output: OutputRecord


class _GiveUp(Exception):
    """The batch in hand is abandoned (a revoke or a stop during a store outage)."""


class StoreFeed:
    """The loop; ``run`` until ``stop()``. See the module docstring for its guarantees."""

    def __init__(
        self,
        consumer: Consumer,
        store: RecordStore,
        dead_letters: ResultWriter,
        topic: str,
        observer: FeedObserver,
        *,
        batch_max: int = 1_000,
        backoff: Backoff = STORE_BACKOFF,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        framed: FramedValues | None = None,
    ) -> None:
        self._consumer = consumer
        self._framed = framed  # with a registry output_format: its framed values
        self._store = store
        self._dead_letters = dead_letters
        self._topic = topic
        self._observer = observer
        self._batch_max = batch_max
        self._backoff = backoff
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._stopping = asyncio.Event()
        self._revoking = False  # a revoke waits: a store outage gives the batch up
        self._busy = asyncio.Lock()  # held from a batch's apply to its commit
        self._assigned: set[TopicPartition] = set()
        self._next: dict[TopicPartition, int] = {}  # the next offset to read, per partition
        self.joined = asyncio.Event()
        self.store_problem: str | None = None  # why the store cannot be written, for /readyz
        self.batches_committed = 0

    # -- what health reads ----------------------------------------------------------------

    def lag_by_partition(self) -> dict[TopicPartition, int]:
        """Offsets not yet written to the store, per assigned partition (fetched or not)."""
        lag: dict[TopicPartition, int] = {}
        for tp in sorted(self._assigned):
            high = self._consumer.highwater(tp)
            if high is not None and tp in self._next:
                lag[tp] = max(0, high - self._next[tp])
        return lag

    # -- the loop ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await consume(self._consumer, [self._topic], self, self._feed)

    async def close_unstarted(self) -> None:
        """Close the consumer of a feed stopped before `run` (built, never started)."""
        await self._consumer.stop()

    async def _feed(self) -> None:
        try:
            await self._open_store()
            while not self._stopping.is_set():
                fetched = await self._consumer.getmany(
                    timeout_ms=FETCH_TIMEOUT_MS, max_records=self._batch_max
                )
                if fetched:
                    await self._handle(fetched)
        finally:
            await self._store.close()

    async def _open_store(self) -> None:
        attempt = 0
        while not self._stopping.is_set():
            try:
                await self._store.open()
                self.store_problem = None
                return
            except StoreError as exc:
                if not exc.retriable:
                    raise
                attempt += 1
                await self._outage(exc, attempt)

    async def _handle(self, fetched: Mapping[TopicPartition, Sequence[Record]]) -> None:
        async with self._busy:
            # Fetched before a revoke that has run since: those are another member's now.
            records = [r for tp, batch in sorted(fetched.items()) if tp in self._assigned
                       for r in batch]  # fmt: skip
            if not records:
                return
            try:
                await self._write(records)
            except _GiveUp:
                self._rewind(records)
                return
            await self._commit(records)

    async def _write(self, records: Sequence[Record]) -> None:
        decoded: list[_Decoded] = []
        attempt = 0
        for record in records:
            while True:
                try:
                    decoded.append(_Decoded(record, await self._decode(record)))
                except InvalidEvent as exc:
                    self._observer.rejected(exc.reason)
                    await self._dead_letter(record, exc.reason, str(exc), "InvalidEvent")
                except RegistryUnavailable as exc:  # an outage, as the store's: wait, again
                    attempt += 1
                    await self._outage(exc, attempt)
                    continue
                break
        await self._apply(decoded)

    async def _decode(self, record: Record) -> OutputRecord:
        value = record.value
        if self._framed is not None and value is not None and value[:1] == b"\x00":
            return output_of(record.key, await self._framed.decode(value), record.headers)
        return decode_output(record.key, value, record.headers)

    async def _apply(self, decoded: Sequence[_Decoded]) -> None:
        """Write ``decoded`` in one transaction, retrying outages; a batch the database refuses
        outright (not an outage) is split until the record at fault is found and dead-lettered."""
        if not decoded:
            return
        attempt = 0
        while True:
            started = self._clock()
            try:
                refused = await self._store.apply([d.output for d in decoded])
            except StoreError as exc:
                self._observer.transaction(self._clock() - started, committed=False)
                if exc.retriable:
                    attempt += 1
                    await self._outage(exc, attempt)
                    continue
                if exc.reason != Reason.STORE_FAILED:
                    raise  # the table is not what the settings say: no record is at fault
                await self._isolate(decoded, exc)
                return
            self._observer.transaction(self._clock() - started, committed=True)
            break
        if self.store_problem is not None:
            log.warning("store writable again")
        self.store_problem = None
        refused_at = {r.record_index for r in refused}
        self._observer.written([d.output for i, d in enumerate(decoded) if i not in refused_at])
        for refusal in refused:
            self._observer.rejected(refusal.reason)
            await self._dead_letter(
                decoded[refusal.record_index].record, refusal.reason, refusal.message, "Rejected"
            )

    async def _isolate(self, decoded: Sequence[_Decoded], exc: StoreError) -> None:
        if len(decoded) == 1:
            self._observer.rejected(exc.reason)
            await self._dead_letter(decoded[0].record, exc.reason, str(exc), "StoreError")
            return
        middle = len(decoded) // 2
        await self._apply(decoded[:middle])
        await self._apply(decoded[middle:])

    async def _outage(self, exc: StoreError | RegistryUnavailable, attempt: int) -> None:
        if self.store_problem is None:
            what = "schema registry" if isinstance(exc, RegistryUnavailable) else "store"
            log.warning("%s unavailable, retrying with backoff: %s", what, exc)
        self.store_problem = str(exc)
        if self._stopping.is_set() or self._revoking:
            raise _GiveUp
        delay = self._backoff.delay(attempt, self._rng)
        waiters = {asyncio.ensure_future(self._stopping.wait()),
                   asyncio.ensure_future(self._sleep(delay))}  # fmt: skip
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self._stopping.is_set() or self._revoking:
            raise _GiveUp

    async def _dead_letter(self, record: Record, reason: str, message: str, kind: str) -> None:
        now = int(time.time() * 1000)
        failure = Failure(
            error_class=kind,
            reason=reason,
            message=message,
            attempts=1,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            first_failure_ms=now,
            last_failure_ms=now,
        )
        await self._dead_letters.dead_letter(record.value, record.key, failure, owner=None)

    async def _commit(self, records: Sequence[Record]) -> None:
        ends: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            ends[tp] = max(ends.get(tp, 0), r.offset + 1)
        # Not committed, a batch written is replayed (into the same rows) by whoever reads
        # these partitions next; a later commit of this member covers it too.
        if not await commit_offsets(self._consumer, ends):
            return
        self._next.update(ends)
        self.batches_committed += 1

    def _rewind(self, records: Sequence[Record]) -> None:
        """Read the abandoned batch again (from its first offset) where it is still ours."""
        firsts: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            firsts.setdefault(tp, r.offset)
        for tp, offset in firsts.items():
            if tp in self._assigned and not self._revoking:
                self._consumer.seek(tp, offset)

    # -- rebalances -----------------------------------------------------------------------

    async def on_revoked(self, partitions: set[TopicPartition]) -> None:
        self._revoking = True
        try:
            async with self._busy:  # the batch in hand is committed (or given up) first
                self._assigned -= partitions
                for tp in partitions:
                    self._next.pop(tp, None)
        finally:
            self._revoking = False

    async def on_assigned(self, partitions: set[TopicPartition]) -> None:
        self._assigned |= partitions
        for tp in partitions:
            committed = await self._consumer.committed(tp)
            self._next[tp] = committed or 0
        self.joined.set()

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)
