"""Outcomes as Kafka records: results, retry records and dead letters, then the offset.

An item's offset is marked complete only after its outcome is written (acknowledged by the
broker, or staged in its partition's transaction), so a crash re-reads it and never skips it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from embedstream.core.lanes import BucketKey
from embedstream.core.observer import EngineObserver
from embedstream.engine.cache import Hit
from embedstream.engine.jobs import Embedded, Outcomes
from embedstream.errors import EmbedStreamError
from embedstream.kafka.partitions import PartitionState
from embedstream.kafka.protocols import Record
from embedstream.kafka.sink import OutputUnwritable, Sink, now_ms
from embedstream.kafka.work import WorkItem
from embedstream.wire import EmbedResult, Failure

log = logging.getLogger(__name__)


class ResultObserver(EngineObserver, Protocol):
    def observe_result(self, lane: str, end_to_end_s: float) -> None: ...


class KafkaOutcomes(Outcomes[WorkItem]):
    def __init__(
        self, sink: Sink, observer: ResultObserver, clock_ms: Callable[[], int] = now_ms
    ) -> None:
        self.sink = sink
        self._observer = observer
        self._clock_ms = clock_ms
        self._writing: set[asyncio.Task[None]] = set()

    @property
    def writing(self) -> int:
        """Batches of results still being written."""
        return len(self._writing)

    async def succeeded(
        self, key: BucketKey, done: Sequence[Embedded[WorkItem]], dimensions: int
    ) -> None:
        """Writes the results in the background: the call slot is free again as soon as the
        response is parsed, and the offsets complete once the broker has the results."""
        task = asyncio.create_task(self._write_results(key, list(done), dimensions))
        self._writing.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("results not written (%r); their offsets stay uncommitted", task.exception())

    async def flush(self) -> None:
        """Wait for every result write started so far."""
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    def cancel_writes(self) -> None:
        """Give up on pending writes (a bounded shutdown): their items stay unfinished."""
        for task in self._writing:
            task.cancel()

    async def _write_results(
        self, key: BucketKey, done: list[Embedded[WorkItem]], dimensions: int
    ) -> None:
        now = self._clock_ms()
        results = []
        for embedded in done:
            item = embedded.job
            result = EmbedResult(
                id=item.request.id,
                model=key.model,
                embedding=embedded.vector,
                dimensions=dimensions,
                tokens=embedded.tokens,
                metadata=item.request.metadata,
                attempts=item.attempts,
                latency_ms=float(now - item.timestamp_ms),
            )
            results.append((item, result))
        await self.sink.results(results)
        lane = key.priority.label
        for embedded in done:
            self._observer.observe_result(lane, (now - embedded.job.timestamp_ms) / 1000.0)
            embedded.job.finish()

    def cached(self, hits: Sequence[Hit[WorkItem]]) -> None:
        """Results served from the embedding cache (no call made, no tokens charged), written
        in the background like those of calls. A result the broker will not take leaves its
        item unfinished (uncommitted, redone later)."""
        if not hits:
            return
        now = self._clock_ms()
        task = asyncio.create_task(self._write_all_cached(list(hits), now))
        self._writing.add(task)
        task.add_done_callback(self._written)

    async def _write_all_cached(self, hits: list[Hit[WorkItem]], now: int) -> None:
        results = []
        for hit in hits:
            item = hit.job
            result = EmbedResult(
                id=item.request.id,
                model=hit.key.model,
                embedding=hit.vector,
                dimensions=hit.dimensions,
                tokens=0,
                metadata=item.request.metadata,
                attempts=item.attempts,
                latency_ms=float(now - item.timestamp_ms),
                cached=True,
            )
            results.append((item, result))
        await self.sink.results(results)  # one batch per partition, like a call's results
        for hit in hits:
            self._observer.observe_result(
                hit.key.priority.label, (now - hit.job.timestamp_ms) / 1000.0
            )
            hit.job.finish()

    async def retry_later(self, job: WorkItem, error: EmbedStreamError, delay_s: float) -> None:
        not_before = self._clock_ms() + int(delay_s * 1000)
        await self.sink.retry(job, not_before, f"{error.reason}: {error.message}")
        job.finish()

    async def dead_letter(self, job: WorkItem, error: EmbedStreamError) -> None:
        now = self._clock_ms()
        failure = Failure(
            error_class=type(error).__name__,
            reason=error.reason,
            message=error.message,
            attempts=job.attempts,
            source_topic=job.origin.topic,
            source_partition=job.origin.partition,
            source_offset=job.origin.offset,
            first_failure_ms=job.first_failure_ms or now,
            last_failure_ms=now,
        )
        await self.sink.dead_letter(job.raw, job.request.id.encode(), failure, job.partition)
        job.finish()

    def abandoned(self, jobs: Sequence[WorkItem]) -> None:
        # Unfinished, so uncommitted: the next owner (or this one after a restart) reads them again.
        log.info("left %d held-back items unfinished for the next run", len(jobs))

    async def refused(self, record: Record, state: PartitionState, failure: Failure) -> None:
        """A record that can never become work (malformed, unservable): dead-letter it now."""
        try:
            await self.sink.dead_letter(record.value, record.key, failure, state)
        except OutputUnwritable:
            log.error("dead letter of %s-%d@%d not written; it stays unfinished", record.topic,
                      record.partition, record.offset)  # fmt: skip
            return
        log.warning("dead-lettered %s-%d@%d: %s", record.topic, record.partition, record.offset,
                    failure.reason)  # fmt: skip
        self._observer.count_dead_letter(failure.reason)
        state.complete(record.offset)
