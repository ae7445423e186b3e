"""Outcomes as Kafka records: results, retry records and dead letters, then the offset.

An item's offset is marked complete only after its outcome is written (acknowledged by the
broker, or staged in its partition's transaction), so a crash re-reads it and never skips it.
Each outcome ends its request's process span (tracing) and is accounted to its source topic.
A document's chunk answers to its document instead (`kafka/outputs/document_runs.py`): its result
is a
chunk record keyed by doc_id, a retry waits in memory, and a dead letter names the chunk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Protocol

import orjson

from embedstream.core.clock import Clock
from embedstream.core.generations import GenerationIds
from embedstream.core.lanes import BucketKey, Priority
from embedstream.core.observer import EngineObserver
from embedstream.core.offsets import PartitionOffsets
from embedstream.core.tracing import NULL_SPAN, TRACEPARENT
from embedstream.engine.jobs import Embedded, Hit, Outcomes
from embedstream.errors import EmbedStreamError
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.outputs.document_runs import DocumentFlow
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import Output, OutputUnwritable, ResultWriter
from embedstream.kafka.outputs.work import ChunkOf, WorkItem
from embedstream.wire import ChunkResult, Failure, Vector, chunk_headers

log = logging.getLogger(__name__)

# A low call's results are encoded this many at a time, with a turn of the event loop between:
# a 2,048-input call's records were one stretch of 100-180 ms (asyncio's slow-callback log
# in the kafka-flood bench), and every high request ready meanwhile waited it out.
ENCODE_SLICE = 256


# What a result record is made of: the item, model, vector, dimensions, tokens, cached, and
# the index generation of a request's result (a chunk's is its document run's).
_Row = tuple[WorkItem, str, Vector, int, int, bool, str]


class ResultObserver(EngineObserver, Protocol):
    def observe_result(self, lane: str, end_to_end_s: float) -> None: ...

    def observe_results(self, lane: str, end_to_end_s: Sequence[float]) -> None: ...

    def count_source_usage(
        self, source: str, *, tokens: int, estimated: bool, call_share: float
    ) -> None:
        """A call's results of one source: their provider tokens (`estimated` when the
        provider reported no usage) and the source's share of the call's inputs."""

    def count_source_cache_savings(self, source: str, hits: int, tokens: int) -> None:
        """Cache hits of one source, and the estimated tokens they kept from the provider."""

    def count_generation_tokens(self, generation: str, lane: str, tokens: int) -> None:
        """Provider tokens of the vectors a call made for one index generation and lane."""

    def count_tier_tokens(self, tier: str, model: str, tokens: int) -> None:
        """Provider tokens billed at a price tier: a sync call's, or a batch job's."""


class KafkaOutcomes(Outcomes[WorkItem]):
    def __init__(
        self,
        result_writer: ResultWriter,
        observer: ResultObserver,
        documents: DocumentFlow,
        clock: Clock,
    ) -> None:
        self.result_writer = result_writer
        self.documents = documents
        self._observer = observer
        self._clock_ms = clock.wall_ms
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
        """Wait for every result write started so far, and the document records they lead to."""
        while self._writing or self.documents.writing:
            await asyncio.gather(*self._writing, return_exceptions=True)
            await self.documents.flush()

    def cancel_writes(self) -> None:
        """Give up on pending writes (a bounded shutdown): their items stay unfinished."""
        for task in self._writing:
            task.cancel()
        self.documents.cancel_writes()

    def _chunk_result(
        self,
        item: WorkItem,
        chunk: ChunkOf,
        model: str,
        vector: Vector,
        dimensions: int,
        tokens: int,
        latency_ms: float,
        cached: bool,
    ) -> ChunkResult:
        run = chunk.document
        generation = run.index_generation  # (a dual-write's other chunking is its own)
        text = item.text if self.documents.include_text else None
        result = ChunkResult(
            run.doc_id, run.version, chunk.seq, run.progress.chunk_count,
            (chunk.start, chunk.end), vector, model, dimensions, tokens, cached,
            run.metadata, item.attempts, latency_ms, text, generation,
        )  # fmt: skip
        if self.documents.changelog is not None and run.changelogged:
            self.documents.changelog.keep(run, result)
        return result

    async def batch_answered(
        self, key: BucketKey, done: Sequence[Embedded[WorkItem]], dimensions: int
    ) -> None:
        """Results a batch job's lines answered (`kafka/batchjobs/replay.py`): written as a
        call's are, their tokens billed at the batch price."""
        await self._write_results(key, list(done), dimensions, tier="batch")

    async def _write_results(
        self, key: BucketKey, done: list[Embedded[WorkItem]], dimensions: int, tier: str = "sync"
    ) -> None:
        # One index generation for a call's requests: its bucket's model and dimensions.
        generation = self.documents.generations.id_of(key.model, key.dimensions)
        rows = [(e.job, key.model, e.vector, dimensions, e.tokens, False, generation) for e in done]
        finished = [(e.job, e.tokens) for e in done]
        done.clear()  # this task's own list: `rows` holds the last references to the vectors
        now = self._clock_ms()
        await self._write_rows(key.priority, rows, now)
        latencies = [(now - job.timestamp_ms) / 1000.0 for job, _ in finished]
        self._observer.observe_results(key.priority.label, latencies)
        _finish([job for job, _ in finished], "result")
        self._account(key, generation, finished)
        billed = sum(map(_used, finished))
        if not billed and tier == "sync":  # no usage reported: the estimates
            billed = sum(map(_estimate, map(_job, finished)))
        self._observer.count_tier_tokens(tier, key.model, billed)

    async def _write_rows(self, priority: Priority, rows: list[_Row], now: int) -> None:
        """Encodes the records, then lets the vectors go before waiting for the broker: behind
        a slow broker thousands of results wait to be acked, and a 256-float vector as a list
        costs 8 KiB, more than its JSON (soak, bench/soak_heap.py). Calls' results and cache
        hits alike."""
        outputs: list[Output] = []
        # High results go in one stretch: they are the work the slices make way for.
        step = max(1, len(rows)) if priority is Priority.HIGH else ENCODE_SLICE
        for start in range(0, len(rows), step):
            if start:
                await asyncio.sleep(0)  # a turn for whatever became ready meanwhile
            outputs += self._encoded(rows[start : start + step], now)
        jobs = [row[0] for row in rows]
        rows.clear()  # the caller's list: the last reference to the vectors
        # Until acked, each record counts against max_buffered_bytes on its input's offset:
        # a 1,536-float result is 30 KB of JSON, thirty times what its request weighed.
        # Their records finish only once this returns, so the bytes are held by partition.
        held = _held_bytes(jobs, outputs)
        for offsets, size in held.items():
            offsets.hold_written(size)
        try:
            await self.result_writer.write_outputs(outputs)
        finally:
            for offsets, size in held.items():
                offsets.hold_written(-size)

    def _encoded(self, rows: list[_Row], now: int) -> list[Output]:
        """The records of a slice of results."""
        outputs: list[Output] = []
        result_output = self.result_writer.result_output
        for job, model, vector, dims, tokens, cached, generation in rows:
            latency_ms = float(now - job.timestamp_ms)
            chunk = job.chunk
            if chunk is None:
                output = result_output(job, model, vector, dims, tokens, latency_ms, cached,
                                       generation)  # fmt: skip
            else:
                result = self._chunk_result(job, chunk, model, vector, dims, tokens,
                                            latency_ms, cached)  # fmt: skip
                output = self.result_writer.chunk_output(job, result)
            outputs.append(output)
        return outputs

    def _account(
        self, key: BucketKey, generation: str, finished: list[tuple[WorkItem, int]]
    ) -> None:
        """One call's usage per source (usually one source a call: one counter update each)
        and its tokens by index generation (its items share a lane and model; a chunk's
        generation is its document run's)."""
        reported = sum(map(_used, finished))
        jobs = list(map(_job, finished))
        if len(set(map(_source, jobs))) == 1 and set(map(_chunk, jobs)) == {None}:
            # Usually: one source, no document chunks, so one total of each (passes in C).
            source = jobs[0].source
            spent = reported or sum(map(_estimate, jobs))
            self._observer.count_source_usage(
                source, tokens=spent, estimated=not reported, call_share=1.0
            )
            self._observer.count_generation_tokens(generation, key.priority.label, spent)
            return
        tokens: dict[str, int] = {}
        inputs: dict[str, int] = {}
        by_generation: dict[str, int] = {}
        for job, used in finished:
            spent = used if reported else job.tokens
            source = job.source
            tokens[source] = tokens.get(source, 0) + spent
            inputs[source] = inputs.get(source, 0) + 1
            chunk = job.chunk
            of = generation if chunk is None else chunk.document.index_generation
            by_generation[of] = by_generation.get(of, 0) + spent
        for source, count in inputs.items():
            self._observer.count_source_usage(
                source, tokens=tokens[source], estimated=not reported,
                call_share=count / len(finished),
            )  # fmt: skip
        for of, count in by_generation.items():
            self._observer.count_generation_tokens(of, key.priority.label, count)

    def answered(self, hits: Sequence[Hit[WorkItem]]) -> None:
        """Results served from the embedding cache, or from another call's vector for the
        same text (no call of their own, no tokens charged), written in the background like
        those of calls. A result the broker will not take leaves its item unfinished
        (uncommitted, redone later)."""
        if not hits:
            return
        now = self._clock_ms()
        task = asyncio.create_task(self._write_all_cached(list(hits), now))
        self._writing.add(task)
        task.add_done_callback(self._written)

    async def _write_all_cached(self, hits: list[Hit[WorkItem]], now: int) -> None:
        finished = [(h.job, h.key.priority) for h in hits]
        # A look-up's hits may be of both lanes: high first.
        by_lane = _rows_by_lane(hits, self.documents.generations)
        hits.clear()  # this task's own list: `by_lane` holds the last references to the vectors
        for priority, rows in by_lane:
            await self._write_rows(priority, rows, now)
        saved: dict[str, tuple[int, int]] = {}
        for job, priority in finished:
            self._observer.observe_result(priority.label, (now - job.timestamp_ms) / 1000.0)
        _finish([job for job, _ in finished], "cached")
        for job, _ in finished:
            count, tokens = saved.get(job.source, (0, 0))
            saved[job.source] = (count + 1, tokens + job.tokens)
        for source, (count, tokens) in saved.items():
            self._observer.count_source_cache_savings(source, count, tokens)

    async def retry_later(self, job: WorkItem, error: EmbedStreamError, delay_s: float) -> None:
        now = self._clock_ms()
        not_before = now + int(delay_s * 1000)
        if job.chunk is not None:  # in memory: its document's offset waits for it anyway
            job.not_before_ms = not_before
            job.first_failure_ms = job.first_failure_ms or now
            job.first_error = job.first_error or f"{error.reason}: {error.message}"
            job.span.event(f"retry in memory ({error.reason})")
            self.documents.resubmit(job)
            return
        await self.result_writer.retry(job, not_before, f"{error.reason}: {error.message}")
        job.span.end("retry")
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
        traceparent = job.span.traceparent()
        traced = [] if traceparent is None else [(TRACEPARENT, traceparent)]
        if job.chunk is None:
            await self.result_writer.dead_letter(
                job.raw, job.request.id.encode(), failure, job.partition, traced
            )
        else:
            value, key, headers = _chunk_dead_letter(job, job.chunk)
            await self.result_writer.dead_letter(
                value, key, failure, job.partition, headers + traced
            )
        job.span.end("dead_letter")
        job.given_up()

    def abandoned(self, jobs: Sequence[WorkItem]) -> None:
        # Unfinished, so uncommitted: the next owner (or this one after a restart) reads them again.
        log.info("left %d held-back items unfinished for the next run", len(jobs))

    async def refused(self, record: Record, state: PartitionState, failure: Failure) -> None:
        """A record that can never become work (malformed, unservable): dead-letter it now."""
        # No span of ours: the dead letter carries the producer's traceparent on.
        traced = [(name, value) for name, value in record.headers or ()
                  if name == TRACEPARENT and value is not None]  # fmt: skip
        try:
            await self.result_writer.dead_letter(record.value, record.key, failure, state, traced)
        except OutputUnwritable:
            log.error("dead letter of %s-%d@%d not written; it stays unfinished", record.topic,
                      record.partition, record.offset)  # fmt: skip
            return
        log.warning("dead-lettered %s-%d@%d: %s", record.topic, record.partition, record.offset,
                    failure.reason)  # fmt: skip
        self._observer.count_dead_letter(failure.reason)
        state.complete(record.offset)


_job, _used = itemgetter(0), itemgetter(1)  # of (job, tokens used) pairs
_source, _chunk, _estimate = attrgetter("source"), attrgetter("chunk"), attrgetter("tokens")


def _finish(jobs: list[WorkItem], outcome: str) -> None:
    """Their outcomes are written: each one's span ends, and the offsets complete, a
    partition's all at once (a chunk's document takes its own)."""
    offsets: dict[PartitionState, list[int]] = {}
    for job in jobs:
        if job.span is not NULL_SPAN:  # (tracing off: no call a result)
            job.span.end(outcome)
        if job.chunk is None:
            done = offsets.get(job.partition)
            if done is None:
                offsets[job.partition] = [job.origin.offset]
            else:
                done.append(job.origin.offset)
        else:
            job.finish()
    for state, done in offsets.items():
        state.complete_all(done)


def _held_bytes(jobs: list[WorkItem], outputs: list[Output]) -> dict[PartitionOffsets, int]:
    """The outputs' bytes by the partition that tracks their inputs."""
    held: dict[PartitionOffsets, int] = {}
    for job, output in zip(jobs, outputs, strict=True):
        offsets = job.partition.offsets
        held[offsets] = held.get(offsets, 0) + len(output.value or b"")
    return held


def _rows_by_lane(
    hits: Sequence[Hit[WorkItem]], generations: GenerationIds
) -> list[tuple[Priority, list[_Row]]]:
    """Cache hits as result rows, by lane (high first; lanes without hits left out). A function
    of its own: no local of the caller's keeps the last vector alive while it waits."""
    rows: dict[Priority, list[_Row]] = {}
    for h in hits:
        generation = generations.id_of(h.key.model, h.key.dimensions)
        rows.setdefault(h.key.priority, []).append(
            (h.job, h.key.model, h.vector, h.dimensions, 0, True, generation)
        )
    return sorted(rows.items())


def _chunk_dead_letter(
    job: WorkItem, chunk: ChunkOf
) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """A chunk's dead letter: the chunk alone (not its whole document, which may be large and
    whose other chunks succeeded), keyed by doc_id, its coordinates in headers too."""
    run = chunk.document
    value = orjson.dumps({"doc_id": run.doc_id, "version": run.version, "chunk_seq": chunk.seq,
                          "span": [chunk.start, chunk.end], "text": job.text})  # fmt: skip
    return value, run.key, chunk_headers(run.doc_id, run.version, chunk.seq)
