"""The consumer loop: fetch, intake, backpressure, commit, rebalance, graceful drain.

Offsets are committed per partition up to the lowest request whose outcome (result, retry record
or dead letter) the broker has not yet acknowledged, so a crash re-reads unfinished work and
never skips it. Memory is bounded by pausing partitions, never by dropping records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiokafka.errors import KafkaError

from embedstream.config import Settings
from embedstream.core.backoff import Backoff
from embedstream.core.delayed import DelayQueue
from embedstream.core.flow import fetch_budget, partitions_to_pause
from embedstream.core.governor import Governor
from embedstream.core.intake import Admitted, Intake
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.limits import effective_limits, profile
from embedstream.core.offsets import PartitionOffsets
from embedstream.core.policy import BatchLimits, FlushReason
from embedstream.core.tokens import TokenCounter, estimate_tokens
from embedstream.engine.batcher import Batcher
from embedstream.engine.calls import Pipeline
from embedstream.engine.embedder import EmbeddingBackend
from embedstream.kafka.admin import TopicNames, topic_names
from embedstream.kafka.clients import (
    ConsumerRebalanceListener,
    TopicPartition,
    make_consumer,
    make_producer,
)
from embedstream.kafka.commits import OffsetCommitter
from embedstream.kafka.sink import (
    ENQUEUED_AT,
    PRIORITY,
    RETRY_ATTEMPTS,
    RETRY_FIRST_ERROR,
    RETRY_FIRST_FAILURE,
    RETRY_NOT_BEFORE,
    DirectWriter,
    OutputUnwritable,
    Sink,
    Writer,
    now_ms,
)
from embedstream.kafka.transactions import PartitionTransactions
from embedstream.kafka.work import Origin, WorkItem
from embedstream.ops.health import Health
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import OpsServer
from embedstream.wire import Failure

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 100


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
        self._sink: Sink | None = None
        self._txns: PartitionTransactions | None = None  # exactly-once mode only
        self._committer: OffsetCommitter | None = None
        # Until records are seen, assume large ones: the first fetch must not overshoot.
        self._avg_record_bytes = settings.max_event_bytes / 4
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._generation: dict[TopicPartition, int] = {}
        self._lag: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._revoking: set[TopicPartition] = set()  # handing off: read nothing more from them
        self._progress = asyncio.Event()  # set whenever an item finishes
        self._delayed: DelayQueue[WorkItem] = DelayQueue()
        self._delayed_wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self.assigned = asyncio.Event()
        self.joined = False
        self.metrics = metrics or Metrics()
        self.health: Health | None = None
        self.ops_server: OpsServer | None = None
        provider = effective_limits(
            profile(settings.provider_profile),
            max_batch_size=settings.max_batch_size,
            max_batch_tokens=settings.max_batch_tokens,
            max_input_tokens=settings.max_input_tokens,
        )
        self.intake = Intake(settings, provider, token_counter)
        self.limits = BatchLimits(
            max_items=provider.max_inputs,
            max_tokens=provider.max_tokens_per_request,
            max_wait_s=settings.max_wait_ms / 1000.0,
            scale_factor=settings.scale_factor,
        )
        self.governor = Governor(
            max_concurrency=settings.max_concurrency,
            clock=time.monotonic,
            adaptive=settings.concurrency_mode == "adaptive",
            target_latency_s=settings.target_latency_ms / 1000.0 or None,
            min_low_share=settings.min_low_share,
            rpm=settings.rate_limit_rpm,
            tpm=settings.rate_limit_tpm,
        )
        self.pipeline: Pipeline | None = None
        self.batcher: Batcher[WorkItem] = Batcher(
            self.limits, self._dispatch, governor=self.governor, backlog=self.lag_of
        )
        self.batcher.on_flush = self._observe_flush

    # -- public surface ---------------------------------------------------------------------

    def lag(self) -> int:
        return sum(self._lag.values())

    def lag_of(self, lane: Priority) -> int:
        """Consumer lag feeding a lane (the retry topic counts as low: mostly bulk)."""
        high = lane is Priority.HIGH
        return sum(lag for tp, lag in self._lag.items() if self._is_high(tp) == high)

    @property
    def held(self) -> int:
        """Requests read but not yet finished: buffered, delayed, in flight or being produced."""
        return sum(o.pending for o in self._offsets.values())

    @property
    def held_bytes(self) -> int:
        return sum(o.pending_bytes for o in self._offsets.values())

    @property
    def pressure(self) -> int:
        """Held items, or the bytes held expressed as items if that is the tighter bound."""
        s = self.settings
        by_bytes = -(-self.held_bytes * s.max_buffered_items // s.max_buffered_bytes)
        return max(self.held, by_bytes)

    def stop(self) -> None:
        self._stopping.set()

    # What the health loop reads (embedstream.ops.health.Observed).
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
        return self.governor.limit.limit

    def depth(self, lane: Priority) -> int:
        return self.batcher.depth(lane)

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self) -> None:
        """Consume until `stop()`, then drain in-flight work, commit and close."""
        self._producer = make_producer(self.settings)
        await self._producer.start()
        try:
            writer: Writer = DirectWriter(self._producer)
            if self.settings.delivery == "exactly_once":
                self._txns = PartitionTransactions(self.settings.group_id, self._txn_producer)
                writer = self._txns
            self._sink = Sink(writer, self.topics)
            self.pipeline = Pipeline(
                self._backend,
                self._sink,
                self._done,
                max_attempts=self.settings.max_attempts,
                backoff=Backoff(
                    base_s=self.settings.retry_backoff_base_ms / 1000.0,
                    cap_s=self.settings.retry_backoff_cap_ms / 1000.0,
                ),
                metrics=self.metrics,
                governor=self.governor,
            )
            self._consumer = make_consumer(self.settings)
            self._consumer.subscribe(
                [self.topics.requests_high, self.topics.requests_low, self.topics.retry],
                listener=_Listener(self),
            )
            await self._consumer.start()
            self._committer = OffsetCommitter(
                self._consumer, self._offsets, self._txns, on_lost=self._forget
            )
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

    async def _run_loops(self) -> None:
        batcher_task = asyncio.create_task(self.batcher.run())
        delayed_task = asyncio.create_task(self._release_delayed())
        committer = asyncio.create_task(self._commit_periodically())
        try:
            await self._fetch_until_stopped()
        finally:
            # Drain: no new fetches; finish what was handed to the batcher, then commit.
            delayed_task.cancel()
            await self._hand_back_delayed(set(self._offsets))
            self.batcher.drain()
            await batcher_task
            for task in (committer, delayed_task):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._commit(self._offsets.keys())

    # -- fetching and backpressure ----------------------------------------------------------

    async def _fetch_until_stopped(self) -> None:
        while not self._stopping.is_set():
            self._apply_backpressure()
            low_fetching = any(
                tp not in self._paused and not self._is_high(tp) for tp in self._offsets
            )
            budget = fetch_budget(
                held=self.pressure,
                limit=self.settings.max_buffered_items,
                low_fetching=low_fetching,
                max_poll=self.settings.max_poll_records,
            )
            budget = int(budget / self._record_cost())
            if budget <= 0:
                await self._sleep_unless_stopping(0.05)
                continue
            batch = await self._fetch(budget)
            if batch is None:
                return
            for tp, records in self._high_first(batch):
                if tp in self._revoking:
                    continue  # the next owner reads these from the committed offset
                if tp not in self._offsets:
                    self._rewind_if_assigned(tp, records[0].offset)
                    continue
                for record in records:
                    await self._intake(tp, record)
                self._update_lag(tp, records[-1].offset + 1)

    async def _fetch(self, budget: int) -> dict[TopicPartition, list[Any]] | None:
        """One fetch, abandoned (None) as soon as a stop is requested."""
        fetch = asyncio.ensure_future(
            self._consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=budget)
        )
        stop_wait = asyncio.ensure_future(self._stopping.wait())
        done, _ = await asyncio.wait({fetch, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        if fetch not in done:
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError):
                await fetch
            return None
        result: dict[TopicPartition, list[Any]] = fetch.result()
        return result

    def _record_cost(self) -> float:
        """What one more record is likely to weigh against the item limit, given the byte
        limit and the size of recent records (1 unless records are large)."""
        s = self.settings
        return max(1.0, self._avg_record_bytes * s.max_buffered_items / s.max_buffered_bytes)

    def _rewind_if_assigned(self, tp: TopicPartition, offset: int) -> None:
        """Records of a partition we do not track yet were skipped: if it is ours, read them
        again later rather than let the fetch position move past them."""
        if tp in self._consumer.assignment():
            self._consumer.seek(tp, offset)
            log.info("rewound %s to %d: records arrived before it was tracked", tp, offset)

    def _high_first(
        self, batch: dict[TopicPartition, list[Any]]
    ) -> list[tuple[TopicPartition, list[Any]]]:
        return sorted(batch.items(), key=lambda pair: not self._is_high(pair[0]))

    def _is_high(self, tp: TopicPartition) -> bool:
        return bool(tp.topic == self.topics.requests_high)

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def refresh_lag(self) -> None:
        """Lag of paused partitions, asked of the broker: they fetch nothing, so the high
        watermark that fetches carry would go stale exactly while backpressure holds."""
        stale = [tp for tp in self._offsets if tp in self._paused]
        if not stale or self._consumer is None:
            return
        ends = await self._consumer.end_offsets(stale)
        for tp in stale:
            if tp in self._offsets and tp in ends:
                position = await self._consumer.position(tp)
                self._lag[tp] = max(0, ends[tp] - position)

    def _update_lag(self, tp: TopicPartition, position: int) -> None:
        highwater = self._consumer.highwater(tp)
        if highwater is not None:
            self._lag[tp] = max(0, highwater - position)

    def _apply_backpressure(self) -> None:
        wanted = partitions_to_pause(
            held=self.pressure,
            limit=self.settings.max_buffered_items,
            provider_blocked=not self.provider_ok or self.governor.blocked_for() > 0,
            assigned=self._offsets,
            paused=self._paused,
            is_high=self._is_high,
        )
        to_pause = wanted - self._paused
        to_resume = (self._paused & set(self._offsets)) - wanted
        if to_pause:
            self._consumer.pause(*to_pause)
            log.info("paused %d partitions (held %d)", len(to_pause), self.held)
        if to_resume:
            self._consumer.resume(*to_resume)
            log.info("resumed %d partitions (held %d)", len(to_resume), self.held)
        self._paused = wanted

    # -- commits ----------------------------------------------------------------------------

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_ms / 1000.0)
            await self._commit(list(self._offsets))

    def _txn_producer(self, transactional_id: str) -> Any:
        return make_producer(
            self.settings, transactional_id=transactional_id, enable_idempotence=True
        )

    async def _commit(self, partitions: Iterable[TopicPartition]) -> None:
        if self._committer is not None:
            await self._committer.commit(list(partitions))

    # -- intake -----------------------------------------------------------------------------

    async def _intake(self, tp: TopicPartition, record: Any) -> None:
        size = len(record.value or b"")
        self._avg_record_bytes += (size - self._avg_record_bytes) / 8  # follows recent sizes
        self._offsets[tp].track(record.offset, record.timestamp, size)
        origin = Origin(record.topic, record.partition, record.offset)
        headers = {k: (v or b"").decode("utf-8", "replace") for k, v in record.headers or ()}
        verdict = self.intake.admit(record.value)
        attempts = int(headers.get(RETRY_ATTEMPTS, 0))
        if not isinstance(verdict, Admitted):
            await self._reject(record, origin, verdict.error_class, verdict.reason,
                               verdict.message, attempts)  # fmt: skip
            return
        first_failure = headers.get(RETRY_FIRST_FAILURE)
        item = WorkItem(
            request=verdict.request,
            origin=origin,
            raw=record.value,
            priority=self._priority(record.topic, headers),
            timestamp_ms=int(headers.get(ENQUEUED_AT, record.timestamp)),
            attempts=attempts,
            first_failure_ms=int(first_failure) if first_failure else None,
            first_error=headers.get(RETRY_FIRST_ERROR),
            generation=self._generation[tp],
            model=verdict.model,
            encoding_format=verdict.encoding_format,
            tokens=verdict.tokens,
            truncated_from=verdict.truncated_from,
        )
        item.not_before_ms = int(headers.get(RETRY_NOT_BEFORE, 0))
        if item.not_before_ms > now_ms():
            self._delayed.push(item.not_before_ms, item)
            self._delayed_wake.set()
            return
        self._submit(item)

    def _submit(self, item: WorkItem) -> None:
        key = BucketKey(item.priority, item.model, item.encoding_format, item.request.dimensions)
        self.batcher.add(key, item.tokens, item)

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
            for item in self._delayed.pop_due(now):
                if self._is_current(item):
                    self._submit(item)
            due = self._delayed.next_due_ms()
            timeout = (due - now) / 1000.0 if due is not None else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._delayed_wake.wait(), timeout)

    async def _reject(
        self, record: Any, origin: Origin, error_class: str, reason: str, message: str,
        attempts: int,
    ) -> None:  # fmt: skip
        now = now_ms()
        failure = Failure(error_class, reason, message, attempts, origin.topic,
                          origin.partition, origin.offset, now, now)  # fmt: skip
        assert self._sink is not None
        try:
            await self._sink.dead_letter(record.value, record.key, failure)
        except OutputUnwritable:
            log.error("dead letter of %s-%d@%d not written; it stays unfinished", origin.topic,
                      origin.partition, origin.offset)  # fmt: skip
            return
        log.warning("dead-lettered %s-%d@%d: %s", origin.topic, origin.partition, origin.offset,
                    reason)  # fmt: skip
        self.metrics.count_dead_letter(reason)
        tp = TopicPartition(origin.topic, origin.partition)
        self._complete(origin, self._generation.get(tp))

    # -- completion and rebalance -----------------------------------------------------------

    async def _dispatch(
        self, key: BucketKey, batch: list[Pending[WorkItem]], reason: FlushReason
    ) -> None:
        assert self.pipeline is not None
        await self.pipeline.dispatch(key, batch, reason)

    def _observe_flush(
        self, key: BucketKey, items: list[Pending[WorkItem]], reason: FlushReason, now: float
    ) -> None:
        self.metrics.observe_flush(
            key.priority.label,
            reason,
            len(items),
            sum(p.tokens for p in items),
            [now - p.arrival for p in items],
        )

    def _done(self, item: WorkItem) -> None:
        self._complete(item.origin, item.generation)

    def _complete(self, origin: Origin, generation: int | None) -> None:
        tp = TopicPartition(origin.topic, origin.partition)
        tracker = self._offsets.get(tp)
        if tracker is not None and self._generation.get(tp) == generation:
            tracker.complete(origin.offset)
            self._progress.set()

    def _is_current(self, item: WorkItem) -> bool:
        tp = TopicPartition(item.origin.topic, item.origin.partition)
        return tp in self._offsets and self._generation.get(tp) == item.generation

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Hand off cleanly: finish what was read from `revoked`, commit it, then let go.

        Buffered items are sent now rather than dropped, and retries not yet due go back to
        the retry topic, so the commit covers everything read and the next owner repeats
        nothing. Work still unfinished after `drain_timeout_s` is abandoned (at-least-once:
        the next owner re-reads it).
        """
        self._revoking |= revoked
        try:
            await self._hand_back_delayed(revoked)
            self.batcher.hurry()
            deadline = time.monotonic() + self.settings.drain_timeout_s
            while self._pending_in(revoked) and time.monotonic() < deadline:
                self._progress.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._progress.wait(), deadline - time.monotonic())
            if self._pending_in(revoked):
                log.warning("revoke: %d items unfinished after %.0fs; the next owner redoes them",
                            self._pending_in(revoked), self.settings.drain_timeout_s)  # fmt: skip
            await self._commit(revoked)
        finally:
            for tp in revoked:
                self._forget(tp)
                if self._txns is not None:
                    await self._txns.release(tp)
            self._revoking -= revoked
        log.info("partitions revoked: %s", sorted(str(tp) for tp in revoked))

    def _forget(self, tp: TopicPartition) -> None:
        """Stop tracking a partition: later completions of its items are ignored."""
        self._offsets.pop(tp, None)
        self._lag.pop(tp, None)
        self._paused.discard(tp)
        self._generation[tp] = self._generation.get(tp, 0) + 1
        self.batcher.drop_where(lambda item: not self._is_current(item))
        self._delayed.keep_where(self._is_current)

    def _pending_in(self, partitions: set[TopicPartition]) -> int:
        return sum(self._offsets[tp].pending for tp in partitions if tp in self._offsets)

    async def _hand_back_delayed(self, partitions: set[TopicPartition]) -> None:
        """Retries not yet due go back to the retry topic unchanged, so their offsets (and
        everything after them) can be committed now."""

        def read_from(item: WorkItem) -> bool:
            return TopicPartition(item.origin.topic, item.origin.partition) in partitions

        items = self._delayed.take_where(read_from)
        if not items or self._sink is None:
            return
        sink = self._sink
        await asyncio.gather(
            *(sink.retry(i, i.not_before_ms, i.first_error or "requeued") for i in items)
        )
        for item in items:
            self._done(item)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.joined = True
        # Track first, with no await between: the fetch loop may hand over records of these
        # partitions as soon as they are assigned, and an untracked record would be skipped.
        for tp in assigned:
            self._offsets[tp] = PartitionOffsets()
            self._generation[tp] = self._generation.get(tp, 0) + 1
            if self._txns is not None:
                self._txns.open(tp)
        if self._txns is not None:
            for tp in assigned:
                await self._txns.assign(tp)  # fences the previous owner before any commit
        if assigned:
            self.assigned.set()
        log.info("partitions assigned: %s", sorted(str(tp) for tp in assigned))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, processor: Processor) -> None:
        self._processor = processor

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._processor.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._processor.on_assigned(set(assigned))
