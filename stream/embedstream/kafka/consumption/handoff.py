"""Rebalances: take partitions on, and hand them off cleanly.

On revoke the member finishes what it read from the revoked partitions (buffered items are sent
now, retries not yet due go back to the retry topic), commits, then lets go, so the next owner
repeats nothing. Work still unfinished after `drain_timeout_s` is abandoned: at-least-once, the
next owner re-reads it from the last commit.

In exactly-once mode a newly assigned partition is fenced in the background: the listener
returns at once, because aiokafka sends no heartbeats while `on_partitions_assigned` runs, and
starting a producer per partition one after another there cost members their session (and
the group a rebalance storm). The partition stays paused, nothing of it admitted, until its
producer has fenced the previous owner and the committed offset read after that is its floor.
With a chunk changelog, a partition is likewise held (either delivery) until its documents'
chunk counts are read from the state topic: after the fence, so the previous owner's last
transaction is in them; with batch jobs, until its stream's jobs are read from the jobs topic
(`kafka/batchjobs/lane.py`), and a revoke closes its forming jobs before its last commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import TopicPartition

from embedstream.core.chunk_ids import ChunkCounts
from embedstream.core.clock import Clock
from embedstream.core.lanes import InputLane
from embedstream.engine.batcher import Batcher
from embedstream.engine.bounded import bounded
from embedstream.kafka.client.clients import request_rejoin
from embedstream.kafka.client.protocols import Consumer
from embedstream.kafka.consumption.batch_hooks import PartitionJobs
from embedstream.kafka.consumption.commits import OffsetCommitter
from embedstream.kafka.consumption.early_retries import WaitingRetries
from embedstream.kafka.outputs.changelog_writer import ChunkCountsLoader
from embedstream.kafka.outputs.partitions import Assignment
from embedstream.kafka.outputs.result_writer import ResultWriter
from embedstream.kafka.outputs.transactions import PartitionTransactions
from embedstream.kafka.outputs.work import WorkItem

log = logging.getLogger(__name__)

# Reading a partition's committed offset after fencing it in (aiokafka retries it for ever).
FLOOR_TIMEOUT_S = 30.0


class Handoff:
    def __init__(
        self,
        assignment: Assignment,
        batcher: Batcher[WorkItem],
        waiting: WaitingRetries,
        result_writer: ResultWriter,
        committer: OffsetCommitter,
        transactions: PartitionTransactions | None,
        *,
        drain_timeout_s: float,
        consumer: Consumer,
        clock: Clock,
        chunk_counts: ChunkCountsLoader | None = None,
        batch_jobs: PartitionJobs | None = None,
    ) -> None:
        self._monotonic = clock.monotonic
        self._assignment = assignment
        self._batcher = batcher
        self._waiting = waiting
        self._result_writer = result_writer
        self._committer = committer
        self._transactions = transactions
        self._drain_timeout_s = drain_timeout_s
        self._consumer = consumer
        self._chunk_counts = chunk_counts
        self._batch_jobs = batch_jobs
        # Partitions held until their fence is up and/or their chunk counts are loaded.
        self._fencing: dict[TopicPartition, asyncio.Task[None]] = {}
        self.assigned = asyncio.Event()  # set at the first assignment
        self.joined = False
        self._stopping = False
        self._stop_by: float | None = None  # (monotonic) the shutdown's drain deadline

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.joined = True
        # Track first, with no await between: the fetch loop may hand over records of these
        # partitions as soon as they are assigned, and an untracked record would be skipped.
        for tp in assigned:
            state = self._assignment.add(tp)
            if self._transactions is not None:
                self._transactions.open(tp, state)
            if (
                self._transactions is not None
                or self._chunk_counts is not None
                or self._batch_jobs is not None
            ):
                state.floor = None  # known once the fence is up (in the background)
                if not self._stopping:  # (stopping: never read, so no producer to fence with)
                    self._fencing[tp] = asyncio.create_task(self._fence_in(tp))
        if assigned:
            self.assigned.set()
        log.info("partitions assigned: %s", sorted(str(tp) for tp in assigned))

    async def _fence_in(self, tp: TopicPartition) -> None:
        try:
            # The fence first: the previous owner's open transaction ends before anything of
            # it (its committed offset, its chunk counts) is read.
            if self._transactions is not None and not await self._transactions.assign(tp):
                if tp in self._assignment:  # did not start: give it up, the group reassigns it
                    await self.lost(tp)
                return
            if self._chunk_counts is not None and not await self._load_chunk_counts(tp):
                return
            if self._batch_jobs is not None and not await self._load_batch_jobs(tp):
                return
            if self._transactions is not None:
                await self._read_floor(tp)
            elif (state := self._assignment.get(tp)) is not None:
                state.floor = 0  # at-least-once: read from the committed offset, as ever
        finally:
            if self._fencing.get(tp) is asyncio.current_task():
                del self._fencing[tp]

    async def _load_chunk_counts(self, tp: TopicPartition) -> bool:
        """The partition's documents' chunk counts, from the state topic; False (the partition
        given up, the group reassigns it) if they could not be read."""
        assert self._chunk_counts is not None
        state = self._assignment.get(tp)
        if state is not None and state.input_lane is InputLane.RETRY:
            state.chunk_counts = ChunkCounts()  # no document comes through the retry topic
            return True
        try:
            counts = await self._chunk_counts.load(tp)
        except Exception as exc:
            log.warning("could not read the chunk counts of %s (%r)", tp, exc)
            await self.lost(tp)
            return False
        state = self._assignment.get(tp)
        if state is None:
            return False
        state.chunk_counts = counts
        return True

    async def _load_batch_jobs(self, tp: TopicPartition) -> bool:
        """The partition's stream's batch jobs; False (the partition given up) if unread."""
        assert self._batch_jobs is not None
        state = self._assignment.get(tp)
        if state is None:
            return False
        if not await self._batch_jobs.load(state):
            await self.lost(tp)
            return False
        return True

    async def _read_floor(self, tp: TopicPartition) -> None:
        """The committed offset, read after the fence: final, since the previous owner can
        commit nothing more (aiokafka has no KIP-447 generation fencing to rely on)."""
        state = self._assignment.get(tp)
        if state is None:
            return
        try:
            committed = await asyncio.wait_for(self._consumer.committed(tp), FLOOR_TIMEOUT_S)
        except Exception as exc:
            # Without it the partition must not be read: give it up, the group reassigns it.
            log.warning("could not read the committed offset of %s (%r)", tp, exc)
            await self.lost(tp)
            return
        state.floor = committed or 0

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._stop_fencing(revoked)
        for tp in revoked:
            state = self._assignment.get(tp)
            if state is not None:
                state.handing_off = True
        try:
            own_deadline = self._monotonic() + self._drain_timeout_s

            def deadline() -> float:  # no later than the shutdown's drain (which may come now)
                return own_deadline if self._stop_by is None else min(own_deadline, self._stop_by)

            hand_back = self._waiting.hand_back(revoked, self._result_writer)
            await bounded(hand_back, deadline() - self._monotonic(), "writing held retries back")
            self._batcher.hurry()
            while self._assignment.pending_in(revoked) and self._monotonic() < deadline():
                self._assignment.progress.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._assignment.progress.wait(), deadline() - self._monotonic()
                    )
            if self._batch_jobs is not None:  # recorded before the last commit
                states = {s for tp in revoked if (s := self._assignment.get(tp)) is not None}
                await bounded(self._batch_jobs.let_go(states), deadline() - self._monotonic(),
                              "closing the revoked partitions' batch jobs")  # fmt: skip
            unfinished = self._assignment.pending_in(revoked)
            if unfinished:
                log.warning("revoke: %d items unfinished after %.0fs; the next owner redoes them",
                            unfinished, self._drain_timeout_s)  # fmt: skip
            for tp in await self._committer.commit(revoked):
                await self.lost(tp)
        finally:
            for tp in revoked:
                await self.forget(tp)
        log.info("partitions revoked: %s", sorted(str(tp) for tp in revoked))

    async def lost(self, tp: TopicPartition) -> None:
        """Another member's producer fenced ours (or ours failed for good): drop the work. If
        the consumer still holds the partition, ask for a rebalance; reading it untracked would
        stall it, and a new assignment gives it a new producer."""
        state = self._assignment.get(tp)
        await self.forget(tp)
        if state is not None and not state.handing_off and tp in self._consumer.assignment():
            log.warning("requesting a rebalance: %s is still assigned here", tp)
            request_rejoin(self._consumer)

    async def forget(self, tp: TopicPartition) -> None:
        """Stop tracking a partition: work read from it is dropped, its completions ignored."""
        await self._stop_fencing({tp})
        state = self._assignment.remove(tp)
        if state is not None and self._batch_jobs is not None:
            self._batch_jobs.forget(state)
        self._batcher.drop_where(_revoked)
        self._waiting.forget_stale()
        if self._transactions is not None:
            await self._transactions.release(tp)

    def stopping(self, drain_by: float) -> None:
        """Shutdown has begun, to be drained by `drain_by` (monotonic): partitions assigned
        from now on are not fenced in (a producer started then was cut off by close() and
        left a connection unclosed), nor read; a revoke from now on (the consumer's close
        waits for one in progress) waits no longer for its work than the shutdown's drain."""
        self._stopping = True
        self._stop_by = drain_by
        self._assignment.progress.set()  # a revoke waiting for its work: by drain_by at most

    def drained(self) -> None:
        """The shutdown's drain is over: what is unfinished now never will be, so a revoke
        from now on (another member of the group leaving: a high processor beside, with
        input_lanes) commits and lets go at once."""
        self._stopping = True
        self._stop_by = self._monotonic()
        self._assignment.progress.set()  # a revoke waiting for its work: wait no longer

    async def close(self) -> None:
        """At shutdown: stop taking partitions on."""
        self._stopping = True
        await self._stop_fencing(set(self._fencing))

    async def _stop_fencing(self, tps: set[TopicPartition]) -> None:
        current = asyncio.current_task()
        stopped = []
        for tp in tps:
            task = self._fencing.get(tp)
            if task is not None and task is not current:
                del self._fencing[tp]
                task.cancel()
                stopped.append(task)
        if stopped:  # together: each may stop a producer, a few seconds when a broker is out
            await asyncio.gather(*stopped, return_exceptions=True)


def _revoked(job: WorkItem) -> bool:
    """A buffered item of a partition no longer assigned (an online caller's never is)."""
    return isinstance(job, WorkItem) and not job.current
