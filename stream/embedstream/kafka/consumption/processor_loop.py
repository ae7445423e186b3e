"""The consumer loop: fetch, admit, hand to the engine, commit; then a bounded drain.

Every part arrives ready-made from the composition root (`embedstream.app.processor`); this
module only runs them. Offsets are committed per partition up to the lowest record whose
outcome (result, retry record or dead letter) is not yet written, so a crash re-reads
unfinished work and never skips it. Memory is bounded by pausing partitions, never by dropping
records. With an embedding cache, the records admitted from one fetch are looked up together:
hits are written as results at once, misses join the batcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from embedstream.core.clock import Clock
from embedstream.core.governor import Governor
from embedstream.core.lanes import BucketKey, Priority
from embedstream.core.offsets import PartitionOffsets
from embedstream.core.policy import BatchLimits
from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.engine.batcher import Batcher
from embedstream.engine.bounded import CANCEL_GRACE_S, Budget, bounded
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.calls import BatchCaller
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.kafka.client.protocols import Consumer, Producer
from embedstream.kafka.client.user_errors import topics_must_exist
from embedstream.kafka.consumption.admission import Admission
from embedstream.kafka.consumption.batch_hooks import BatchRoute
from embedstream.kafka.consumption.commits import OffsetCommitter
from embedstream.kafka.consumption.early_retries import WaitingRetries
from embedstream.kafka.consumption.fetcher import Fetcher
from embedstream.kafka.consumption.handoff import Handoff
from embedstream.kafka.consumption.member import consume
from embedstream.kafka.consumption.records_to_work import RecordsToWork
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.partitions import Assignment
from embedstream.kafka.outputs.transactions import PartitionTransactions
from embedstream.kafka.outputs.work import WorkItem
from embedstream.settings import Settings

log = logging.getLogger(__name__)

# After the drain deadline, held-back batches are abandoned; calls still running then get this
# long before they are cancelled (their items stay uncommitted and are read again).
ABANDON_GRACE_S = 2.0
# The last commit at shutdown (and a periodic one still running then) gets this long; what it
# does not commit is read again by the next owner.
FINAL_COMMIT_TIMEOUT_S = 5.0
# After the drain, the commits and every client's close (the service's too) share this long:
# aiokafka's close waits for a rebalance in progress, or to flush to a broker that is down. A
# step that takes longer is left behind, logged; each gets at least CLOSE_STEP_MIN_S whatever
# the others took. A stop ends within drain_timeout_s and about 15 s.
CLOSE_BUDGET_S = 10.0
CLOSE_STEP_MIN_S = 0.5


@dataclass(frozen=True, slots=True)
class Parts:
    """Everything the loop runs, built by `embedstream.app.processor.build_service`."""

    settings: Settings
    topics: list[str]  # every input topic: request lanes and the retry topic
    consumer: Consumer
    producer: Producer
    assignment: Assignment
    fetcher: Fetcher
    admission: Admission
    outcomes: KafkaOutcomes
    batcher: Batcher[WorkItem]
    caller: BatchCaller[WorkItem]
    governor: Governor
    waiting: WaitingRetries
    committer: OffsetCommitter
    handoff: Handoff
    transactions: PartitionTransactions | None
    cache: EmbeddingCache | None = None
    clock: Clock = SYSTEM_CLOCK
    tracer: Tracer = NULL_TRACER  # closed (its spans exported) when the service stops
    batch_lane: BatchRoute | None = None  # work that can wait: to batch jobs (kafka/batchjobs)


class Processor:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.batcher = parts.batcher
        self.limits: BatchLimits = parts.batcher.limits
        self._stopping = asyncio.Event()
        self._abort = asyncio.Event()  # a second stop: no more draining
        # What the closing steps share once drained (the service's own closes included).
        self.closing = Budget(CLOSE_BUDGET_S, CLOSE_STEP_MIN_S)
        # Set once the producer is connected: a broker probe through it means something.
        self.clients_started = asyncio.Event()
        self._records = RecordsToWork(
            parts.admission, parts.fetcher, parts.outcomes, parts.clock, parts.batch_lane
        )

    # -- what callers and the health loop read ------------------------------------------

    @property
    def assigned(self) -> asyncio.Event:
        return self.parts.handoff.assigned

    @property
    def joined(self) -> bool:
        return self.parts.handoff.joined

    @property
    def provider_ok(self) -> bool:
        return self.parts.governor.provider_usable

    @property
    def held(self) -> int:
        return self.parts.assignment.held

    @property
    def held_bytes(self) -> int:
        return self.parts.assignment.held_bytes

    def held_items(self) -> int:
        return self.held

    def partitions(self) -> dict[Any, PartitionOffsets]:
        return dict(self.parts.assignment.offsets())

    def lag_by_partition(self) -> dict[Any, int]:
        return {s.tp: s.lag for s in self.parts.assignment}

    def lane_by_partition(self) -> dict[Any, str]:
        """What each assigned partition's topic feeds: high, low or retry."""
        return {s.tp: s.input_lane.value for s in self.parts.assignment}

    def paused_count(self) -> int:
        return len(self.parts.assignment.paused())

    def buffered_in(self, priority: Priority) -> int:
        return self.batcher.buffered_in(priority)

    def delayed_count(self) -> int:
        return len(self.parts.waiting)

    def in_flight(self) -> int:
        return self.batcher.in_flight

    def concurrency_limit(self) -> int:
        return self.parts.governor.limit.limit

    def depth(self, lane: Priority) -> int:
        return self.batcher.depth(lane)

    async def refresh_lag(self) -> None:
        await self.parts.fetcher.refresh_lag()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def stopping(self) -> asyncio.Event:
        """Set by the first `stop()`."""
        return self._stopping

    def stop(self) -> None:
        """First call: stop fetching and drain (bounded). A second call: stop draining."""
        if self._stopping.is_set():
            self._abort.set()
        self._stopping.set()

    async def close_unstarted(self) -> None:
        """Close the clients of a processor stopped before `run` (they were built, never
        started): unclosed, aiokafka reports them at exit."""
        p = self.parts
        await p.consumer.stop()
        await p.producer.stop()

    async def run(self) -> None:
        """Consume until `stop()`, then drain, commit and close every client: within
        `drain_timeout_s` and CLOSE_BUDGET_S (a step that would take longer is left)."""
        p = self.parts
        await p.producer.start()
        try:
            await self._run_started()
        finally:
            await bounded(p.producer.stop(), self.closing.step_s(), "the producer's stop")

    async def _run_started(self) -> None:
        p = self.parts
        self.clients_started.set()
        try:
            await consume(
                p.consumer, p.topics, p.handoff, self._run_loops,
                stop_within_s=self.closing.step_s,
                starting=lambda: topics_must_exist(p.settings, p.topics),
            )  # fmt: skip
        finally:
            await bounded(p.handoff.close(), self.closing.step_s(), "fencing partitions in")
            if p.transactions is not None:
                stop = p.transactions.close()
                await bounded(stop, self.closing.step_s(), "the transactional producers' stop")
            if p.cache is not None:
                await bounded(p.cache.close(), self.closing.step_s(), "the cache's close")

    async def _run_loops(self) -> None:
        p = self.parts
        batcher_task = asyncio.create_task(p.batcher.run())
        waiting_task = asyncio.create_task(p.waiting.run())
        stop_commits = asyncio.Event()
        lane_task = (
            None if p.batch_lane is None else asyncio.create_task(p.batch_lane.run(stop_commits))
        )
        commit_task = asyncio.create_task(self._commit_periodically(stop_commits))
        try:
            await self._fetch_until_stopped()
        finally:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + p.settings.drain_timeout_s
            p.handoff.stopping(p.clock.monotonic() + p.settings.drain_timeout_s)
            waiting_task.cancel()
            await bounded(waiting_task, CANCEL_GRACE_S, "the held retries' end")
            # Part of the drain: a broker that takes no write holds the rest back no longer.
            hand_back = p.waiting.hand_back({s.tp for s in p.assignment}, p.outcomes.result_writer)
            await bounded(hand_back, p.settings.drain_timeout_s, "writing held retries back")
            await self._drain(batcher_task, deadline)
            if p.batch_lane is not None:  # its forming jobs close, recorded before the commit
                await bounded(p.batch_lane.let_go(), p.settings.drain_timeout_s, "closing jobs")
            p.handoff.drained()
            self.closing.start()
            stop_commits.set()  # let a commit in progress finish rather than cut it short
            commit_s = min(FINAL_COMMIT_TIMEOUT_S, self.closing.step_s())
            if not await _within(commit_task, commit_s, self._abort):
                commit_task.cancel()
                await bounded(commit_task, CANCEL_GRACE_S, "the periodic commit's end")
            commit_s = min(FINAL_COMMIT_TIMEOUT_S, self.closing.step_s())
            if not await bounded(self._commit_all(), commit_s, "the final commit"):
                log.warning("the next owner re-reads what the final commit did not commit")
            if lane_task is not None:
                await bounded(lane_task, CANCEL_GRACE_S, "the batch lane's end")

    async def _drain(self, batcher_task: asyncio.Task[None], deadline: float) -> None:
        """Finish what was handed to the engine and write its outcomes, by `deadline` (or
        until a second stop); what is still unfinished then is simply not committed (read
        again on restart)."""
        p = self.parts
        loop = asyncio.get_running_loop()
        p.batcher.drain()
        finished = await _within(batcher_task, max(0.0, deadline - loop.time()), self._abort)
        if finished:
            flush = asyncio.ensure_future(p.outcomes.flush())
            finished = await _within(flush, max(0.0, deadline - loop.time()), self._abort)
            flush.cancel()
        if not finished:
            log.warning("drain deadline passed: leaving unfinished work for the next run")
            p.caller.abandon_holds()
            if not await _within(batcher_task, ABANDON_GRACE_S, self._abort):
                p.batcher.abandon()
            p.outcomes.cancel_writes()
        await bounded(batcher_task, CANCEL_GRACE_S, "the engine's end")
        await bounded(p.outcomes.flush(), CANCEL_GRACE_S, "the outcome writes' end")

    async def _fetch_until_stopped(self) -> None:
        p = self.parts
        while not self._stopping.is_set():
            blocked = not p.governor.provider_usable or p.governor.blocked_for() > 0
            p.fetcher.apply_backpressure(provider_blocked=blocked)
            budget = p.fetcher.budget()
            if budget <= 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), 0.05)
                continue
            fetched = await p.fetcher.fetch(budget, self._stopping)
            if fetched is None:
                return
            admitted: list[WorkItem] = []
            for state, records in fetched:
                await self._records.admit(state, records, admitted)
                p.fetcher.update_lag(state, records[-1].offset + 1)
            p.admission.report_counts()
            await self.submit(admitted)
            if p.batch_lane is not None:  # jobs recorded, then their records are done
                await p.batch_lane.flush()

    async def submit(self, items: list[WorkItem]) -> None:
        """Hand one fetch's work to the engine (the backfill's too, `kafka/backfill/feed.py`): cache
        hits become results now (one look-up for
        the whole fetch), the rest joins the batcher (or waits, if a retry not yet due)."""
        p = self.parts
        lane = p.batch_lane
        if p.cache is None or not items:
            kept = items if lane is None else [item for item in items if not lane.diverts(item)]
            p.waiting.hold_or_submit_all(kept)
            return
        due = p.waiting.hold_later(items)
        hits, misses = await p.cache.look_up(due, _bucket_key)
        # A rebalance may have revoked partitions during the look-up: their work is not ours.
        p.waiting.hold_or_submit_all(
            [item for item in misses if item.current and (lane is None or not lane.diverts(item))]
        )
        # Written in the background (still held, so backpressure bounds them; the drain
        # waits for them with the other results).
        p.outcomes.answered([hit for hit in hits if hit.job.current])

    async def _commit_periodically(self, stop: asyncio.Event) -> None:
        interval_s = self.parts.settings.commit_interval_ms / 1000.0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
            try:
                await self._commit_all()
            except Exception:
                # Never the end of committing: the next round tries again.
                log.exception("commit failed; retrying in %.1fs", interval_s)

    async def _commit_all(self) -> None:
        p = self.parts
        for tp in await p.committer.commit(list(p.assignment.offsets())):
            await p.handoff.lost(tp)


def _bucket_key(item: WorkItem) -> BucketKey:
    return item.key


async def _within(task: asyncio.Future[Any], seconds: float, abort: asyncio.Event) -> bool:
    """Wait for `task` up to `seconds` or until `abort`; True if it finished."""
    aborted: asyncio.Future[Any] = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({task, aborted}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
    return task.done()
