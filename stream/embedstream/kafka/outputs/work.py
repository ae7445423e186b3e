"""A request (or a document's chunk) read from Kafka on its way through the engine, with where
it must be acked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.jobs import Job
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.wire import EmbedRequest

if TYPE_CHECKING:
    from embedstream.kafka.outputs.document_runs import DocumentRun


class Origin(NamedTuple):
    """Where a record was read (a NamedTuple: one is built per record)."""

    topic: str
    partition: int
    offset: int


_tuple_new = tuple.__new__


@dataclass(frozen=True, slots=True)
class ChunkOf:
    """Which chunk of which running document version an item is."""

    document: DocumentRun
    seq: int
    start: int  # its span in the document's text
    end: int


@dataclass(slots=True, eq=False, kw_only=True)
class WorkItem(Job):
    request: EmbedRequest
    origin: Origin
    raw: bytes
    priority: Priority
    partition: PartitionState  # the assignment it was read under (dead once revoked)
    timestamp_ms: int  # when the request first entered Kafka: end-to-end latency starts here
    model: str  # resolved at intake: the request's, or the configured default
    encoding_format: str
    truncated_from: int | None = None  # estimate before truncation (oversize_policy=truncate)
    not_before_ms: int = 0  # a retry's earliest send time (from the retry record's headers)
    chunk: ChunkOf | None = None  # set when the item is a chunk of a document
    # The input topic its request first came in on (a retry's too): accounting's label.
    source: str = ""

    @property
    def key(self) -> BucketKey:
        r = self.request  # (BucketKey(...), without the call of its generated __new__)
        return _tuple_new(BucketKey, (
            self.priority, self.model, self.encoding_format, r.dimensions,
            r.user, r.input_type, r.task,
        ))  # fmt: skip

    @property
    def current(self) -> bool:
        """Its partition is still assigned as it was when the record was read."""
        return self.partition.live

    def finish(self) -> None:
        """Its outcome is written: the offset may be committed (a chunk's: its document is a
        step nearer its final record, after which the document's offset may be)."""
        if self.chunk is None:
            self.partition.complete(self.origin.offset)
        else:
            self.chunk.document.chunk_written(self.chunk.seq)

    def given_up(self) -> None:
        """Its dead letter is written: like `finish`, but a chunk counts as missing."""
        if self.chunk is None:
            self.partition.complete(self.origin.offset)
        else:
            self.chunk.document.chunk_failed(self.chunk.seq)
