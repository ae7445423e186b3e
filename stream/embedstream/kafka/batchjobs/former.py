"""Jobs forming on the processor's side: records routed to batch jobs join the forming job of
their stream (and model), and are done once the job's record names them.

A record claimed for a job is held like any other until `flush` has written (at-least-once) or
staged in its partition's transaction (exactly-once) the job's record with its offset; only
then is its offset done, so the job is recorded before the record's offset is committed (in
the same transaction under exactly-once). A job closes when the next record would break a
limit of the provider's, ``batch_form_s`` after it opened (`tick`), when its partition is let
go, and, for a stream batched whole, when a record names another model (a stream's jobs
keep its order). Nothing of a record is kept in memory but its offset.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from embedstream.core.batch_jobs import FormingJob, JobLimits, JobState
from embedstream.core.clock import Clock
from embedstream.kafka.batchjobs.records import StreamJobs, job_output
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import OutputUnwritable, ResultWriter, Writer
from embedstream.kafka.outputs.work import Origin
from embedstream.wire.batch_jobs import JobRecord, JobStream, job_id, jobs_partition

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Forming:
    """A job of a stream being formed, and the offsets claimed since it was last written."""

    job: FormingJob
    model: str
    seq: int
    whole: bool
    opened_at_ms: int
    closing: bool = False
    claimed: list[int] = field(default_factory=list)
    written: int = 0  # records the last written version of it holds
    revisions: int = 0  # of its record written


@dataclass(eq=False, slots=True)
class Stream:
    """What the former knows of one input stream (a partition under this assignment)."""

    stream: JobStream
    jobs: StreamJobs
    next_seq: int
    forming: list[Forming] = field(default_factory=list)
    orphans: list[JobRecord] = field(default_factory=list)  # left forming by the last owner


class JobFormer:
    def __init__(
        self,
        result_writer: ResultWriter,
        topic: str,
        group: str,
        limits: JobLimits,
        clock: Clock,
        direct: Writer | None = None,
    ) -> None:
        """``direct``: writes a job the last owner left forming, closed (at once, outside any
        transaction: the partition may read nothing more to commit it with)."""
        self._result_writer = result_writer
        self._direct = direct
        self.topic = topic
        self._group = group
        self.limits = limits
        self._clock = clock
        self._streams: dict[PartitionState, Stream] = {}
        self.partitions = 1  # of the jobs topic (set by the loader)
        self.claimed_total = 0  # records claimed for jobs so far (metrics, tests)
        self._flushing = asyncio.Lock()  # the fetch loop's and the form-time tick's

    def attach(self, state: PartitionState, stream: JobStream, jobs: StreamJobs) -> None:
        """A partition assigned here: its stream's jobs as the jobs topic holds them."""
        found = Stream(stream, jobs, jobs.next_seq)
        found.orphans = jobs.forming()
        self._streams[state] = found

    def attached(self, state: PartitionState) -> bool:
        return state in self._streams

    def holds(self, state: PartitionState, offset: int) -> bool:
        stream = self._streams.get(state)
        return stream is not None and stream.jobs.holds(offset)

    def claim(
        self,
        state: PartitionState,
        offset: int,
        model: str | None,
        *,
        inputs: int,
        size: int,
        tokens: int,
        whole: bool,
    ) -> bool:
        """Put the record at ``offset`` into its stream's forming job; False if it cannot be
        in any job (bigger than a job may be: its lane's sync path takes it). ``model`` None
        (a delete): the whole stream's current job, whatever its model."""
        stream = self._streams.get(state)
        if stream is None or not self.limits.fits_alone(inputs, size, tokens):
            return False
        forming = self._forming_for(stream, model, whole)
        if forming is not None and not forming.job.fits(inputs, size, tokens):
            forming.closing = True
            forming = None
        if forming is None:
            forming = self._open(stream, model or self._any_model(stream), whole)
        forming.job.add(offset, inputs, size, tokens)
        forming.claimed.append(offset)
        if forming.job.full:
            forming.closing = True
        self.claimed_total += 1
        return True

    def _forming_for(self, stream: Stream, model: str | None, whole: bool) -> Forming | None:
        if not whole:
            return next((f for f in stream.forming
                         if not f.whole and not f.closing and f.model == model), None)  # fmt: skip
        current = next((f for f in stream.forming if f.whole and not f.closing), None)
        if current is not None and model is not None and current.model != model:
            current.closing = True  # the stream's order: this job ends before the next begins
            return None
        return current

    @staticmethod
    def _any_model(stream: Stream) -> str:
        return stream.forming[-1].model if stream.forming else ""

    def _open(self, stream: Stream, model: str, whole: bool) -> Forming:
        forming = Forming(FormingJob(self.limits, self._clock.monotonic()), model,
                          stream.next_seq, whole, self._clock.wall_ms())  # fmt: skip
        stream.next_seq += 1
        stream.forming.append(forming)  # after any closing one: written in this order
        return forming

    def tick(self) -> bool:
        """Close the jobs open for ``form_s``; True if some are to be written."""
        now = self._clock.monotonic()
        due = False
        for stream in self._streams.values():
            for forming in stream.forming:
                if not forming.closing and forming.job.due(now):
                    forming.closing = True
                    due = True
        return due

    def let_go(self, states: set[PartitionState] | None = None) -> None:
        """Close the forming jobs of these partitions (all: None), written by the next flush."""
        for state, stream in self._streams.items():
            if states is None or state in states:
                for forming in stream.forming:
                    forming.closing = True

    def forget(self, state: PartitionState) -> None:
        self._streams.pop(state, None)

    async def flush(self) -> None:
        """Write every job changed since the last flush, then finish the records each names."""
        async with self._flushing:
            for state, stream in list(self._streams.items()):
                await self._flush_stream(state, stream)

    async def _flush_stream(self, state: PartitionState, stream: Stream) -> None:
        orphans, stream.orphans = stream.orphans, []
        for record in orphans:
            closed = record.but(state=JobState.CLOSED, closed_at_ms=self._clock.wall_ms())
            if not await self._write(state, closed, -1, direct=True):
                stream.orphans.append(record)
        for forming in list(stream.forming):
            # What this write covers: records claimed meanwhile wait for the next one.
            claimed, closing = list(forming.claimed), forming.closing
            changed = claimed or (closing and forming.written)
            if changed and await self._write_forming(state, stream.stream, forming, closing):
                for offset in claimed:
                    state.complete(offset)
                forming.written += len(claimed)
                del forming.claimed[: len(claimed)]
                if closing:
                    stream.forming.remove(forming)

    async def _write_forming(
        self, state: PartitionState, stream: JobStream, f: Forming, closed: bool
    ) -> bool:
        offsets = f.job.offsets
        assert offsets.first is not None and offsets.last is not None
        record = JobRecord(
            id=job_id(self._group, stream, f.model, offsets.first), group=self._group,
            stream=stream, seq=f.seq, whole=f.whole, model=f.model,
            state=JobState.CLOSED if closed else JobState.FORMING,
            offsets_first=offsets.first, offsets_bits=offsets.bits, inputs=f.job.inputs,
            size=f.job.bytes, tokens=f.job.tokens, opened_at_ms=f.opened_at_ms,
            closed_at_ms=self._clock.wall_ms() if closed else None, rev=f.revisions,
        )  # fmt: skip
        written = await self._write(state, record, offsets.last)
        f.revisions += written
        return written

    async def _write(
        self, state: PartitionState, record: JobRecord, origin_offset: int, direct: bool = False
    ) -> bool:
        tp = state.tp
        origin = Origin(tp.topic, tp.partition, origin_offset)
        partition = jobs_partition(record.stream.partition, self.partitions)
        output = job_output(record, self.topic, partition, origin, state)
        try:
            if direct and self._direct is not None:
                await self._direct.write(output)
            else:
                await self._result_writer.write_outputs([output])
        except OutputUnwritable as exc:
            log.error("batch job %s not recorded (%s); its records stay unfinished", record.id,
                      exc)  # fmt: skip
            return False
        return True
