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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from embedstream.core.chunker import Chunk
from embedstream.core.documents import DocumentOrder, DocumentProgress, Incomplete
from embedstream.core.generations import GenerationIds
from embedstream.core.intake import AdmittedDocument
from embedstream.core.lanes import Priority
from embedstream.core.tracing import NULL_SPAN, TRACEPARENT, RequestSpan
from embedstream.kafka.partitions import PartitionState
from embedstream.kafka.protocols import Record
from embedstream.kafka.sink import OutputUnwritable, Sink
from embedstream.kafka.work import ChunkOf, Origin, WorkItem
from embedstream.wire import EmbedRequest
from embedstream.wire.document_events import DocumentTombstone
from embedstream.wire.documents import DocumentComplete, DocumentDeleted, DocumentIncomplete

if TYPE_CHECKING:
    from embedstream.kafka.changelog import ChunkChangelog

log = logging.getLogger(__name__)


class DocumentObserver(Protocol):
    def count_document(self, outcome: str) -> None:
        """A document version ended (complete, incomplete) or a document was deleted."""

    def count_chunks(self, chunks: int) -> None:
        """A document version was cut into this many chunks."""


@dataclass(frozen=True, slots=True)
class DocumentStart:
    """An admitted document event and where it was read."""

    admitted: AdmittedDocument
    origin: Origin
    priority: Priority
    timestamp_ms: int
    source: str = ""  # the input topic (kafka/attribution.py)
    span: RequestSpan = NULL_SPAN  # the document's process span; its chunks' are children


@dataclass(eq=False, slots=True)
class TombstoneRun:
    tombstone: DocumentTombstone
    origin: Origin
    state: PartitionState
    traceparent: bytes | None = None  # the delete's own, carried on to the tombstone out

    @property
    def doc_id(self) -> str:
        return self.tombstone.doc_id


class DocumentRun:
    """One document version in flight, from its first chunk to its final record."""

    def __init__(self, flow: DocumentFlow, start: DocumentStart, state: PartitionState) -> None:
        admitted = start.admitted
        self.flow = flow
        self.start = start
        self.state = state
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
        admitted = self.start.admitted
        return self.flow.generations.id_of(admitted.model, admitted.event.dimensions)

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
        sink: Sink,
        observer: DocumentObserver,
        *,
        include_text: bool,
        generations: GenerationIds,
        resubmit: Callable[[WorkItem], None] | None = None,
        changelog: ChunkChangelog | None = None,
    ) -> None:
        self._sink = sink
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
        self._observer.count_chunks(len(start.admitted.chunks))
        if not order_of(state).admit(run.doc_id, run):
            return []
        return self._begin(run)

    def delete(self, tombstone: DocumentTombstone, record: Record, state: PartitionState) -> None:
        origin = Origin(record.topic, record.partition, record.offset)
        traceparent = next((v for k, v in record.headers or () if k == TRACEPARENT), None)
        run = TombstoneRun(tombstone, origin, state, traceparent)
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
        items = run.work_items()
        run.state.chunks_held += len(items)
        if not items:  # an empty text: complete at once, with no chunks
            self.finished(run)
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
            if self.changelog is not None:  # before the final record: it ends the version
                if outcome == "complete":
                    await self.changelog.complete(run, final.chunk_count)
                else:
                    self.changelog.release(run)
            value = self._sink.end_value(record)
            await self._sink.document_record(record.key, value, run.start.origin, run.state,
                                             run.start.span.traceparent())  # fmt: skip
        except OutputUnwritable:
            log.error("final record of document %s not written; it stays unfinished", run.doc_id)
            return
        run.start.span.end(outcome)
        self._observer.count_document(outcome)
        self._done(run.doc_id, run, run.state, run.start.origin.offset)

    async def _write_tombstone(self, run: TombstoneRun) -> None:
        deleted = DocumentDeleted(run.doc_id, self.generations.default_id)
        try:
            if self.changelog is not None:
                await self.changelog.deleted(run)
            await self._sink.document_record(
                deleted.key, None, run.origin, run.state, run.traceparent, deleted.headers()
            )
        except OutputUnwritable:
            log.error("tombstone of document %s not written; it stays unfinished", run.doc_id)
            return
        self._observer.count_document("deleted")
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


def order_of(state: PartitionState) -> DocumentOrder[DocumentRun | TombstoneRun]:
    # The partition holds it untyped (partitions.py cannot import this module's types).
    return cast(DocumentOrder[DocumentRun | TombstoneRun], state.documents)
