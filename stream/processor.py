"""The consumer loop: fetch, intake, backpressure, commit, rebalance, graceful drain.

Offsets are committed per partition up to the lowest request whose outcome (result, retry record
or dead letter) the broker has not yet acknowledged, so a crash re-reads unfinished work and
never skips it. Memory is bounded by pausing partitions, never by dropping records.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from stream.batcher import Batcher
from stream.config import Settings
from stream.embedder import EmbeddingBackend
from stream.errors import InvalidEvent, PermanentItemError
from stream.events import Failure, decode_request
from stream.health import Health
from stream.kafka import ConsumerRebalanceListener, TopicPartition, make_consumer, make_producer
from stream.lanes import BucketKey, Pending, Priority
from stream.metrics import Metrics
from stream.offsets import PartitionOffsets
from stream.pipeline import Pipeline
from stream.policy import BatchLimits, FlushReason
from stream.server import OpsServer
from stream.sink import (
    ENQUEUED_AT,
    PRIORITY,
    RETRY_ATTEMPTS,
    RETRY_FIRST_ERROR,
    RETRY_FIRST_FAILURE,
    RETRY_NOT_BEFORE,
    Sink,
    now_ms,
)
from stream.tokens import TokenCounter, estimate_tokens
from stream.topics import TopicNames, topic_names
from stream.work import Origin, WorkItem

log = logging.getLogger(__name__)


@dataclass(order=True)
class _Delayed:
    not_before_ms: int
    seq: int
    item: WorkItem


class Processor:
    def __init__(
        self,
        settings: Settings,
        backend: EmbeddingBackend,
        *,
        token_counter: TokenCounter = estimate_tokens,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.topics: TopicNames = topic_names(settings.topic_prefix)
        self._backend = backend
        self._count_tokens = token_counter
        self._consumer: Any = None
        self._producer: Any = None
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._generation: dict[TopicPartition, int] = {}
        self._lag: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._delayed: list[_Delayed] = []
        self._delayed_seq = 0
        self._delayed_wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.assigned = asyncio.Event()
        self.joined = False
        self.metrics = metrics or Metrics()
        self.health: Health | None = None
        self.ops_server: OpsServer | None = None
        self.limits = limits = BatchLimits(
            max_items=settings.max_batch_size,
            max_tokens=settings.max_batch_tokens,
            max_wait_s=settings.max_wait_ms / 1000.0,
            scale_factor=settings.scale_factor,
        )
        self.pipeline: Pipeline | None = None
        self.batcher: Batcher[WorkItem] = Batcher(
            limits, self._dispatch, max_concurrency=settings.max_concurrency, backlog=self.lag
        )
        self.batcher.on_flush = self._observe_flush

    # -- public surface ---------------------------------------------------------------------

    def lag(self) -> int:
        return sum(self._lag.values())

    @property
    def held(self) -> int:
        """Requests read but not yet finished: buffered, delayed, in flight or being produced."""
        return sum(o.pending for o in self._offsets.values())

    def stop(self) -> None:
        self._stopping.set()

    # What the health loop reads (stream.health.Observed).
    @property
    def provider_ok(self) -> bool:
        return self.pipeline is None or self.pipeline.stats.provider_ok

    def partitions(self) -> dict[TopicPartition, PartitionOffsets]:
        return dict(self._offsets)

    def lag_by_partition(self) -> dict[TopicPartition, int]:
        return dict(self._lag)

    def paused_count(self) -> int:
        return len(self._paused)

    def buffered_in(self, priority: Priority) -> int:
        return self.batcher.buffered_in(priority)

    def delayed_count(self) -> int:
        return len(self._delayed)

    def held_items(self) -> int:
        return self.held

    def in_flight(self) -> int:
        return self.batcher.in_flight

    def concurrency_limit(self) -> int:
        return self.settings.max_concurrency

    def _observe_flush(
        self, key: BucketKey, items: list[Pending[WorkItem]], reason: FlushReason, now: float
    ) -> None:
        self.metrics.observe_flush(
            key.priority.name.lower(),
            reason,
            len(items),
            sum(p.tokens for p in items),
            [now - p.arrival for p in items],
        )

    async def run(self) -> None:
        """Consume until `stop()`, then drain in-flight work, commit and close."""
        self._producer = make_producer(self.settings)
        await self._producer.start()
        try:
            sink = Sink(self._producer, self.topics)
            self.pipeline = Pipeline(
                self._backend,
                sink,
                self._done,
                max_attempts=self.settings.max_attempts,
                metrics=self.metrics,
            )
            self._sink = sink
            self._consumer = make_consumer(self.settings, [])
            self._consumer.subscribe(
                [self.topics.requests_high, self.topics.requests_low, self.topics.retry],
                listener=_Listener(self),
            )
            await self._consumer.start()
            self.health = Health(self, self.metrics, self._producer)
            if self.settings.metrics_port:
                self.ops_server = OpsServer(self.metrics, self.health.readiness)
                await self.ops_server.start(self.settings.metrics_host, self.settings.metrics_port)
            health_task = asyncio.create_task(self.health.run())
            try:
                await self._run_loops()
            finally:
                health_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await health_task
                if self.ops_server is not None:
                    await self.ops_server.stop()
                await self._consumer.stop()
        finally:
            await self._producer.stop()

    # -- loops ------------------------------------------------------------------------------

    async def _run_loops(self) -> None:
        batcher_task = asyncio.create_task(self.batcher.run())
        delayed_task = asyncio.create_task(self._release_delayed())
        committer = asyncio.create_task(self._commit_periodically())
        try:
            await self._fetch_until_stopped()
        finally:
            # Drain: no new fetches; finish what was handed to the batcher, then commit.
            self._delayed.clear()  # not yet due: the retry topic keeps them for the next run
            delayed_task.cancel()
            self.batcher.drain()
            await batcher_task
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer
            with contextlib.suppress(asyncio.CancelledError):
                await delayed_task
            await self._commit(self._offsets.keys())

    async def _fetch_until_stopped(self) -> None:
        while not self._stopping.is_set():
            self._apply_backpressure()
            room = self.settings.max_buffered_items - self.held
            if room <= 0:
                await self._wait_for_room()
                continue
            fetch = asyncio.ensure_future(
                self._consumer.getmany(
                    timeout_ms=200, max_records=min(room, self.settings.max_poll_records)
                )
            )
            stop_wait = asyncio.ensure_future(self._stopping.wait())
            done, _ = await asyncio.wait({fetch, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if fetch not in done:
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, KafkaError):
                    await fetch
                break
            for tp, records in fetch.result().items():
                if tp not in self._offsets:
                    continue  # revoked while the fetch was in flight
                for record in records:
                    await self._intake(tp, record)
                self._update_lag(tp, records[-1].offset + 1)

    async def _wait_for_room(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), 0.05)

    def _update_lag(self, tp: TopicPartition, position: int) -> None:
        highwater = self._consumer.highwater(tp)
        if highwater is not None:
            self._lag[tp] = max(0, highwater - position)

    def _apply_backpressure(self) -> None:
        """Pause low priority first, then everything; resume below half (hysteresis)."""
        limit = self.settings.max_buffered_items
        held = self.held
        assigned = set(self._offsets)
        if held >= limit:
            wanted = assigned
        elif held >= 0.8 * limit:
            wanted = {tp for tp in assigned if tp.topic != self.topics.requests_high} | (
                self._paused & assigned
            )
        elif held < 0.5 * limit:
            wanted = set()
        else:
            wanted = self._paused & assigned
        to_pause = wanted - self._paused
        to_resume = (self._paused & assigned) - wanted
        if to_pause:
            self._consumer.pause(*to_pause)
        if to_resume:
            self._consumer.resume(*to_resume)
        self._paused = wanted

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_ms / 1000.0)
            await self._commit(list(self._offsets))

    async def _commit(self, partitions: Iterable[TopicPartition]) -> None:
        offsets = {}
        for tp in partitions:
            tracker = self._offsets.get(tp)
            offset = tracker.to_commit() if tracker else None
            if offset is not None:
                offsets[tp] = offset
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError, KafkaError) as exc:
            # A rebalance is under way; the next owner re-reads from the last good commit.
            log.warning("commit of %d partitions failed (%s); will retry", len(offsets), exc)
            return
        for tp, offset in offsets.items():
            tracker = self._offsets.get(tp)
            if tracker is not None:
                tracker.mark_committed(offset)

    # -- intake -----------------------------------------------------------------------------

    async def _intake(self, tp: TopicPartition, record: Any) -> None:
        self._offsets[tp].track(record.offset, record.timestamp)
        origin = Origin(record.topic, record.partition, record.offset)
        headers = {k: (v or b"").decode("utf-8", "replace") for k, v in record.headers or ()}
        try:
            request = decode_request(record.value, max_bytes=self.settings.max_event_bytes)
        except InvalidEvent as exc:
            await self._dead_letter_raw(record, origin, exc.reason, exc.message, headers)
            return
        item = WorkItem(
            request=request,
            origin=origin,
            raw=record.value,
            priority=self._priority(record.topic, headers),
            timestamp_ms=int(headers.get(ENQUEUED_AT, record.timestamp)),
            attempts=int(headers.get(RETRY_ATTEMPTS, 0)),
            first_failure_ms=int(headers[RETRY_FIRST_FAILURE])
            if RETRY_FIRST_FAILURE in headers
            else None,
            first_error=headers.get(RETRY_FIRST_ERROR),
            generation=self._generation[tp],
        )
        tokens = self._count_tokens(request.text)
        if tokens > self.settings.max_input_tokens:
            message = f"about {tokens} tokens, limit {self.settings.max_input_tokens}"
            assert self.pipeline is not None
            await self.pipeline.dead_letter(item, PermanentItemError("too_long", message))
            return
        not_before = int(headers.get(RETRY_NOT_BEFORE, 0))
        if not_before > now_ms():
            self._delayed_seq += 1
            heapq.heappush(self._delayed, _Delayed(not_before, self._delayed_seq, item))
            self._delayed_wake.set()
            return
        self._submit(item, tokens)

    def _submit(self, item: WorkItem, tokens: int) -> None:
        request = item.request
        key = BucketKey(
            priority=item.priority,
            model=request.model or self.settings.model,
            encoding_format=request.encoding_format or self.settings.encoding_format,
            dimensions=request.dimensions,
        )
        self.batcher.add(key, tokens, item)

    def _priority(self, topic: str, headers: dict[str, str]) -> Priority:
        if topic == self.topics.requests_high:
            return Priority.HIGH
        if topic == self.topics.retry and headers.get(PRIORITY) == "high":
            return Priority.HIGH
        return Priority.LOW

    async def _release_delayed(self) -> None:
        """Moves retry items into the batcher once their not-before time has come."""
        while True:
            self._delayed_wake.clear()
            now = now_ms()
            while self._delayed and self._delayed[0].not_before_ms <= now:
                item = heapq.heappop(self._delayed).item
                if self._is_current(item):
                    self._submit(item, self._count_tokens(item.request.text))
            timeout = (self._delayed[0].not_before_ms - now) / 1000.0 if self._delayed else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._delayed_wake.wait(), timeout)

    async def _dead_letter_raw(
        self, record: Any, origin: Origin, reason: str, message: str, headers: dict[str, str]
    ) -> None:
        now = now_ms()
        failure = Failure(
            error_class="InvalidEvent",
            reason=reason,
            message=message,
            attempts=int(headers.get(RETRY_ATTEMPTS, 0)),
            source_topic=origin.topic,
            source_partition=origin.partition,
            source_offset=origin.offset,
            first_failure_ms=now,
            last_failure_ms=now,
        )
        await self._sink.dead_letter(record.value, record.key, failure)
        self._complete(origin, self._generation.get(TopicPartition(origin.topic, origin.partition)))

    # -- completion and rebalance -----------------------------------------------------------

    async def _dispatch(self, key: BucketKey, batch: list[Any], reason: Any) -> None:
        assert self.pipeline is not None
        await self.pipeline.dispatch(key, batch, reason)

    def _done(self, item: WorkItem) -> None:
        self._complete(item.origin, item.generation)

    def _complete(self, origin: Origin, generation: int | None) -> None:
        tp = TopicPartition(origin.topic, origin.partition)
        tracker = self._offsets.get(tp)
        if tracker is not None and self._generation.get(tp) == generation:
            tracker.complete(origin.offset)

    def _is_current(self, item: WorkItem) -> bool:
        tp = TopicPartition(item.origin.topic, item.origin.partition)
        return tp in self._offsets and self._generation.get(tp) == item.generation

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._commit(revoked)
        for tp in revoked:
            self._offsets.pop(tp, None)
            self._lag.pop(tp, None)
            self._paused.discard(tp)
            self._generation[tp] = self._generation.get(tp, 0) + 1
        self.batcher.drop_where(lambda item: not self._is_current(item))
        self._delayed = [d for d in self._delayed if self._is_current(d.item)]
        heapq.heapify(self._delayed)
        log.info("partitions revoked: %s", sorted(str(tp) for tp in revoked))

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.joined = True
        for tp in assigned:
            self._offsets[tp] = PartitionOffsets()
            self._generation[tp] = self._generation.get(tp, 0) + 1
        if assigned:
            self.assigned.set()
        log.info("partitions assigned: %s", sorted(str(tp) for tp in assigned))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, processor: Processor) -> None:
        self._processor = processor

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._processor.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._processor.on_assigned(set(assigned))
