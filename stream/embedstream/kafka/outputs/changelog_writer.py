"""The chunk changelog: one more output of the documents flow (``topic_changelog``).

On a version's ``complete``, a record per chunk keyed by the chunk's id (upsert) and a
tombstone for every chunk id the document had and no longer has; on a document tombstone,
tombstones for all its chunks. What a document has is its chunk counts per index generation
(``core/chunk_ids.py``), kept per input partition and written to the compacted state topic
after the changelog records (exactly-once: in the same transaction, with the input offset),
so a crash between them replays into the same records. An incomplete version writes nothing.

A chunk's changelog value is encoded when its result is (its vector is not kept) and held by
its document run until the version is complete, counted against ``max_buffered_bytes`` on the
document's input offset.

When an input partition is assigned, its documents' counts are read from the state topic to
its end (after the exactly-once fence, so what the previous owner committed is there) before
anything of the partition is read; they go with the partition when it is revoked.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from aiokafka import TopicPartition

from embedstream.core.chunk_ids import ChunkCounts
from embedstream.errors import InvalidEvent
from embedstream.kafka.client.connection import KafkaTarget
from embedstream.kafka.client.reader import read_topics
from embedstream.kafka.outputs.document_runs import DocumentRun, TombstoneRun
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import Output, ResultWriter
from embedstream.kafka.outputs.work import Origin
from embedstream.wire import ChunkResult
from embedstream.wire.changelog import (
    ChangelogChunk,
    chunk_id,
    connect_json,
    decode_state,
    encode_state,
    state_doc_id,
    state_key,
    state_key_prefix,
)

log = logging.getLogger(__name__)

# Reading one state partition when an input partition is assigned.
LOAD_TIMEOUT_S = 60.0


class ChangelogValues(Protocol):
    """How a chunk's value is written: Connect's JSON envelope, or a registry format."""

    def encode(self, chunk: ChangelogChunk) -> bytes: ...


class ConnectJsonValues:
    def encode(self, chunk: ChangelogChunk) -> bytes:
        return connect_json(chunk)


# Which of a topic's partitions (given in partition order) to read.
Pick = Callable[[list[TopicPartition]], list[TopicPartition]]


class StateRecord(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class StateReader(Protocol):
    """Reads the picked partitions of a topic to their ends (read_committed)."""

    def __call__(self, topic: str, pick: Pick) -> AsyncIterator[StateRecord]: ...


def kafka_state_reader(kafka: KafkaTarget, client_id: str) -> StateReader:
    def read(topic: str, pick: Pick) -> AsyncIterator[StateRecord]:
        return read_topics(kafka, [topic], timeout_s=LOAD_TIMEOUT_S,
                           client_id=f"{client_id}-changelog-state", pick=pick)  # fmt: skip

    return read


class ChunkCountsLoader:
    """Reads an input partition's documents' chunk counts from the state topic: partition
    ``p mod N`` of it holds those of input partitions ``p`` of every input topic."""

    def __init__(self, read: StateReader, state_topic: str) -> None:
        self._read = read
        self.state_topic = state_topic
        self.partitions: int | None = None  # the state topic's, known at the first load

    def state_partition(self, tp: TopicPartition) -> int:
        if self.partitions is None:
            raise RuntimeError(f"{tp}: its chunk counts were never loaded")
        partition: int = tp.partition
        return partition % self.partitions

    async def load(self, tp: TopicPartition) -> ChunkCounts:
        def pick(found: list[TopicPartition]) -> list[TopicPartition]:
            self.partitions = len(found)
            return [found[tp.partition % len(found)]]

        prefix = state_key_prefix(tp.topic, tp.partition)
        documents: dict[str, dict[str, int]] = {}
        async for record in self._read(self.state_topic, pick):
            if record.key is None or not record.key.startswith(prefix):
                continue  # another input partition's document
            try:
                doc_id = state_doc_id(record.key, prefix)
                if record.value is None:
                    documents.pop(doc_id, None)
                else:
                    documents[doc_id] = decode_state(record.value)
            except InvalidEvent as exc:
                log.warning("skipping a malformed state record at %s-%d@%d: %s",
                            record.topic, record.partition, record.offset, exc)  # fmt: skip
        return ChunkCounts(documents)


class ChunkChangelog:
    """Writes the changelog records of complete versions and deleted documents."""

    def __init__(
        self,
        result_writer: ResultWriter,
        changelog_topic: str,
        loader: ChunkCountsLoader,
        values: ChangelogValues | None = None,
    ) -> None:
        self._result_writer = result_writer
        self.topic = changelog_topic
        self.loader = loader
        self.values: ChangelogValues = values or ConnectJsonValues()

    def keep(self, run: DocumentRun, result: ChunkResult) -> None:
        """A chunk's result, as its changelog value: held by its run until the version ends."""
        chunk = ChangelogChunk(
            result.doc_id, result.version, result.chunk_seq, result.span, result.embedding,
            result.model, result.dimensions, run.index_generation, result.metadata, result.text,
        )  # fmt: skip
        value = self.values.encode(chunk)
        before = run.changelog_values.get(result.chunk_seq, b"")
        run.changelog_values[result.chunk_seq] = value
        run.state.offsets.hold_bytes(run.start.origin.offset, len(value) - len(before))

    def release(self, run: DocumentRun) -> None:
        """Let the held values go: written, or the version is incomplete."""
        size = sum(len(value) for value in run.changelog_values.values())
        run.changelog_values.clear()
        run.state.offsets.hold_bytes(run.start.origin.offset, -size)

    async def complete(self, run: DocumentRun, chunk_count: int) -> None:
        """The version's chunks, tombstones for the chunks gone, then the document's state.
        Raises OutputUnwritable (the document stays unfinished)."""
        generation = run.index_generation
        counts = _counts(run.state)
        change = counts.replacing(run.doc_id, generation, chunk_count)
        origin, state = run.start.origin, run.state
        outputs = [
            self._output(origin, state, chunk_id(generation, run.doc_id, seq),
                         run.changelog_values[seq])
            for seq in range(chunk_count)
        ]  # fmt: skip
        outputs += [self._output(origin, state, chunk_id(generation, run.doc_id, seq), None)
                    for seq in change.gone]  # fmt: skip
        await self._result_writer.write_outputs(outputs)
        await self._write_state(origin, state, run.doc_id, change.counts)
        counts.keep(run.doc_id, change.counts)
        self.release(run)

    async def deleted(self, run: TombstoneRun) -> None:
        """Tombstones for every chunk of every generation the document had, then its state's."""
        counts = _counts(run.state)
        had = counts.of(run.doc_id)
        if not had:
            return
        gone = [chunk_id(generation, run.doc_id, seq)
                for generation, count in sorted(had.items()) for seq in range(count)]  # fmt: skip
        outputs = [self._output(run.origin, run.state, key, None) for key in gone]
        await self._result_writer.write_outputs(outputs)
        await self._write_state(run.origin, run.state, run.doc_id, None)
        counts.forget(run.doc_id)

    def _output(
        self, origin: Origin, state: PartitionState, key: str, value: bytes | None
    ) -> Output:
        return Output(origin, self.topic, key.encode(), value, [], state)

    async def _write_state(
        self, origin: Origin, state: PartitionState, doc_id: str, counts: dict[str, int] | None
    ) -> None:
        tp = state.tp
        value = None if counts is None else encode_state(counts)
        key = state_key(tp.topic, tp.partition, doc_id)
        partition = self.loader.state_partition(tp)
        await self._result_writer.write_outputs(
            [Output(origin, self.loader.state_topic, key, value, [], state, partition=partition)]
        )


def _counts(state: PartitionState) -> ChunkCounts:
    if state.chunk_counts is None:
        raise RuntimeError(f"{state.tp}: documents read before their chunk counts were loaded")
    return state.chunk_counts
