"""Retry records read before their not-before time, held in memory until due.

Held rather than blocking their partition, so one slow retry never delays the records behind
it; counted as held, so backpressure sees them. On a handoff they go back to the retry topic
unchanged, so their offsets (and everything after them) can be committed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import TopicPartition

from embedstream.core.clock import Clock
from embedstream.core.delayed import DelayQueue
from embedstream.engine.batcher import Batcher
from embedstream.kafka.outputs.result_writer import OutputUnwritable, ResultWriter
from embedstream.kafka.outputs.work import WorkItem

log = logging.getLogger(__name__)


class WaitingRetries:
    def __init__(self, batcher: Batcher[WorkItem], clock: Clock) -> None:
        self._batcher = batcher
        self._clock_ms = clock.wall_ms
        self._queue: DelayQueue[WorkItem] = DelayQueue()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def _submit(self, item: WorkItem) -> None:
        self._batcher.add(item.key, item.tokens, item, item.source)

    def hold_or_submit(self, item: WorkItem) -> None:
        if item.not_before_ms > self._clock_ms():
            self._queue.push(item.not_before_ms, item)
            self._wake.set()
        else:
            self._submit(item)

    def hold_or_submit_all(self, items: list[WorkItem]) -> None:
        """`hold_or_submit` for each of ``items`` (a fetch's), in order: those due go to the
        batcher a run of one bucket and source at a time."""
        due = self.hold_later(items)
        if not due:
            return
        add_all = self._batcher.add_all
        first = due[0]
        key, source = first.key, first.source
        run: list[tuple[int, WorkItem]] = []
        for item in due:
            item_key = item.key
            if item_key != key or item.source != source:
                add_all(key, source, run)
                key, source, run = item_key, item.source, []
            run.append((item.tokens, item))
        add_all(key, source, run)

    def hold_later(self, items: list[WorkItem]) -> list[WorkItem]:
        """Hold the items not yet due; return the others, in order, for the caller to submit."""
        now = self._clock_ms()
        due = []
        for item in items:
            if item.not_before_ms > now:
                self._queue.push(item.not_before_ms, item)
                self._wake.set()
            else:
                due.append(item)
        return due

    async def run(self) -> None:
        """Hands each item to the engine once its time has come (until cancelled)."""
        while True:
            self._wake.clear()
            now = self._clock_ms()
            for item in self._queue.pop_due(now):
                if item.current:
                    self._submit(item)
            due = self._queue.next_due_ms()
            timeout = (due - now) / 1000.0 if due is not None else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def forget_stale(self) -> None:
        """Drop items of partitions no longer assigned as they were read."""
        self._queue.keep_where(lambda item: item.current)

    async def hand_back(self, partitions: set[TopicPartition], result_writer: ResultWriter) -> None:
        """Write the items read from `partitions` back to the retry topic, and finish those
        written."""

        def read_from(item: WorkItem) -> bool:
            return item.partition.tp in partitions

        items = self._queue.take_where(read_from)
        # A document's chunk has no record of its own to requeue: it goes now, one attempt
        # early, so its document can end before the partition is let go.
        for chunk in [item for item in items if item.chunk is not None]:
            self._submit(chunk)
        items = [item for item in items if item.chunk is None]
        if not items:
            return
        written = await asyncio.gather(
            *(result_writer.retry(i, i.not_before_ms, i.first_error or "requeued") for i in items),
            return_exceptions=True,
        )
        # Those written are finished, so the revoke commits past them; a record the broker did
        # not take leaves its item unfinished (the next owner reads it again), and only it.
        for item, outcome in zip(items, written, strict=True):
            if outcome is None:
                item.finish()
        unwritten = [outcome for outcome in written if outcome is not None]
        for outcome in unwritten:
            if not isinstance(outcome, OutputUnwritable):
                raise outcome
        if unwritten:
            log.error("%d held retries not written back (%r); they stay unfinished",
                      len(unwritten), unwritten[0])  # fmt: skip
