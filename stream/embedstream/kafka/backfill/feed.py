"""The backfill lane's feed: a migration's new index generation filled from the documents
topic, by the running processor, in its lowest lane.

While the store has a generation being filled (`embedstream migrate start`), each processor
runs one :class:`BackfillFeed` for it: a consumer of its own, in a group of its own per
generation (``<group_id>.backfill.<generation>``), reads the documents topic from its beginning
(a new migration starts over; a restart resumes from the group's commit). Every document
version it reads is cut and embedded as that generation's processor would, its chunks work
items of the :attr:`Priority.BACKFILL` lane on the processor's own engine: the same batcher,
call path, cache and outcomes as the live lanes, the same budget, of which the backfill takes
what the others leave (`core/reservations.py`). Its outputs carry ``embedstream.backfill``:
the store never lets them overwrite what the live stream wrote to that generation meanwhile.

Before it embeds anything, it reads the topic once to its end (`kafka/backfill/read_ahead.py`), and
then passes over every version a later record of its document replaces: it pays for each
document's latest version only, as the topic compacted would hold it. Before it embeds the
document versions of a poll, it asks the store once which of them the
generation already holds complete at that version, or the live stream wrote
(`core/backfill_skips.py`): those are not embedded, their offsets done at once. So a restarted
backfill pays nothing again for what it embedded before its last commit, whatever the cache.
A store that cannot answer in time (`kafka/backfill/holdings.py`) holds nothing: everything is
embedded,
as without the question.

Offsets commit as for the live lanes: a document's once its final record is written. Memory:
the backfill holds at most a quarter of ``buffered_items_limit`` and never more than the live
lanes leave of it; it fetches only when it has room.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from embedstream.core.backfill_skips import ReadVersion, SentDocuments, SkipReason, sent, skips
from embedstream.core.clock import Clock
from embedstream.core.generations import IndexGeneration
from embedstream.core.lanes import InputLane
from embedstream.core.latest_records import LatestRecords
from embedstream.engine.batcher import Batcher
from embedstream.kafka.backfill.holdings import StoreAnswers, StoreHoldings
from embedstream.kafka.batchjobs.lane import BatchLane
from embedstream.kafka.client.protocols import Consumer, Record
from embedstream.kafka.consumption.admission import Admission, HeldBack
from embedstream.kafka.consumption.commits import OffsetCommitter
from embedstream.kafka.consumption.early_retries import WaitingRetries
from embedstream.kafka.consumption.handoff import Handoff
from embedstream.kafka.consumption.member import consume
from embedstream.kafka.outputs.document_runs import DocumentFlow, DocumentStart
from embedstream.kafka.outputs.partitions import Assignment, PartitionState
from embedstream.kafka.outputs.result_writer import Output, ResultWriter, Writer
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire.document_events import DocumentTombstone

log = logging.getLogger(__name__)
T = TypeVar("T")

FETCH_TIMEOUT_MS = 100
IDLE_WAIT_S = 0.1  # no room (or the provider out): look again this often
HELD_SHARE = 4  # the backfill holds at most buffered_items_limit / HELD_SHARE chunks
HOLD_BACK_S = 1.0  # the schema registry out: read the record again after this
SENT_KEPT = 200_000  # doc_ids remembered per pass (core/backfill_skips.SentDocuments)


def backfill_group(group_id: str, generation_id: str) -> str:
    """The consumer group of a generation's backfill: a new migration reads from the start."""
    return f"{group_id}.backfill.{generation_id}"


@dataclass(frozen=True, slots=True)
class SharedEngine:
    """The processor's parts the backfill rides on."""

    batcher: Batcher[WorkItem]
    waiting: WaitingRetries
    result_writer: ResultWriter
    documents: DocumentFlow
    submit: Callable[[list[WorkItem]], Awaitable[None]]  # cache look-up, then the batcher
    live_held: Callable[[], int]  # what the live lanes hold (backpressure's count)
    provider_usable: Callable[[], bool]
    clock: Clock
    items_limit: int  # buffered_items_limit
    max_poll: int
    drain_timeout_s: float
    commit_interval_s: float


@dataclass(frozen=True, slots=True)
class _Read:
    """A record read and tracked; its verdict: a document's version or delete, or None (a
    record the backfill has nothing to do with)."""

    state: PartitionState
    record: Record
    verdict: DocumentStart | DocumentTombstone | None


class BackfillFeed:
    """The documents topic into one generation's backfill; ``run`` until stopped."""

    def __init__(
        self,
        generation: IndexGeneration,
        consumer: Consumer,
        topic: str,
        admission: Admission,
        engine: SharedEngine,
        *,
        holdings: StoreHoldings | None = None,
        count_skipped: Callable[[SkipReason], None] = lambda _reason: None,
        read_ahead: Callable[[], Awaitable[LatestRecords]] | None = None,
        batch: BatchLane | None = None,
    ) -> None:
        """``holdings``: the store's answers (None: nothing is ever held); ``count_skipped``:
        a document version not embedded, by why; ``read_ahead``: each key's newest record
        in the topic (None: no version is known to be superseded); ``batch``: every version
        (and delete) goes into batch jobs (a migration started ``--via batch``)."""
        self._batch = batch
        self.generation = generation
        self.topic = topic
        self._consumer = consumer
        self._admission = admission
        self._engine = engine
        self.assignment = Assignment(lambda _topic: InputLane.BACKFILL)
        self.committer = OffsetCommitter(consumer, self.assignment.offsets(), None)
        self.handoff = Handoff(
            self.assignment, engine.batcher, engine.waiting, engine.result_writer, self.committer,
            None,
            drain_timeout_s=engine.drain_timeout_s, consumer=consumer, clock=engine.clock,
            batch_jobs=batch,
        )  # fmt: skip
        self._stop = asyncio.Event()
        self.read = 0  # records read (the progress metrics' rate)
        self._chunks_per_record = 8.0  # a running estimate: how many records fill the room
        self._holdings = StoreAnswers(holdings, generation.id)
        self._count_skipped = count_skipped
        # doc_ids embedded or deleted since it started, up to SENT_KEPT
        self._written = SentDocuments(SENT_KEPT)
        self._read_ahead = read_ahead
        self._latest = LatestRecords(0)  # nothing known until the read-ahead

    @property
    def lag(self) -> int:
        """Records of the documents topic not read yet (its assigned partitions)."""
        return self.assignment.lag()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Read the topic ahead, then read, admit and submit until `stop()`; then finish what
        was read (within drain_timeout_s), commit it and leave the group."""
        if self._read_ahead is not None:
            latest = await _unless_stopped(self._read_ahead(), self._stop)
            if latest is None:
                await self._consumer.stop()  # built, never started: closed all the same
                await self._holdings.close()
                return
            self._latest = latest
        await consume(self._consumer, [self.topic], self.handoff, self._consume)

    async def _consume(self) -> None:
        try:
            via = " through batch jobs" if self._batch is not None else ""
            log.info("backfill of generation %s from %s started%s", self.generation.id,
                     self.topic, via)  # fmt: skip
            commits = asyncio.create_task(self._commit_periodically())
            closing = None if self._batch is None else asyncio.create_task(
                self._batch.run(self._stop)
            )  # fmt: skip
            try:
                await self._feed()
            finally:
                await self.handoff.on_revoked({s.tp for s in self.assignment})
                commits.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await commits
                if closing is not None:
                    await closing
        finally:
            await self.handoff.close()
            await self._holdings.close()

    def _room(self) -> int:
        """Chunks the backfill may still take on: its share, within what the live lanes left."""
        e = self._engine
        ceiling = min(e.items_limit // HELD_SHARE, e.items_limit - e.live_held())
        return ceiling - self.assignment.held

    async def _feed(self) -> None:
        e = self._engine
        while not self._stop.is_set():
            room = self._room()
            if room <= 0 or not e.provider_usable():
                await self._idle()
                continue
            records = max(1, min(e.max_poll, int(room / self._chunks_per_record)))
            fetch = self._consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=records)
            try:
                got = await _unless_stopped(fetch, self._stop)
            except KafkaError as exc:
                log.warning("backfill fetch failed (%r); trying again", exc)
                await self._idle()
                continue
            if got is None:
                return
            reads: list[_Read] = []
            for tp, batch in got.items():
                reads += await self._read_all(tp, batch)
            await e.submit(await self._start(reads))
            if self._batch is not None:  # jobs recorded, then their versions are done
                await self._batch.flush()

    async def _idle(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), IDLE_WAIT_S)

    async def _read_all(self, tp: TopicPartition, records: Sequence[Record]) -> list[_Read]:
        if not records:
            return []
        state = self.assignment.get(tp)
        if state is None or state.floor is None or state.handing_off:
            unready = state is None or state.floor is None  # (its batch jobs being read)
            if unready and tp in self._consumer.assignment():
                self._consumer.seek(tp, records[0].offset)  # not tracked yet: read again
                await self._idle()
            return []
        reads: list[_Read] = []
        for record in records:
            read = await self._admit(state, record)
            if read is None:  # held back: this record and the rest are read again
                self._consumer.seek(tp, record.offset)
                await self._idle()
                break
            self.read += 1
            reads.append(read)
        else:
            highwater = self._consumer.highwater(tp)
            if highwater is not None:
                state.lag = max(0, highwater - (records[-1].offset + 1))
        return reads

    async def _admit(self, state: PartitionState, record: Record) -> _Read | None:
        """The record admitted and tracked; None: held back (the schema registry is out)."""
        admission, now = self._admission, self._engine.clock.wall_ms()
        if admission.framed:
            verdict = await admission.admit_framed(record, state, now)
            if isinstance(verdict, HeldBack):
                return None
        else:
            verdict = admission.admit(record, state, now)
        state.offsets.track(record.offset, record.timestamp, len(record.value or b""))
        if isinstance(verdict, DocumentStart | DocumentTombstone):
            return _Read(state, record, verdict)
        return _Read(state, record, None)  # a plain request, a record the live lanes dead-letter

    async def _start(self, reads: Sequence[_Read]) -> list[WorkItem]:
        """The chunks of a poll's reads, in read order, but for the versions the generation
        already holds: those, and records not the backfill's, are done at once."""
        versions = [self._version(r) for r in reads if r.verdict is not None]
        asked = [v.doc_id for v in versions if v.version is not None and not v.superseded]
        decided = skips(versions, await self._holdings.held(asked), self._written)
        if self._written.add_all(sent(versions, decided)):
            log.info("backfill of %s: over %d documents sent; versions the generation holds "
                     "are embedded again for the rest of this pass", self.generation.id,
                     SENT_KEPT)  # fmt: skip
        reasons = iter(decided)
        documents, items = self._engine.documents, []
        for read in reads:
            state, record, verdict = read.state, read.record, read.verdict
            skipped = None if verdict is None else next(reasons)
            if not state.live:
                continue  # revoked meanwhile: its next owner reads it again
            if verdict is None or skipped is not None:
                if skipped is not None:
                    self._count_skipped(skipped)
                state.complete(record.offset)
            elif self._batch is not None and self._batch.claims(state, record, verdict):
                continue  # a batch job's (kafka/batchjobs/lane.py)
            elif isinstance(verdict, DocumentTombstone):
                documents.delete(verdict, record, state, generation=self.generation.id)
            else:
                start = dataclasses.replace(verdict, index_generation=self.generation.id)
                items += documents.start(start, state)
                chunks = len(verdict.admitted.chunks)
                self._chunks_per_record += (chunks - self._chunks_per_record) / 16
        return items

    def _version(self, read: _Read) -> ReadVersion:
        """What the skip rule needs of a read document event (`core/backfill_skips.py`)."""
        verdict, record = read.verdict, read.record
        if isinstance(verdict, DocumentTombstone):
            return ReadVersion(verdict.doc_id, None)
        assert verdict is not None
        superseded = self._latest.superseded(record.partition, record.offset, record.key)
        return ReadVersion(verdict.admitted.event.doc_id, verdict.admitted.version, superseded)

    async def _commit_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._engine.commit_interval_s)
            try:
                for tp in await self.committer.commit(list(self.assignment.offsets())):
                    await self.handoff.lost(tp)
            except Exception:
                log.exception("backfill commit failed; retrying")


class Backfills:
    """The feed of the generation being filled, if any: started, and stopped when the store
    changes (cut over, cancelled), or when the processor stops."""

    def __init__(self, make_feed: Callable[[IndexGeneration, bool], BackfillFeed]) -> None:
        self._make_feed = make_feed
        self.feed: BackfillFeed | None = None
        self._via_batch = False
        self._task: asyncio.Task[None] | None = None

    @property
    def lag(self) -> int:
        return 0 if self.feed is None else self.feed.lag

    @property
    def read(self) -> int:
        return 0 if self.feed is None else self.feed.read

    async def follow(self, generation: IndexGeneration | None, via_batch: bool = False) -> None:
        current = None if self.feed is None else self.feed.generation
        if generation == current and via_batch == self._via_batch:
            return
        await self.close()
        self._via_batch = via_batch
        if generation is not None:
            self.feed = self._make_feed(generation, via_batch)
            self._task = asyncio.create_task(self.feed.run())
            self._task.add_done_callback(_log_end)

    async def close(self) -> None:
        if self.feed is not None and self._task is not None:
            log.info("backfill of generation %s stopping", self.feed.generation.id)
            self.feed.stop()
            with contextlib.suppress(Exception):
                await self._task
        self.feed, self._task = None, None


class BackfillDirect:
    """Exactly-once: the backfill's outputs are written at once (at-least-once), the live
    lanes' staged in their partitions' transactions. The store's writes are idempotent, and
    a backfill partition has no transaction of its own."""

    def __init__(self, staged: Writer, direct: Writer) -> None:
        self._staged = staged
        self._direct = direct

    @staticmethod
    def _backfill(output: Output) -> bool:
        owner = output.owner
        return isinstance(owner, PartitionState) and owner.input_lane is InputLane.BACKFILL

    async def write(self, output: Output) -> None:
        await (self._direct if self._backfill(output) else self._staged).write(output)

    async def write_many(self, outputs: Sequence[Output]) -> None:
        direct = [o for o in outputs if self._backfill(o)]
        staged = [o for o in outputs if not self._backfill(o)]
        if direct:
            await self._direct.write_many(direct)
        if staged:
            await self._staged.write_many(staged)


async def _unless_stopped(fetch: Awaitable[T], stop: asyncio.Event) -> T | None:
    task = asyncio.ensure_future(fetch)
    stopped = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if task not in done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, KafkaError):
            await task
        return None
    return task.result()


def _log_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the backfill stopped on an error (%r)", task.exception())
