"""Fold one batch of results-topic records into the few set-wise writes a store makes.

Pure. Records of one document arrive in order (they share a key), so each document's records
fold into its net effect: a tombstone forgets everything before it; a ``complete`` of version
``v`` with ``n`` chunks forgets the chunks before it of other versions or with ``chunk_seq >=
n``, and the incomplete mark before it; the last write of a chunk, a plain result or a mark
wins. What is left is applied in a fixed order (:class:`BatchPlan`) with multi-row statements
instead of one statement per record, and gives the state the records one by one would give.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    OutputRecord,
    PlainResult,
)

ChunkKey = tuple[str, str, int]  # doc_id, version, chunk_seq


def live_first(
    records: Sequence[OutputRecord], marked: set[str]
) -> tuple[list[OutputRecord], set[str]]:
    """A generation being filled: the live stream's writes win over the backfill's.

    In order, a record of the live stream (a dual-write) marks its document; a backfill record
    of a marked document is dropped, so the backfill never overwrites a version the live
    stream wrote since the migration started, nor brings back a document it deleted (the
    mark outlives the delete). ``marked``: the documents marked before this batch. Returns the
    records kept and the documents this batch marks. Versions are strings with no order, so
    the rule is by origin, not by version: the backfill reads the documents topic in order,
    and a version it has not reached yet is one the live stream writes too.
    """
    kept: list[OutputRecord] = []
    marks: set[str] = set()
    for record in records:
        if isinstance(record, PlainResult):
            kept.append(record)
        elif not record.backfill:
            marks.add(record.doc_id)
            kept.append(record)
        elif record.doc_id not in marked and record.doc_id not in marks:
            kept.append(record)
    return kept, marks - marked


@dataclass(slots=True)
class _Document:
    reset: bool = False
    complete: DocumentComplete | None = None
    chunks: dict[tuple[str, int], ChunkResult] = field(default_factory=dict)
    latest: str | None = None
    incomplete: DocumentIncomplete | None = None


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The net writes of a batch, in the order a store applies them:

    1. ``resets``: delete these documents entirely (a tombstone came);
    2. ``completes``: delete the document's rows of other versions and with ``chunk_seq >=
       chunk_count``; that version becomes the complete one, the incomplete mark is cleared;
    3. ``latest``: each document's most recently written version (chunk, final record);
    4. ``incompletes``: set the document's incomplete mark;
    5. ``chunks``: upsert, then recompute which rows of the ``latest`` documents are searchable;
    6. ``requests``: upsert plain results by request id.
    """

    resets: tuple[str, ...]
    completes: tuple[DocumentComplete, ...]
    latest: dict[str, str]
    incompletes: tuple[DocumentIncomplete, ...]
    chunks: tuple[ChunkResult, ...]
    requests: tuple[PlainResult, ...]


def plan_batch(records: Sequence[OutputRecord]) -> BatchPlan:
    """The net writes of ``records`` (already checked against the store's model and size)."""
    documents: dict[str, _Document] = {}
    requests: dict[str, PlainResult] = {}
    for record in records:
        if isinstance(record, PlainResult):
            requests[record.id] = record
            continue
        state = documents.get(record.doc_id)
        if state is None:
            state = documents[record.doc_id] = _Document()
        _fold(state, record)
    return BatchPlan(
        resets=tuple(doc_id for doc_id, state in documents.items() if state.reset),
        completes=tuple(state.complete for state in documents.values() if state.complete),
        latest={
            doc_id: state.latest for doc_id, state in documents.items() if state.latest is not None
        },
        incompletes=tuple(state.incomplete for state in documents.values() if state.incomplete),
        chunks=tuple(chunk for state in documents.values() for chunk in state.chunks.values()),
        requests=tuple(requests.values()),
    )


def _fold(
    state: _Document,
    record: ChunkResult | DocumentComplete | DocumentIncomplete | DocumentDeleted,
) -> None:
    if isinstance(record, ChunkResult):
        state.chunks[record.version, record.chunk_seq] = record
        state.latest = record.version
    elif isinstance(record, DocumentComplete):
        version, count = record.version, record.chunk_count
        state.chunks = {
            key: chunk
            for key, chunk in state.chunks.items()
            if key[0] == version and key[1] < count
        }
        state.complete = record
        state.incomplete = None
        state.latest = version
    elif isinstance(record, DocumentIncomplete):
        state.incomplete = record
        state.latest = record.version
    else:  # a tombstone: nothing before it counts
        state.reset = True
        state.complete = None
        state.chunks = {}
        state.latest = None
        state.incomplete = None
