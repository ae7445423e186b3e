"""A job's steps at the provider, each ending with the job's new record written:

- `submit` (closed): find the batch of this attempt by its metadata (a job submitted just
  before a crash, never paid twice), else write the job's file from its records, upload it,
  create the batch, and record its id before anything else;
- `poll` (submitted): ask its status; when the provider ended it, record how, and either
  submit it again later (refused for the model's enqueued tokens) or have its outcomes written;
- `write` (ended): download its output and error files and write every outcome
  (`replay.py`), a slice at a time, recorded as it goes; then finished.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiokafka import TopicPartition

from embedstream.core.backoff import Backoff
from embedstream.core.batch_jobs import JobState, Resubmit, ending
from embedstream.core.clock import Clock
from embedstream.core.lanes import InputLane
from embedstream.engine.batch_api import BatchApi, BatchInfo
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.jobs import Job
from embedstream.errors import EmbedStreamError
from embedstream.kafka.batchjobs.inputs import ReadRecords
from embedstream.kafka.batchjobs.job_file import LineBodies, Verdict, Wanted, write_job_file
from embedstream.kafka.batchjobs.job_outputs import JobOutputs
from embedstream.kafka.batchjobs.records import job_output, offsets_of
from embedstream.kafka.batchjobs.replay import JobReplay, ReplayParts
from embedstream.kafka.batchjobs.writer import JobCommits, JobPartition
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.consumption.admission import Admission, HeldBack
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import Origin
from embedstream.wire.batch_jobs import (
    BATCH_ATTEMPT_KEY,
    BATCH_GROUP_KEY,
    BATCH_METADATA_KEY,
    JobRecord,
    JobStream,
)

log = logging.getLogger(__name__)

SLICE = 1_000  # records read at a time to write a job's file
TERMINAL = frozenset({"completed", "expired", "failed", "cancelled"})
FIND_MARGIN_S = 300  # batches created this long before the job closed are looked at too


class JobObserver(Protocol):
    def count_ended(self, status: str) -> None: ...
    def count_lines(self, outcome: str, count: int) -> None: ...


@dataclass(frozen=True, slots=True)
class StepParts:
    api: BatchApi
    commits: JobCommits
    topic: str  # the jobs topic
    group: str
    read_records: ReadRecords
    admission_of: Callable[[JobStream], Admission]
    bodies: LineBodies
    cache: EmbeddingCache | None
    replay: ReplayParts
    clock: Clock
    refusal_backoff: Backoff
    observer: JobObserver


class JobSteps:
    def __init__(self, parts: StepParts) -> None:
        self._parts = parts
        self._rng = random.Random()

    async def record(self, job: JobRecord, partition: int) -> JobRecord:
        origin = Origin(job.stream.topic, job.stream.partition, -1)
        output = job_output(job, self._parts.topic, partition, origin, None)
        await self._parts.commits.commit(partition, [output])
        return job

    # -- submit --------------------------------------------------------------------------

    async def submit(self, job: JobRecord, partition: int) -> JobRecord:
        parts = self._parts
        attempt = job.attempt + 1
        metadata = {BATCH_METADATA_KEY: job.id, BATCH_GROUP_KEY: parts.group,
                    BATCH_ATTEMPT_KEY: str(attempt)}  # fmt: skip
        since_s = (job.closed_at_ms or job.opened_at_ms) // 1000 - FIND_MARGIN_S
        found = await parts.api.find(metadata, since_s)
        now = parts.clock.wall_ms()
        if found is not None:
            log.info("batch job %s: found its batch %s at the provider (submitted before a "
                     "restart); following it", job.id, found.id)  # fmt: skip
            return await self.record(
                job.but(
                    state=JobState.SUBMITTED,
                    attempt=attempt,
                    batch_id=found.id,
                    submitted_at_ms=now,
                ),
                partition,
            )
        outputs = JobOutputs()
        try:
            path = outputs.new_file(f"{job.id}-{attempt}.jsonl")
            with path.open("wb") as out:
                facts = await write_job_file(
                    parts.read_records(job.stream, offsets_of(job), SLICE),
                    self._admit_for(job.stream), parts.bodies, self._cached, out,
                )  # fmt: skip
            if facts.lines == 0:  # everything cached or gone: no batch to pay for
                log.info("batch job %s: nothing to ask the provider (%d inputs cached)", job.id,
                         facts.cached)  # fmt: skip
                return await self.record(
                    job.but(
                        state=JobState.ENDED, attempt=attempt, status="completed", ended_at_ms=now
                    ),
                    partition,
                )
            with path.open("rb") as upload:
                file_id = await parts.api.upload(upload, path.name)
        finally:
            outputs.close()
        info = await parts.api.create(file_id, metadata)
        # Its id is recorded before anything else (a crash from here on finds it by metadata).
        submitted = job.but(state=JobState.SUBMITTED, attempt=attempt, file_id=file_id,
                            batch_id=info.id, submitted_at_ms=parts.clock.wall_ms(),
                            status=None, output_file_id=None, error_file_id=None,
                            error_codes=())  # fmt: skip
        await self.record(submitted, partition)
        log.info("batch job %s: submitted as %s (%d lines, %d records, %d cached)", job.id,
                 info.id, facts.lines, facts.records, facts.cached)  # fmt: skip
        return submitted

    def _admit_for(self, stream: JobStream) -> Callable[[Record], Awaitable[Verdict]]:
        admission = self._parts.admission_of(stream)
        state = PartitionState(
            TopicPartition(stream.topic, stream.partition), InputLane(stream.lane)
        )

        async def admit(record: Record) -> Verdict:
            while True:
                now = self._parts.clock.wall_ms()
                if not admission.framed:
                    return admission.admit(record, state, now)
                verdict = await admission.admit_framed(record, state, now)
                if not isinstance(verdict, HeldBack):
                    return verdict

        return admit

    async def _cached(self, wanted: Sequence[Wanted]) -> set[str]:
        """The custom ids of inputs the embedding cache answers (not asked of the provider)."""
        cache = self._parts.cache
        if cache is None:
            return set()
        keys = {w.custom_id: w.key for w in wanted}
        probes = [Job(id=w.custom_id, text=w.text, tokens=w.tokens) for w in wanted]
        hits, _ = await cache.look_up(probes, lambda probe: keys[probe.id])
        return {hit.job.id for hit in hits}

    # -- poll ----------------------------------------------------------------------------

    async def poll(self, job: JobRecord, partition: int) -> JobRecord:
        assert job.batch_id is not None
        info = await self._parts.api.retrieve(job.batch_id)
        if info.status not in TERMINAL:
            return job
        return await self.ended(job, info, partition)

    async def ended(self, job: JobRecord, info: BatchInfo, partition: int) -> JobRecord:
        parts = self._parts
        now = parts.clock.wall_ms()
        codes = frozenset(info.error_codes)
        refusals = job.refusals + (1 if "token_limit_exceeded" in codes else 0)
        decided = ending(info.status, codes, refusals, parts.refusal_backoff, self._rng)
        if isinstance(decided, Resubmit):
            parts.observer.count_ended("refused")
            log.warning(
                "batch job %s refused: %s; submitted again in %.0fs",
                job.id,
                info.error_message or "enqueued token limit",
                decided.after_s,
            )
            return await self.record(job.but(
                state=JobState.CLOSED, refusals=refusals, batch_id=None, file_id=None,
                not_before_ms=now + int(decided.after_s * 1000), error_codes=tuple(codes),
            ), partition)  # fmt: skip
        parts.observer.count_ended(info.status)
        if info.status != "completed":
            log.warning(
                "batch job %s ended %s (%s); its unanswered inputs go through the sync path",
                job.id,
                info.status,
                info.error_message or "no error given",
            )
        return await self.record(job.but(
            state=JobState.ENDED, status=info.status, output_file_id=info.output_file_id,
            error_file_id=info.error_file_id, error_codes=tuple(codes), ended_at_ms=now,
            refusals=refusals,
        ), partition)  # fmt: skip

    # -- abandon -------------------------------------------------------------------------

    async def abandon(self, job: JobRecord, partition: int) -> JobRecord:
        """A job whose index generation the store no longer keeps (a migration cancelled):
        cancelled at the provider if it is there, its outcomes never written (the store would
        refuse them), finished."""
        if job.state == JobState.SUBMITTED and job.batch_id is not None:
            try:
                await self._parts.api.cancel(job.batch_id)
            except EmbedStreamError as exc:  # ended meanwhile, or the provider is out
                log.info("batch job %s: cancelling %s: %s", job.id, job.batch_id, exc)
        self._parts.observer.count_ended("abandoned")
        log.info("batch job %s abandoned: generation %s is no longer kept by the store",
                 job.id, job.stream.generation_id)  # fmt: skip
        last = offsets_of(job).last
        return await self.record(job.but(
            state=JobState.FINISHED, status="abandoned", finished_at_ms=self._parts.clock.wall_ms(),
            written=None if last is None else last + 1,
        ), partition)  # fmt: skip

    # -- write ---------------------------------------------------------------------------

    async def write(self, job: JobRecord, partition: int, state: JobPartition) -> JobRecord:
        parts = self._parts
        outputs = JobOutputs()
        try:
            for file_id in (job.output_file_id, job.error_file_id):
                if file_id is not None:
                    path = outputs.new_file(f"{file_id}.jsonl")
                    await parts.api.download(file_id, path)
                    outputs.index(path)
            replay = JobReplay(parts.replay, job, parts.admission_of(job.stream), outputs, state)
            progress = [job]

            async def commit(offset: int) -> None:
                noted = progress[-1].but(written=offset)
                staged, state.staged = state.staged, []
                origin = Origin(job.stream.topic, job.stream.partition, -1)
                record = job_output(noted, parts.topic, partition, origin, None)
                await parts.commits.commit(partition, [*staged, record])
                progress.append(noted)

            await replay.run(commit)
        finally:
            outputs.close()
        last = offsets_of(job).last
        finished = progress[-1].but(state=JobState.FINISHED, finished_at_ms=parts.clock.wall_ms(),
                                    written=None if last is None else last + 1)  # fmt: skip
        await self.record(finished, partition)
        for file_id in (job.file_id, job.output_file_id, job.error_file_id):
            if file_id is not None:
                await parts.api.delete_file(file_id)
        return finished
