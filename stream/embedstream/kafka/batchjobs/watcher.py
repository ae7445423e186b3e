"""The watcher of batch jobs: one per processor, a member of the jobs' own consumer group
(``<group_id>.batchjobs``), so each partition of the jobs topic has one watcher.

When it gets a partition it reads it from the beginning (compacted: the last record of each
job is the job) and, once it has read to its end, follows every job in it: submits the closed
ones, polls the submitted ones every ``batch_poll_s``, writes the outcomes of the ended ones
(a stream's in the order they were formed), keeps the finished ones a week (an input
partition's owner reads them to know which records are done), then deletes them. A restart,
a rebalance or a SIGKILL loses nothing: the next owner of the partition reads the same
records and goes on from the last one (exactly-once: after fencing the last owner's producer).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition

from embedstream.core.batch_jobs import JobState, may_submit, writable
from embedstream.core.clock import Clock
from embedstream.core.lanes import InputLane
from embedstream.errors import EmbedStreamError, InvalidEvent
from embedstream.kafka.batchjobs.steps import JobSteps
from embedstream.kafka.batchjobs.writer import JobCommits, JobPartition
from embedstream.kafka.client.clients import request_rejoin
from embedstream.kafka.client.protocols import Consumer, Record
from embedstream.kafka.consumption.member import consume
from embedstream.kafka.outputs.result_writer import Output
from embedstream.kafka.outputs.transactions import Fenced
from embedstream.kafka.outputs.work import Origin
from embedstream.wire.batch_jobs import JobRecord, decode_job

log = logging.getLogger(__name__)

LOOP_S = 0.2
RETRY_S = 5.0  # after a step failed (the provider or the broker out)
KEEP_FINISHED_S = 7 * 86_400.0
SUBMITTING = 2  # jobs whose files are written and submitted at once
WRITING = 1  # jobs whose outcomes are written at once (each holds a slice in memory)
ORPHAN_AFTER_S = 600.0  # a job left forming this long past its form time is closed here


class JobsGauges(Protocol):
    def set_jobs(self, by_state: Mapping[str, int], oldest_s: float) -> None: ...


class _Unmeasured:
    def set_jobs(self, by_state: Mapping[str, int], oldest_s: float) -> None:
        pass


@dataclass(eq=False, slots=True)
class Followed:
    job: JobRecord
    partition: int  # of the jobs topic
    task: asyncio.Task[JobRecord] | None = None
    next_at: float = 0.0  # monotonic
    failures: int = 0
    state: JobPartition | None = None  # while its outcomes are written


class JobWatcher:
    def __init__(
        self,
        consumer: Consumer,
        topic: str,
        steps: JobSteps,
        commits: JobCommits,
        clock: Clock,
        *,
        poll_s: float,
        form_s: float,
        enqueued_limit: int | None,
        gauges: JobsGauges | None = None,
        group: str = "",
        keeps: Callable[[str], bool] = lambda generation: True,
    ) -> None:
        """``keeps``: whether the store still keeps an index generation (a backfill's jobs of
        one it dropped, a migration cancelled, are abandoned)."""
        self._consumer = consumer
        self.topic = topic
        self._steps = steps
        self._commits = commits
        self._clock = clock
        self._poll_s = poll_s
        self._orphan_after_ms = int((form_s + ORPHAN_AFTER_S) * 1000)
        self._limit = enqueued_limit
        self._gauges: JobsGauges = gauges or _Unmeasured()
        self._group = group
        self.keeps = keeps
        self.jobs: dict[str, Followed] = {}
        self._reading: set[int] = set()  # partitions not yet read to their end
        self._stop = asyncio.Event()

    @property
    def partitions(self) -> set[int]:
        return {tp.partition for tp in self._consumer.assignment()}

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        await consume(self._consumer, [self.topic], self, self._loop)

    # -- rebalances ----------------------------------------------------------------------

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            try:
                await self._commits.fence(tp.partition)
            except Exception as exc:
                log.error("batch jobs partition %d: producer did not start (%r)", tp.partition,
                          exc)  # fmt: skip
                request_rejoin(self._consumer)
                continue
            self._consumer.seek(tp, 0)
            self._reading.add(tp.partition)
        log.info(
            "batch jobs: this watcher follows the jobs of partitions %s",
            sorted(tp.partition for tp in assigned),
        )

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        gone = {tp.partition for tp in revoked}
        await self._let_go(gone)

    async def _let_go(self, partitions: set[int]) -> None:
        tasks = []
        for job_id, followed in list(self.jobs.items()):
            if followed.partition in partitions:
                if followed.state is not None:
                    followed.state.live = False  # its outputs staged from now on are dropped
                if followed.task is not None:
                    followed.task.cancel()
                    tasks.append(followed.task)
                del self.jobs[job_id]
        await asyncio.gather(*tasks, return_exceptions=True)
        for partition in partitions:
            self._reading.discard(partition)
            await self._commits.release(partition)

    # -- the loop ------------------------------------------------------------------------

    async def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                got = await self._consumer.getmany(timeout_ms=int(LOOP_S * 1000))
                for records in got.values():
                    for record in records:
                        self._read(record)
                await self._caught_up()
                self._schedule()
                self._measure()
                if not got:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), LOOP_S / 2)
        finally:
            await self._let_go(self.partitions | {f.partition for f in self.jobs.values()})
            await self._commits.close()

    def _read(self, record: Record) -> None:
        if record.key is None:
            return
        job_id = record.key.decode("utf-8", "replace")
        followed = self.jobs.get(job_id)
        if followed is not None and followed.task is not None:
            return  # its step writes its next record: what is read meanwhile is older
        if record.value is None:
            self.jobs.pop(job_id, None)
            return
        try:
            job = decode_job(record.value)
        except InvalidEvent as exc:
            log.warning("skipping a malformed batch job record at %d@%d: %s", record.partition,
                        record.offset, exc)  # fmt: skip
            return
        if job.group != self._group:
            return
        if followed is not None and job.rev < followed.job.rev:
            return  # ours, written before the one it has (read back now)
        if followed is None:
            self.jobs[job_id] = Followed(job, record.partition)
        else:
            followed.job = job

    async def _caught_up(self) -> None:
        for partition in list(self._reading):
            tp = TopicPartition(self.topic, partition)
            end = self._consumer.highwater(tp)
            if end is not None and await self._consumer.position(tp) >= end:
                self._reading.discard(partition)
                mine = sum(1 for f in self.jobs.values() if f.partition == partition)
                log.info("batch jobs partition %d read: %d jobs", partition, mine)

    def _schedule(self) -> None:
        now = self._clock.monotonic()
        wall = self._clock.wall_ms()
        busy = {"submit": 0, "write": 0}
        for followed in self.jobs.values():
            kind = _kind(followed.job.state)
            if followed.task is not None and kind in busy:
                busy[kind] += 1
        for followed in list(self.jobs.values()):
            if followed.task is not None or followed.partition in self._reading:
                continue
            if followed.next_at > now:
                continue
            step = self._step_of(followed, wall, busy)
            if step is not None:
                kind = _kind(followed.job.state)
                if kind in busy:
                    busy[kind] += 1
                task = asyncio.create_task(step)
                followed.task = task
                task.add_done_callback(functools.partial(self._done, followed))

    def _step_of(
        self, followed: Followed, wall: int, busy: dict[str, int]
    ) -> Coroutine[Any, Any, JobRecord] | None:
        job, partition, steps = followed.job, followed.partition, self._steps
        generation = job.stream.generation_id
        live = job.state in (JobState.CLOSED, JobState.SUBMITTED, JobState.ENDED)
        if live and generation is not None and not self.keeps(generation):
            return steps.abandon(job, partition)
        if job.state == JobState.FORMING:
            if wall - job.opened_at_ms < self._orphan_after_ms:
                return None
            log.warning("batch job %s left forming; closing it", job.id)
            closed = job.but(state=JobState.CLOSED, closed_at_ms=wall)
            return steps.record(closed, partition)
        if job.state == JobState.CLOSED:
            if job.not_before_ms > wall or busy["submit"] >= SUBMITTING:
                return None
            if not may_submit(job.tokens, self._submitted_tokens(job.model), self._limit):
                return None
            return steps.submit(job, partition)
        if job.state == JobState.SUBMITTED:
            return steps.poll(job, partition)
        if job.state == JobState.ENDED:
            if busy["write"] >= WRITING or not self._writable(job):
                return None
            followed.state = JobPartition(
                TopicPartition(job.stream.topic, job.stream.partition),
                InputLane(job.stream.lane), job_id=job.id,
            )  # fmt: skip
            return steps.write(job, partition, followed.state)
        if job.state == JobState.FINISHED:
            if wall - (job.finished_at_ms or wall) < KEEP_FINISHED_S * 1000:
                return None
            return self._forget(job, partition)
        return None

    async def _forget(self, job: JobRecord, partition: int) -> JobRecord:
        """A job finished long ago: its record deleted (a tombstone)."""
        origin = Origin(job.stream.topic, job.stream.partition, -1)
        tombstone = Output(origin, self.topic, job.key, None, [], None, partition=partition)
        await self._commits.commit(partition, [tombstone])
        return job.but(state="deleted")

    def _submitted_tokens(self, model: str) -> int:
        return sum(f.job.tokens for f in self.jobs.values()
                   if f.job.state == JobState.SUBMITTED and f.job.model == model)  # fmt: skip

    def _writable(self, job: JobRecord) -> bool:
        if not job.whole:
            return True
        unfinished = frozenset(
            f.job.seq for f in self.jobs.values()
            if f.job.whole and f.job.stream == job.stream and f.job.state != JobState.FINISHED
        )  # fmt: skip
        return writable(job.seq, unfinished)

    def _done(self, followed: Followed, task: asyncio.Task[JobRecord]) -> None:
        followed.task = None
        followed.state = None
        if task.cancelled():
            return
        error = task.exception()
        now = self._clock.monotonic()
        if error is None:
            job = task.result()
            followed.failures = 0
            if job.state == "deleted":
                self.jobs.pop(job.id, None)
                return
            followed.job = job
            followed.next_at = now + (self._poll_s if job.state == JobState.SUBMITTED else 0.0)
            return
        followed.failures += 1
        delay = min(RETRY_S * 2 ** min(followed.failures - 1, 6), max(RETRY_S, self._poll_s))
        followed.next_at = now + delay
        if isinstance(error, Fenced):
            log.error("batch job %s: %s; letting its partition go", followed.job.id, error)
            request_rejoin(self._consumer)
        elif isinstance(error, EmbedStreamError):
            log.warning("batch job %s: %s (%s); trying again in %.0fs", followed.job.id,
                        error.reason, error, delay)  # fmt: skip
        else:
            log.error("batch job %s: step failed; trying again in %.0fs", followed.job.id,
                      delay, exc_info=error)  # fmt: skip

    def _measure(self) -> None:
        by_state: dict[str, int] = {}
        oldest_ms: int | None = None
        for followed in self.jobs.values():
            job = followed.job
            by_state[job.state] = by_state.get(job.state, 0) + 1
            if job.state == JobState.SUBMITTED and job.submitted_at_ms is not None:
                oldest_ms = min(oldest_ms or job.submitted_at_ms, job.submitted_at_ms)
        wall = self._clock.wall_ms()
        self._gauges.set_jobs(by_state, 0.0 if oldest_ms is None else (wall - oldest_ms) / 1000)


_KINDS = {JobState.CLOSED.value: "submit", JobState.ENDED.value: "write"}


def _kind(state: str) -> str:
    """What a job's next step is, for the limits on steps at once."""
    return _KINDS.get(state, "other")
