"""Documents through the engine: chunks out as work items, then one final record per version.

A document version runs as a :class:`DocumentRun`: each chunk is a work item on the same engine
as plain requests (batched, retried, cached), and when every chunk has its outcome (result
written, or dead-lettered for good) the run writes its final record (``complete``, or
``incomplete`` naming the missing chunks), and only then is the document's input offset done.
Within one input partition the versions and tombstones of a doc_id run one at a time, in
arrival order (``core.documents.DocumentOrder``), so a newer version's outputs never interleave
with an older one's and a delete never overtakes the version it deletes.

A failed chunk is retried in memory after its backoff, never through the retry topic: the
document's offset must stay uncommitted until the chunk ends, and its siblings are never sent
again.

While the store keeps two index generations (a migration, `core/migration.py`), a version is
one run per generation, each cut and embedded as that generation's processor would, all in the
version's lane; a delete is a tombstone per generation. The input offset is done once every
run's final record is written. The backfill lane's runs (`kafka/backfill/feed.py`) are of the
generation being filled only, and their outputs say so (``BACKFILL_HEADER``): the store lets
the live stream's win.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from embedstream.core.chunker import Chunk
from embedstream.core.document_versions import DocumentOrder, DocumentProgress, Incomplete
from embedstream.core.generations import GenerationIds
from embedstream.core.intake import AdmittedDocument
from embedstream.core.lanes import Priority
from embedstream.core.migration import DualWrites
from embedstream.core.tracing import NULL_SPAN, TRACEPARENT, RequestSpan
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import OutputUnwritable, ResultWriter
from embedstream.kafka.outputs.work import ChunkOf, Origin, WorkItem
from embedstream.wire import BACKFILL_HEADER, EmbedRequest, Headers
from embedstream.wire.document_events import DocumentTombstone
from embedstream.wire.result_records import DocumentComplete, DocumentDeleted, DocumentIncomplete

if TYPE_CHECKING:
    from embedstream.kafka.outputs.changelog_writer import ChunkChangelog

log = logging.getLogger(__name__)


class DocumentObserver(Protocol):
    def count_document(self, outcome: str) -> None:
        """A document version ended (complete, incomplete) or a document was deleted."""

    def count_chunks(self, chunks: int) -> None:
        """A document version was cut into this many chunks."""

    def count_backfill_document(self, outcome: str) -> None:
        """The backfill ended a document version (complete, incomplete) or deleted one."""


@dataclass(frozen=True, slots=True)
class DocumentStart:
    """An admitted document event and where it was read."""

    admitted: AdmittedDocument
    origin: Origin
    priority: Priority
    timestamp_ms: int
    source: str = ""  # the input topic (kafka/consumption/attribution.py)
    span: RequestSpan = NULL_SPAN  # the document's process span; its chunks' are children
    # Its generation's id when not the processor's own chunking's (a dual-write's other
    # generation, the backfill's): None, computed from its model and dimensions.
    index_generation: str | None = None

    @property
    def backfill(self) -> bool:
        return self.priority is Priority.BACKFILL


@dataclass(eq=False, slots=True)
class TombstoneRun:
    tombstone: DocumentTombstone
    origin: Origin
    state: PartitionState
    traceparent: bytes | None = None  # the delete's own, carried on to the tombstone out
    generations: tuple[str, ...] = ()  # a tombstone out for each (none: the processor's own)
    backfill: bool = False

    @property
    def doc_id(self) -> str:
        return self.tombstone.doc_id


class DocumentRun:
    """One document version in flight, from its first chunk to its final record. With a
    dual-write, the version's run of the processor's own generation is the ``primary``: it
    stands for the version in the document order and ends it once every run has ended."""

    def __init__(
        self,
        flow: DocumentFlow,
        start: DocumentStart,
        state: PartitionState,
        primary: DocumentRun | None = None,
    ) -> None:
        admitted = start.admitted
        self.flow = flow
        self.start = start
        self.state = state
        self.primary = primary
        self.others: list[DocumentRun] = []  # the primary's: the other generations' runs
        self.open_runs = 1  # the primary's: runs whose final record is not written yet
        self.doc_id = admitted.event.doc_id
        self.key = self.doc_id.encode()
        self.version = admitted.version
        self.progress = DocumentProgress(self.doc_id, self.version, len(admitted.chunks))
        # With a chunk changelog: each written chunk's changelog value, until the version ends.
        self.changelog_values: dict[int, bytes] = {}

    @property
    def metadata(self) -> dict[str, object] | None:
        return self.start.admitted.event.metadata

    @property
    def index_generation(self) -> str:
        """The id of this version's generation: its model, the dimensions it asks for."""
        if self.start.index_generation is not None:
            return self.start.index_generation
        admitted = self.start.admitted
        return self.flow.generations.id_of(admitted.model, admitted.event.dimensions)

    @property
    def backfill(self) -> bool:
        return self.start.backfill

    @property
    def changelogged(self) -> bool:
        """The chunk changelog carries the processor's own generation, from the live stream."""
        return self.primary is None and not self.backfill and self.start.index_generation is None

    def work_items(self) -> list[WorkItem]:
        start, event = self.start, self.start.admitted.event
        items = []
        for chunk in self.start.admitted.chunks:
            request = EmbedRequest(
                id=f"{self.doc_id}#{self.version}#{chunk.seq}",
                text=chunk.text,
                model=event.model,
                encoding_format=event.encoding_format,
                dimensions=event.dimensions,
                deadline_ms=event.deadline_ms,
                user=event.user,
                input_type=event.input_type,
                task=event.task,
            )
            items.append(
                WorkItem(
                    id=request.id,
                    text=chunk.text,
                    tokens=chunk.tokens,
                    deadline_ms=event.deadline_ms,
                    request=request,
                    origin=start.origin,
                    raw=b"",
                    priority=start.priority,
                    partition=self.state,
                    timestamp_ms=start.timestamp_ms,
                    model=start.admitted.model,
                    encoding_format=start.admitted.encoding_format,
                    chunk=ChunkOf(self, chunk.seq, chunk.start, chunk.end),
                    source=start.source,
                    span=start.span.child(f"chunk {chunk.seq}", chunk.seq),
                )
            )
        return items

    def chunk(self, seq: int) -> Chunk:
        return self.start.admitted.chunks[seq]

    def chunk_written(self, seq: int) -> None:
        self.progress.chunk_done(seq)
        self._outcome()

    def chunk_failed(self, seq: int) -> None:
        self.progress.chunk_failed(seq)
        self._outcome()

    def _outcome(self) -> None:
        self.state.chunks_held -= 1
        if self.progress.finished:
            self.flow.finished(self)


class DocumentFlow:
    """Starts document runs in order per doc_id and writes their final records."""

    def __init__(
        self,
        result_writer: ResultWriter,
        observer: DocumentObserver,
        *,
        include_text: bool,
        generations: GenerationIds,
        resubmit: Callable[[WorkItem], None] | None = None,
        changelog: ChunkChangelog | None = None,
        dual_writes: DualWrites | None = None,
    ) -> None:
        self._result_writer = result_writer
        self.dual_writes = dual_writes  # a migration's other generations (None: never any)
        self._observer = observer
        self.include_text = include_text
        self.changelog = changelog
        self.generations = generations  # every output names its index generation
        self._resubmit = resubmit
        self._writing: set[asyncio.Task[None]] = set()

    def bind(self, resubmit: Callable[[WorkItem], None]) -> None:
        """The engine's entry, for chunks that start (or are retried) outside a fetch: known
        only once the engine is built, which needs this flow's outcomes first."""
        self._resubmit = resubmit

    @property
    def writing(self) -> int:
        return len(self._writing)

    async def flush(self) -> None:
        """Wait for every final record and tombstone write started so far."""
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    def cancel_writes(self) -> None:
        for task in self._writing:
            task.cancel()

    # -- in: from the fetch loop ---------------------------------------------------------

    def start(self, start: DocumentStart, state: PartitionState) -> list[WorkItem]:
        """The chunks to submit now; none if an earlier event of its doc_id still runs."""
        run = DocumentRun(self, start, state)
        if self.dual_writes is not None and not start.backfill:
            for generation, admitted in self.dual_writes.versions(
                run.index_generation, start.admitted.event
            ):
                other = dataclasses.replace(start, admitted=admitted, index_generation=generation)
                run.others.append(DocumentRun(self, other, state, primary=run))
            run.open_runs += len(run.others)
        for each in (run, *run.others):
            self._observer.count_chunks(len(each.start.admitted.chunks))
        if not order_of(state).admit(run.doc_id, run):
            return []
        return self._begin(run)

    def delete(
        self,
        tombstone: DocumentTombstone,
        record: Record,
        state: PartitionState,
        generation: str | None = None,
    ) -> None:
        """A document's tombstone: out for the processor's own generation and, with a
        migration, the store's others; with ``generation`` (the backfill's), for that one."""
        origin = Origin(record.topic, record.partition, record.offset)
        traceparent = next((v for k, v in record.headers or () if k == TRACEPARENT), None)
        if generation is not None:
            generations: tuple[str, ...] = (generation,)
        else:
            own = self.generations.default_id
            others = () if self.dual_writes is None else self.dual_writes.deletes(own)
            generations = (own, *others)
        run = TombstoneRun(
            tombstone, origin, state, traceparent, generations, backfill=generation is not None
        )
        if order_of(state).admit(run.doc_id, run):
            self._spawn(self._write_tombstone(run))

    def resubmit(self, item: WorkItem) -> None:
        """A chunk to try again (its backoff is in `item.not_before_ms`)."""
        if self._resubmit is None:
            raise RuntimeError("DocumentFlow.bind() was never called")
        self._resubmit(item)

    # -- out: final records -------------------------------------------------------------

    def finished(self, run: DocumentRun) -> None:
        self._spawn(self._write_final(run))

    def _begin(self, run: DocumentRun) -> list[WorkItem]:
        items = []
        for each in (run, *run.others):
            made = each.work_items()
            run.state.chunks_held += len(made)
            if not made:  # an empty text: complete at once, with no chunks
                self.finished(each)
            items += made
        return items

    async def _write_final(self, run: DocumentRun) -> None:
        final = run.progress.final()
        generation = run.index_generation
        if isinstance(final, Incomplete):
            record: DocumentComplete | DocumentIncomplete = DocumentIncomplete(
                final.doc_id, final.version, final.chunk_count, final.missing, run.metadata,
                generation,
            )  # fmt: skip
            outcome = "incomplete"
        else:
            record = DocumentComplete(
                final.doc_id, final.version, final.chunk_count, run.metadata, generation
            )
            outcome = "complete"
        try:
            if self.changelog is not None and run.changelogged:  # before the final record
                if outcome == "complete":
                    await self.changelog.complete(run, final.chunk_count)
                else:
                    self.changelog.release(run)
            value = self._result_writer.end_value(record)
            await self._result_writer.document_record(
                record.key,
                value,
                run.start.origin,
                run.state,
                run.start.span.traceparent(),
                _lane_headers(run.backfill),
            )
        except OutputUnwritable:
            log.error("final record of document %s not written; it stays unfinished", run.doc_id)
            return
        self._observer.count_document(outcome)
        if run.backfill:
            self._observer.count_backfill_document(outcome)
        primary = run.primary or run
        primary.open_runs -= 1
        if primary.open_runs == 0:  # every generation's run of the version has ended
            primary.start.span.end(outcome)
            self._done(primary.doc_id, primary, primary.state, primary.start.origin.offset)

    async def _write_tombstone(self, run: TombstoneRun) -> None:
        try:
            if self.changelog is not None and not run.backfill:
                await self.changelog.deleted(run)
            for generation in run.generations or (self.generations.default_id,):
                deleted = DocumentDeleted(run.doc_id, generation)
                await self._result_writer.document_record(
                    deleted.key, None, run.origin, run.state, run.traceparent,
                    deleted.headers() + _lane_headers(run.backfill),
                )  # fmt: skip
        except OutputUnwritable:
            log.error("tombstone of document %s not written; it stays unfinished", run.doc_id)
            return
        self._observer.count_document("deleted")
        if run.backfill:
            self._observer.count_backfill_document("deleted")
        self._done(run.doc_id, run, run.state, run.origin.offset)

    def _done(
        self, doc_id: str, run: DocumentRun | TombstoneRun, state: PartitionState, offset: int
    ) -> None:
        state.complete(offset)
        following = order_of(state).finished(doc_id, run)
        if following is None or not state.live:
            return
        if isinstance(following, TombstoneRun):
            self._spawn(self._write_tombstone(following))
            return
        for item in self._begin(following):
            self.resubmit(item)

    def _spawn(self, write: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(write)
        self._writing.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("document record not written (%r)", task.exception())


def _lane_headers(backfill: bool) -> Headers:
    """The backfill's outputs say so: the store lets the live stream's writes win."""
    return [(BACKFILL_HEADER, b"1")] if backfill else []


def order_of(state: PartitionState) -> DocumentOrder[DocumentRun | TombstoneRun]:
    # The partition holds it untyped (partitions.py cannot import this module's types).
    return cast(DocumentOrder[DocumentRun | TombstoneRun], state.documents)
