"""A fetch's records made work: each tracked once (a record below the exactly-once floor, or
delivered again, is skipped), admitted, held back while the batch lane warms up or the schema
registry is out (the partition reads it again after the hold), claimed by a batch job, or
turned into work items (a request, a document's chunks) or a dead letter now."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from embedstream.core.clock import Clock
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.consumption.admission import Admission, HeldBack
from embedstream.kafka.consumption.batch_hooks import BatchRoute
from embedstream.kafka.consumption.fetcher import Fetcher
from embedstream.kafka.outputs.document_runs import DocumentStart
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire import Failure
from embedstream.wire.document_events import DocumentTombstone

log = logging.getLogger(__name__)


class RecordsToWork:
    def __init__(
        self,
        admission: Admission,
        fetcher: Fetcher,
        outcomes: KafkaOutcomes,
        clock: Clock,
        batch_lane: BatchRoute | None,
    ) -> None:
        self._admission = admission
        self._fetcher = fetcher
        self._outcomes = outcomes
        self._clock = clock
        self._batch_lane = batch_lane

    async def admit(
        self, state: PartitionState, records: Sequence[Record], admitted: list[WorkItem]
    ) -> None:
        """A partition's fetched records, the work they make now added to ``admitted``."""
        if not self._admission.framed:
            await self._admit_all(state, records, admitted)
            return
        for record in records:
            made = await self._admit_framed(state, record)
            if made is None:
                break  # held back from this record on: read again after the hold
            admitted += made

    async def _admit_all(
        self, state: PartitionState, records: Sequence[Record], admitted: list[WorkItem]
    ) -> None:
        """Track a partition's JSON records, adding the work they make now to ``admitted``
        (the hot path: a request is admitted with no await)."""
        offsets = state.offsets
        admit, observe, track = self._admission.admit, self._fetcher.observe, offsets.track
        now_ms = self._clock.wall_ms()
        lane = self._batch_lane
        for record in records:
            offset, floor, seen_below = record.offset, state.floor, offsets.next_untracked
            if (floor is not None and offset < floor) or (
                seen_below is not None and offset < seen_below
            ):  # (what _fresh looks at, without its calls for a record that is new)
                self._fresh(state, record)  # not ours, or delivered again (that is logged)
                continue
            if lane is not None and self._warming(lane, state, offset):
                return  # held back from this record on: read again after the hold
            verdict = admit(record, state, now_ms)
            observe(record)  # (what _track does, without a call of its own a record)
            track(record.offset, record.timestamp, len(record.value or b""))
            if lane is not None and lane.claims(state, record, verdict):
                continue  # a batch job's (kafka/batchjobs/lane.py)
            if isinstance(verdict, WorkItem):
                admitted.append(verdict)
            else:
                admitted += await self._made(state, record, verdict)
                now_ms = self._clock.wall_ms()  # that may have waited for the broker

    async def _admit_framed(self, state: PartitionState, record: Record) -> list[WorkItem] | None:
        """Track one registry-framed record; the work it makes now. None: held back, not
        tracked (the schema registry is out; the partition reads it again after a hold)."""
        if not self._fresh(state, record):
            return []
        lane = self._batch_lane
        if lane is not None and self._warming(lane, state, record.offset):
            return None
        verdict = await self._admission.admit_framed(record, state, self._clock.wall_ms())
        if isinstance(verdict, HeldBack):
            self._fetcher.hold_back(state, record.offset, verdict.retry_after_s)
            return None
        self._track(state, record)
        if lane is not None and lane.claims(state, record, verdict):
            return []  # a batch job's (kafka/batchjobs/lane.py)
        return await self._made(state, record, verdict)

    def _warming(self, lane: BatchRoute, state: PartitionState, offset: int) -> bool:
        """Whether the batch lane holds the partition back from ``offset`` on: read again once
        the adaptive rule has a pace (kafka/batchjobs)."""
        hold_s = lane.warming(state)
        if hold_s is None:
            return False
        self._fetcher.wait_at(state, offset, hold_s)
        return True

    def _fresh(self, state: PartitionState, record: Record) -> bool:
        """Whether the record is ours to admit now."""
        if state.floor is not None and record.offset < state.floor:
            return False  # committed by the previous owner (exactly-once): not ours to redo
        if state.offsets.seen(record.offset):
            # Delivered again under the same assignment (the consumer's position went back,
            # e.g. to the committed offset in a rebalance): it is already in hand, once. This
            # crashed the processor ("tracked out of order") in a churn test under load.
            log.info("skipped %s-%d@%d, delivered again", record.topic, record.partition,
                     record.offset)  # fmt: skip
            return False
        return True

    def _track(self, state: PartitionState, record: Record) -> None:
        self._fetcher.observe(record)
        state.offsets.track(record.offset, record.timestamp, len(record.value or b""))

    async def _made(
        self,
        state: PartitionState,
        record: Record,
        verdict: WorkItem | DocumentStart | DocumentTombstone | Failure,
    ) -> list[WorkItem]:
        """The work a tracked record makes now (a request, a document's chunks, nothing);
        dead-letter it now if it can never become work."""
        if isinstance(verdict, Failure):
            await self._outcomes.refused(record, state, verdict)
            return []
        if isinstance(verdict, DocumentStart):
            return self._outcomes.documents.start(verdict, state)
        if isinstance(verdict, DocumentTombstone):
            self._outcomes.documents.delete(verdict, record, state)
            return []
        return [verdict]
