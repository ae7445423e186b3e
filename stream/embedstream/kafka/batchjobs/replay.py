"""An ended job's outcomes, written exactly as the sync path writes them.

The job's records are read again a slice at a time and admitted as when they were first read
(a request, a document version cut into its chunks, a delete); each input is answered by its
line of the job's output (`job_file.py`: the first of equal inputs asks for all):

- answered 200: its result, through the processor's outcomes (same key, headers and format;
  a document's chunks into its version and final record), its tokens billed at the batch
  price; the vectors fill the embedding cache;
- answered with an error: classified as the sync path classifies a call's answer, then retried
  (a request through the retry topic, a chunk in memory) or dead-lettered, by its attempts;
- not answered (an expired, cancelled or failed job): sent again through the lane's sync path
  (the cache first).

A slice is recorded as written (`commit`) once each of its records has its outcome: at most a
slice is written again after a crash (at-least-once), none (exactly-once, `writer.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from embedstream.core.backoff import Backoff
from embedstream.core.clock import Clock
from embedstream.core.lanes import BucketKey
from embedstream.engine.answers import classify_status, outcome_of
from embedstream.engine.backend import BatchCall
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.jobs import Embedded
from embedstream.errors import EmbedStreamError
from embedstream.kafka.batchjobs.inputs import ReadRecords
from embedstream.kafka.batchjobs.job_file import custom_id_of, line_key
from embedstream.kafka.batchjobs.job_outputs import JobOutputs, LineAnswer
from embedstream.kafka.batchjobs.records import offsets_of
from embedstream.kafka.batchjobs.writer import JobPartition
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.consumption.admission import Admission, HeldBack
from embedstream.kafka.outputs.document_runs import DocumentFlow, DocumentRun, DocumentStart
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire import Failure, Vector
from embedstream.wire.batch_jobs import JobRecord
from embedstream.wire.document_events import DocumentTombstone

log = logging.getLogger(__name__)

SLICE = 500  # records of a job whose outcomes are written, then recorded, together
REGISTRY_WAIT_S = 1.0  # a record held back (the schema registry out): asked again after this


class LineObserver(Protocol):
    def count_lines(self, outcome: str, count: int) -> None: ...
    def count_retry(self, reason: str) -> None: ...
    def count_dead_letter(self, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplayParts:
    """The processor's parts a job's outcomes are written with."""

    outcomes: KafkaOutcomes
    documents_of: Callable[[Callable[[WorkItem], None]], DocumentFlow]  # a flow of the job's
    submit_sync: Callable[[list[WorkItem]], Awaitable[None]]  # the cache, then the batcher
    cache: EmbeddingCache | None
    read_records: ReadRecords
    clock: Clock
    max_attempts: int
    backoff: Backoff
    observer: LineObserver


class JobReplay:
    def __init__(
        self,
        parts: ReplayParts,
        job: JobRecord,
        admission: Admission,
        outputs: JobOutputs,
        state: JobPartition,
    ) -> None:
        self._parts = parts
        self._job = job
        self._admission = admission
        self._outputs = outputs
        self.state = state
        self._flow = parts.documents_of(self._begun_late)
        self._firsts: dict[str, str] = {}  # line key -> the custom id that asked for it
        self._billed: set[str] = set()  # lines whose tokens are counted
        self._rng = random.Random()
        self._late: set[asyncio.Task[None]] = set()
        self._progress = asyncio.Event()
        state.on_progress = self._progress.set
        self.read = 0

    async def run(self, commit: Callable[[int], Awaitable[None]]) -> None:
        """Write every outcome not written yet (below ``job.written`` they are), calling
        ``commit(offset)`` once everything below ``offset`` has its outcome."""
        job, parts = self._job, self._parts
        written = job.written or 0
        offsets = offsets_of(job)
        async for records in parts.read_records(job.stream, offsets, SLICE):
            items = []
            for record in records:
                self.read += 1
                verdict = await self._admit(record)
                if record.offset < written:
                    self._remember(verdict, record.offset)  # the same firsts as the file's
                    continue
                items += self._start(record, verdict)
            if records[-1].offset < written:
                continue
            await self._answer(items)
            await self._until_written(records[-1].offset + 1)
            await commit(records[-1].offset + 1)
        missing = len(offsets) - self.read
        parts.observer.count_lines("missing", missing)
        if missing:
            log.warning("batch job %s: %d of its records are gone from %s-%d (compacted or "
                        "past retention); nothing to write for them", job.id, missing,
                        job.stream.topic, job.stream.partition)  # fmt: skip

    async def _admit(
        self, record: Record
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure:
        admission, now = self._admission, self._parts.clock.wall_ms()
        while admission.framed:
            verdict = await admission.admit_framed(record, self.state, now)
            if not isinstance(verdict, HeldBack):
                break
            await asyncio.sleep(verdict.retry_after_s or REGISTRY_WAIT_S)
        else:
            verdict = admission.admit(record, self.state, now)
        if isinstance(verdict, WorkItem):
            verdict.source = record.topic
        elif isinstance(verdict, DocumentStart):
            generation = self._job.stream.generation_id
            verdict = dataclasses.replace(verdict, source=record.topic,
                                          index_generation=generation)  # fmt: skip
        return verdict

    def _remember(
        self, verdict: WorkItem | DocumentStart | DocumentTombstone | Failure, offset: int
    ) -> None:
        if isinstance(verdict, WorkItem):
            self._firsts.setdefault(line_key(verdict.key, verdict.text), custom_id_of(offset))
        elif isinstance(verdict, DocumentStart):
            for item in self._flow_items_of(verdict):
                self._first_of(item)

    def _flow_items_of(self, start: DocumentStart) -> list[WorkItem]:
        """A version's chunks as its run would make them (the run is not started)."""
        return DocumentRun(self._flow, start, self.state).work_items()

    def _start(
        self, record: Record, verdict: WorkItem | DocumentStart | DocumentTombstone | Failure
    ) -> list[WorkItem]:
        state = self.state
        state.offsets.track(record.offset, record.timestamp, 0)
        if isinstance(verdict, Failure):
            self._late_task(self._parts.outcomes.refused(record, state, verdict))
            return []
        if isinstance(verdict, DocumentTombstone):
            self._flow.delete(verdict, record, state, generation=self._job.stream.generation_id)
            return []
        if isinstance(verdict, DocumentStart):
            return self._flow.start(verdict, state)
        return [verdict]

    def _first_of(self, item: WorkItem) -> str:
        seq = None if item.chunk is None else item.chunk.seq
        own = custom_id_of(item.origin.offset, seq)
        return self._firsts.setdefault(line_key(item.key, item.text), own)

    async def _answer(self, items: list[WorkItem]) -> None:
        observer = self._parts.observer
        answered: dict[tuple[BucketKey, int], list[Embedded[WorkItem]]] = {}
        unanswered: list[WorkItem] = []
        failed = 0
        for item in items:
            custom_id = self._first_of(item)
            line = self._outputs.get(custom_id)
            if line is None or not line.answered:
                unanswered.append(item)
                continue
            try:
                vector, dimensions, tokens = self._vector(item, line)
            except EmbedStreamError as error:
                failed += 1
                await self._failed(item, error)
                continue
            billed = 0 if custom_id in self._billed else tokens
            self._billed.add(custom_id)
            answered.setdefault((item.key, dimensions), []).append(Embedded(item, vector, billed))
        observer.count_lines("answered", sum(len(done) for done in answered.values()))
        observer.count_lines("failed", failed)
        observer.count_lines("unanswered", len(unanswered))
        for (key, dimensions), done in answered.items():
            await self._parts.outcomes.batch_answered(key, done, dimensions)
            if self._parts.cache is not None:
                texts = [e.job.text for e in done]
                await self._parts.cache.store(key, texts, [e.vector for e in done])
        if unanswered:
            await self._parts.submit_sync(unanswered)

    def _vector(self, item: WorkItem, line: LineAnswer) -> tuple[Vector, int, int]:
        """The item's vector from its line (in the format the item asked), its dimensions
        and the tokens the line reports; EmbedStreamError for an error or unreadable line."""
        key = item.key
        call = BatchCall.for_bucket(key, [item.text])
        assert line.status is not None
        if line.status >= 400:
            message = _error_message(line.status, line.body)
            raise classify_status(line.status, message, {}, call)
        outcome = outcome_of(call, line.body)
        usage = line.body.get("usage") if isinstance(line.body, dict) else None
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
        return outcome.vectors[0], outcome.dimensions, tokens if isinstance(tokens, int) else 0

    async def _failed(self, item: WorkItem, error: EmbedStreamError) -> None:
        """An input its line answered with an error: as a sync call's failed input."""
        parts = self._parts
        item.attempts += 1
        if not error.retriable or item.attempts >= parts.max_attempts:
            parts.observer.count_dead_letter(error.reason)
            await parts.outcomes.dead_letter(item, error)
            return
        now = parts.clock.wall_ms()
        item.first_failure_ms = item.first_failure_ms or now
        item.first_error = item.first_error or f"{error.reason}: {error.message}"
        parts.observer.count_retry(error.reason)
        delay = parts.backoff.delay(item.attempts, self._rng, error.retry_after)
        await parts.outcomes.retry_later(item, error, delay)

    def _begun_late(self, item: WorkItem) -> None:
        """A chunk of a version that waited behind another of its document: answered now."""
        self._late_task(self._answer([item]))

    def _late_task(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.create_task(run())
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def _until_written(self, offset: int) -> None:
        """Until everything below ``offset`` has its outcome."""
        while True:
            safe = self.state.offsets.safe_offset()
            if safe is None or safe >= offset:
                return
            self._progress.clear()
            await self._progress.wait()


def _error_message(status: int, body: object) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    text = error.get("message") if isinstance(error, dict) else None
    said = f"Error code: {status}"
    return f"{said} - {text}"[:1024] if isinstance(text, str) and text else said
