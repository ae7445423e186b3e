"""The batch jobs topic: a job's record as an output, and the jobs of one input stream read back.

When an input partition is assigned, its owner reads partition ``p mod N`` of the jobs topic to
its end (after the exactly-once fence, so the previous owner's last transaction is in it):
which of the partition's records are in jobs already (read again after a crash that came
between a job's record and the commit of its offsets: they are the job's, never sent twice),
the next job's sequence number, and the jobs the previous owner left forming (closed now).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from embedstream.core.batch_jobs import JobOffsets, JobState
from embedstream.errors import InvalidEvent
from embedstream.kafka.outputs.changelog_writer import StateReader
from embedstream.kafka.outputs.result_writer import Output
from embedstream.kafka.outputs.work import Origin
from embedstream.wire.batch_jobs import JobRecord, decode_job, jobs_partition

log = logging.getLogger(__name__)


def offsets_of(job: JobRecord) -> JobOffsets:
    return JobOffsets(job.offsets_first, job.offsets_bits)


def job_output(
    job: JobRecord, topic: str, partition: int, origin: Origin, owner: object | None
) -> Output:
    """The job's record, to ``partition`` of the jobs topic (its input partition's: where its
    first record went, and every later one of it goes)."""
    return Output(origin, topic, job.key, job.encode(), [], owner, partition=partition)


@dataclass(slots=True)
class StreamJobs:
    """One input stream's jobs, as the jobs topic holds them."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    _offsets: dict[str, JobOffsets] = field(default_factory=dict)

    def add(self, job: JobRecord) -> None:
        self.jobs[job.id] = job
        self._offsets[job.id] = offsets_of(job)

    def forget_finished(self, before_ms: int) -> None:
        """Jobs finished before ``before_ms`` hold their records no more: read again then, it
        is because the group was rewound on purpose, not a crash between a job's record and
        its offsets' commit (a job of those cannot be finished so long before its records'
        partition is assigned again)."""
        for job_id, job in list(self.jobs.items()):
            if job.state == JobState.FINISHED and (job.finished_at_ms or 0) < before_ms:
                del self._offsets[job_id]

    def holds(self, offset: int) -> bool:
        """The record at ``offset`` is in a job already."""
        return any(
            offsets.first is not None and offsets.first <= offset and offset in offsets
            for offsets in self._offsets.values()
        )

    @property
    def next_seq(self) -> int:
        return max((job.seq for job in self.jobs.values()), default=-1) + 1

    def forming(self) -> list[JobRecord]:
        return [job for job in self.jobs.values() if job.state == JobState.FORMING]


class JobsReader:
    """Reads the jobs of input streams from the jobs topic."""

    def __init__(self, read: StateReader, topic: str, group: str) -> None:
        self._read = read
        self.topic = topic
        self._group = group
        self.partitions: int | None = None  # the jobs topic's, known at the first read

    async def stream_jobs(
        self, tp: TopicPartition, lane: str, generation_id: str | None = None
    ) -> StreamJobs:
        def pick(found: list[TopicPartition]) -> list[TopicPartition]:
            self.partitions = len(found)
            return [found[jobs_partition(tp.partition, len(found))]]

        latest: dict[bytes, JobRecord | None] = {}
        async for record in self._read(self.topic, pick):
            if record.key is None:
                continue
            if record.value is None:
                latest[record.key] = None
                continue
            try:
                job = decode_job(record.value)
            except InvalidEvent as exc:
                log.warning("skipping a malformed batch job record at %s-%d@%d: %s",
                            record.topic, record.partition, record.offset, exc)  # fmt: skip
                continue
            stream = job.stream
            mine = (stream.topic, stream.partition, stream.lane) == (tp.topic, tp.partition, lane)
            if mine and job.group == self._group and stream.generation_id == generation_id:
                latest[record.key] = job
        found = StreamJobs()
        for kept in latest.values():
            if kept is not None:
                found.add(kept)
        return found
