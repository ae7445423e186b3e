"""The batch lane at its input: the processor's (or a backfill's) hooks that send records to
batch jobs instead of the sync path (`core/batch_routing.py` decides which).

- `load`: when a partition is assigned (before anything of it is read), its stream's jobs are
  read from the jobs topic (`records.py`);
- `claims`: a record just read: one already in a job is done at once (read again after a
  crash); a record of a stream batched whole joins its stream's job;
- `diverts`: a low request the sync path would not send within ``batch_after_s`` of its
  arrival (the adaptive rule, after the cache's look-up) joins a job;
- `flush`: after each fetch, the jobs changed are recorded, and only then are their records done;
- `let_go`: a partition revoked (or the processor stopping): its forming jobs close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from embedstream.core.batch_jobs import line_bytes
from embedstream.core.batch_routing import (
    PACE_MIN_SPAN_S,
    BatchRouting,
    PaceMeter,
    waits_too_long,
)
from embedstream.core.clock import Clock
from embedstream.core.lanes import InputLane, Priority
from embedstream.kafka.batchjobs.former import JobFormer
from embedstream.kafka.batchjobs.records import JobsReader
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.outputs.document_runs import DocumentStart
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire import Failure
from embedstream.wire.batch_jobs import JobStream
from embedstream.wire.document_events import DocumentTombstone

log = logging.getLogger(__name__)

TICK_S = 0.25  # how often forming jobs are looked at for their form time
# A job finished longer ago than this no longer holds its records when its partition is
# assigned: they are read again only by a rewind of the group (see StreamJobs.forget_finished).
FINISHED_HOLD_S = 3600.0


class RouteCounter(Protocol):
    """Counts what the routing decided (metrics): ``rule`` whole or adaptive, ``route`` batch
    or sync."""

    def count_routed(self, rule: str, route: str, count: int = 1) -> None: ...


class _Uncounted:
    def count_routed(self, rule: str, route: str, count: int = 1) -> None:
        pass


class BatchLane:
    def __init__(
        self,
        former: JobFormer,
        reader: JobsReader,
        routing: BatchRouting,
        clock: Clock,
        *,
        lane: InputLane = InputLane.LOW,
        generation: dict[str, object] | None = None,
        whole_backfill: bool = False,
        sync_waiting: Callable[[], int] = lambda: 0,
        counter: RouteCounter | None = None,
        warmup_items: int = 0,
    ) -> None:
        """``lane``: the input lane whose streams form jobs here (the processor's low topics,
        or a backfill's documents); ``generation``: a backfill's; ``sync_waiting``: the low
        items waiting for a sync call (the adaptive rule's queue); ``warmup_items``: what the
        sync path takes before its pace is known (a round of calls), the rest waits in Kafka
        until it is."""
        self.former = former
        self._reader = reader
        self.routing = routing
        self._clock = clock
        self._lane = lane
        self._generation = generation
        self._whole_backfill = whole_backfill
        self._sync_waiting = sync_waiting
        self._counter: RouteCounter = counter or _Uncounted()
        self._warmup_items = warmup_items
        self._let_through = 0  # low records admitted since the last flush, pace unknown
        self.pace = PaceMeter()

    # -- partitions ----------------------------------------------------------------------

    async def load(self, state: PartitionState) -> bool:
        """Read the partition's stream's jobs; False if they could not be (the caller gives
        the partition up, the group assigns it again)."""
        if state.input_lane is not self._lane:
            return True  # no jobs form from it
        generation_id = None if self._generation is None else str(self._generation["id"])
        try:
            jobs = await self._reader.stream_jobs(state.tp, self._lane.value, generation_id)
        except Exception as exc:
            log.warning("could not read the batch jobs of %s (%r)", state.tp, exc)
            return False
        jobs.forget_finished(self._clock.wall_ms() - int(FINISHED_HOLD_S * 1000))
        self.former.partitions = self._reader.partitions or self.former.partitions
        stream = JobStream(state.tp.topic, state.tp.partition, self._lane.value, self._generation)
        self.former.attach(state, stream, jobs)
        return True

    async def let_go(self, states: set[PartitionState] | None = None) -> None:
        """Close the forming jobs of these partitions (all: None) and record them."""
        self.former.let_go(states)
        await self.former.flush()

    def forget(self, state: PartitionState) -> None:
        self.former.forget(state)

    # -- records -------------------------------------------------------------------------

    def whole(self, state: PartitionState) -> bool:
        return self.routing.whole(
            state.tp.topic, state.input_lane, backfill_via_batch=self._whole_backfill
        )

    def claims(
        self,
        state: PartitionState,
        record: Record,
        verdict: WorkItem | DocumentStart | DocumentTombstone | Failure,
    ) -> bool:
        """The record is a batch job's (in one already, or joins one now): True, and the
        caller makes nothing of it."""
        if not self.former.attached(state):
            return False
        if self.former.holds(state, record.offset):
            state.complete(record.offset)
            return True
        if isinstance(verdict, Failure) or not self.whole(state):
            return False
        inputs, size, tokens, model = _measure(verdict)
        claimed = self.former.claim(state, record.offset, model, inputs=inputs, size=size,
                                    tokens=tokens, whole=True)  # fmt: skip
        if claimed:
            self._counter.count_routed("whole", "batch")
            if not isinstance(verdict, DocumentTombstone):
                verdict.span.end("batch")
        return claimed

    def warming(self, state: PartitionState) -> float | None:
        """How long to hold a low partition back (None: not at all): while the adaptive rule
        has no sync pace to judge by, the sync path takes a round of calls and the rest of the
        backlog stays in Kafka (rather than all of it going either way unjudged)."""
        if self.routing.after_s is None or state.input_lane is not InputLane.LOW:
            return None
        now = self._clock.monotonic()
        if self.pace.per_s(now) is not None:
            return None
        if self._sync_waiting() + self._let_through < self._warmup_items:
            self._let_through += 1
            return None
        return self.pace.known_in(now) or PACE_MIN_SPAN_S

    def diverts(self, item: WorkItem) -> bool:
        """The adaptive rule: True if the item joined a job (the caller drops it)."""
        if not self.routing.adaptive(item.priority, item.attempts, item.chunk is not None):
            return False
        state = item.partition
        if state.input_lane is not InputLane.LOW or not self.former.attached(state):
            return False
        after_s = self.routing.after_s or 0.0
        pace = self.pace.per_s(self._clock.monotonic())
        waited_s = max(0.0, (self._clock.wall_ms() - item.timestamp_ms) / 1000.0)
        if not waits_too_long(self._sync_waiting(), pace, after_s, waited_s):
            self._counter.count_routed("adaptive", "sync")
            return False
        size = line_bytes(len(item.text.encode()), item.model)
        claimed = self.former.claim(state, item.origin.offset, item.model, inputs=1, size=size,
                                    tokens=item.tokens, whole=False)  # fmt: skip
        if claimed:
            self._counter.count_routed("adaptive", "batch")
            item.span.end("batch")
        return claimed

    def sent(self, priority: Priority, items: int) -> None:
        """A sync call of the lane went out (the batcher's flush): the pace."""
        if priority is Priority.LOW:
            self.pace.sent(items, self._clock.monotonic())

    async def flush(self) -> None:
        self._let_through = 0  # submitted: the batcher counts them now
        await self.former.flush()

    async def run(self, stop: asyncio.Event) -> None:
        """Close jobs open for their form time, until ``stop``."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            try:
                if self.former.tick():
                    await self.former.flush()
            except Exception:
                log.exception("closing batch jobs failed; trying again")


def _measure(
    verdict: WorkItem | DocumentStart | DocumentTombstone,
) -> tuple[int, int, int, str | None]:
    """A record's lines in a job's file: inputs, bytes, tokens, and its model."""
    if isinstance(verdict, DocumentTombstone):
        return 0, 0, 0, None
    if isinstance(verdict, DocumentStart):
        admitted = verdict.admitted
        model = admitted.model
        size = sum(line_bytes(len(c.text.encode()), model) for c in admitted.chunks)
        return len(admitted.chunks), size, sum(c.tokens for c in admitted.chunks), model
    size = line_bytes(len(verdict.text.encode()), verdict.model)
    return 1, size, verdict.tokens, verdict.model
