"""Pure core of `embedstream verify` for documents: published versions and tombstones in, the
results topic's document records out, a report of every way they break the output contract.

Per doc_id (its records share one partition both ways, so their order is meaningful):

- every published version ends with exactly one final record (``complete`` or ``incomplete``),
  unless its event was dead-lettered whole (too big, too many chunks, invalid);
- the chunk records before a final are that version's, whole: seqs ``0..chunk_count-1`` each
  once, or for ``incomplete`` every seq either written or named ``missing`` (never both), and
  each missing chunk has a dead letter naming it (when dead letters are given);
- chunk records of a version all come before its final record, and versions do not interleave,
  except where a crash cut a version's run short and a replay of an already ended event
  follows (at-least-once re-reads from the last commit): the cut-off run counts as duplicates;
- finals and tombstones come in the order their events were published, so a tombstone comes
  after the final records of the versions published before it;
- nothing twice: a repeated chunk record, or a repeated final or tombstone (a redelivery replays
  a suffix of the events), counts as a duplicate, tolerated up to the caller's budget.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from embedstream.wire import DOC_CHUNK_SEQ, DOC_ID, DOC_VERSION
from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    DocumentRecord,
)

_LISTED = 20


class PublishedEvent(NamedTuple):
    """A document event (``version`` set) or a tombstone (``version`` None) as published."""

    doc_id: str
    version: str | None
    # (topic, partition, offset) where it was read, to match a dead letter of it
    location: tuple[str, int, int] | None = None


class ChunkLetter(NamedTuple):
    """A chunk dead-lettered for good (from its ``embedstream.doc.*`` headers)."""

    doc_id: str
    version: str
    chunk_seq: int


@dataclass(frozen=True)
class DocumentReport:
    documents: int = 0  # distinct doc_ids published
    versions: int = 0  # document events published
    tombstones: int = 0  # tombstones published
    dead_lettered: int = 0  # document events dead-lettered whole
    chunk_records: int = 0
    complete: int = 0
    incomplete: int = 0
    deleted: int = 0
    duplicates: int = 0  # records beyond the first of their kind
    lost: tuple[str, ...] = ()  # "doc_id@version" or "doc_id (delete)" never ended
    violations: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Contract kept, duplicates aside (the caller budgets them with the plain ones)."""
        return not (self.lost or self.violations)

    def summary_lines(self) -> list[str]:
        lines = [
            f"  {'documents':<16}{self.documents} ids, {self.versions} versions, "
            f"{self.tombstones} deletes published ({self.dead_lettered} dead-lettered whole)",
            f"  {'doc records':<16}{self.chunk_records} chunks, {self.complete} complete, "
            f"{self.incomplete} incomplete, {self.deleted} deleted, "
            f"{self.duplicates} duplicates",
            f"  {'doc lost':<16}{len(self.lost)}",
            f"  {'doc violations':<16}{len(self.violations)}",
        ]
        for title, items in (("documents lost", self.lost), ("violations", self.violations)):
            if items:
                more = f" ... and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
                lines.append(f"{title}: {'; '.join(items[:_LISTED])}{more}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "documents": self.documents,
            "versions": self.versions,
            "tombstones": self.tombstones,
            "dead_lettered": self.dead_lettered,
            "chunk_records": self.chunk_records,
            "complete": self.complete,
            "incomplete": self.incomplete,
            "deleted": self.deleted,
            "duplicates": self.duplicates,
            "lost": list(self.lost),
            "violations": list(self.violations),
        }


@dataclass
class _Tally:
    chunk_records: int = 0
    complete: int = 0
    incomplete: int = 0
    deleted: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    lost: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


# What closes one published event: its version for a final record, None for a tombstone.
_Ending = str | None


def check_documents(
    published: Iterable[PublishedEvent],
    outputs: Iterable[DocumentRecord],
    *,
    chunk_letters: Iterable[ChunkLetter] | None = None,
    dead_lettered: Iterable[tuple[str, int, int]] = (),
) -> DocumentReport:
    """Check every doc_id's outputs (in results-topic order) against its published events (in
    request-topic order). ``chunk_letters`` None skips the dead-letter check of missing chunks;
    events whose location is in ``dead_lettered`` expect no outputs."""
    events: dict[str, list[PublishedEvent]] = defaultdict(list)
    for event in published:
        events[event.doc_id].append(event)
    records: dict[str, list[DocumentRecord]] = defaultdict(list)
    for record in outputs:
        records[record.doc_id].append(record)
    letters = None if chunk_letters is None else set(chunk_letters)
    gone = set(dead_lettered)
    tally = _Tally()
    for doc_id in sorted(events.keys() | records.keys()):
        expected: list[_Ending] = []
        for event in events.get(doc_id, []):
            if event.version is not None and event.location in gone:
                tally.dead_lettered += 1
            else:
                expected.append(event.version)
        endings = _check_chunks(doc_id, records.get(doc_id, []), letters, tally)
        _match_endings(doc_id, expected, endings, tally)
    versions = [e for doc in events.values() for e in doc]
    return DocumentReport(
        documents=len(events),
        versions=sum(e.version is not None for e in versions),
        tombstones=sum(e.version is None for e in versions),
        dead_lettered=tally.dead_lettered,
        chunk_records=tally.chunk_records,
        complete=tally.complete,
        incomplete=tally.incomplete,
        deleted=tally.deleted,
        duplicates=tally.duplicates,
        lost=tuple(tally.lost),
        violations=tuple(tally.violations),
    )


def _check_chunks(
    doc_id: str,
    records: Sequence[DocumentRecord],
    letters: set[ChunkLetter] | None,
    tally: _Tally,
) -> list[_Ending]:
    """Check each final against the chunks before it; the endings in order."""
    open_chunks: dict[str, list[ChunkResult]] = {}
    closed: dict[str, set[int]] = {}  # versions with a final record: the seqs written before
    endings: list[_Ending] = []
    for record in records:
        if _replays(record, closed, endings):
            # A member died after writing some chunks of a version, before its final; its
            # successor replays this doc_id from an earlier, already ended event (at-least-once
            # re-reads from the last committed offset). The cut-off run is abandoned, and its
            # chunks are written again by the replay: they count as duplicates.
            for version in [v for v in open_chunks if v != getattr(record, "version", None)]:
                tally.duplicates += len(open_chunks.pop(version))
        if isinstance(record, ChunkResult):
            tally.chunk_records += 1
            others = [v for v in open_chunks if v != record.version]
            if others:
                tally.violations.append(
                    f"{doc_id}: chunks of versions {others[0]} and {record.version} interleave"
                )
            open_chunks.setdefault(record.version, []).append(record)
        elif isinstance(record, DocumentDeleted):
            tally.deleted += 1
            for version in open_chunks:
                tally.violations.append(
                    f"{doc_id}@{version}: chunks without a final record before the tombstone"
                )
            open_chunks.clear()
            endings.append(None)
        else:
            chunks = open_chunks.pop(record.version, [])
            earlier = closed.setdefault(record.version, set())
            seqs = {chunk.chunk_seq for chunk in chunks}
            tally.duplicates += len(seqs & earlier)  # a redelivered run writes them again
            earlier |= seqs
            if chunks or record.chunk_count == 0 or not earlier:
                _check_version(record, chunks, letters, tally)
            else:  # the final alone again (a redelivered write): counted as a replay below
                tally.complete += isinstance(record, DocumentComplete)
                tally.incomplete += isinstance(record, DocumentIncomplete)
            endings.append(record.version)
    for version, chunks in open_chunks.items():
        tally.violations.append(
            f"{doc_id}@{version}: {len(chunks)} chunk records after the last final record "
            "(or without one)"
        )
    return endings


def _replays(
    record: DocumentRecord, closed: Mapping[str, set[int]], endings: list[_Ending]
) -> bool:
    """Whether `record` begins again something that already ended: a chunk or final of a
    version with a final record before, or a tombstone right after a tombstone ended."""
    if isinstance(record, DocumentDeleted):
        return bool(endings) and endings[-1] is None
    return record.version in closed


def _check_version(
    final: DocumentComplete | DocumentIncomplete,
    chunks: Sequence[ChunkResult],
    letters: set[ChunkLetter] | None,
    tally: _Tally,
) -> None:
    name = f"{final.doc_id}@{final.version}"
    count = final.chunk_count
    seqs = [chunk.chunk_seq for chunk in chunks]
    written = set(seqs)
    tally.duplicates += len(seqs) - len(written)
    counts = sorted({chunk.chunk_count for chunk in chunks} - {count})
    if counts:
        tally.violations.append(f"{name}: chunk records say chunk_count {counts}, final {count}")
    if isinstance(final, DocumentComplete):
        tally.complete += 1
        missing = sorted(set(range(count)) - written)
        if missing:
            tally.violations.append(f"{name}: complete without chunks {_seqs(missing)}")
        return
    tally.incomplete += 1
    named = set(final.missing)
    both = sorted(written & named)
    if both:
        tally.violations.append(f"{name}: chunks {_seqs(both)} written and named missing")
    unaccounted = sorted(set(range(count)) - written - named)
    if unaccounted:
        tally.violations.append(
            f"{name}: chunks {_seqs(unaccounted)} neither written nor named missing"
        )
    if letters is not None:
        undead = [
            seq
            for seq in final.missing
            if ChunkLetter(final.doc_id, final.version, seq) not in letters
        ]
        if undead:
            tally.violations.append(f"{name}: missing chunks {_seqs(undead)} have no dead letter")


def _match_endings(
    doc_id: str, expected: Sequence[_Ending], endings: Sequence[_Ending], tally: _Tally
) -> None:
    """Endings must hold the expected ones in order; anything else is a replay (a duplicate)
    of one already matched, or out of order."""
    matched = 0
    for ending in endings:
        if matched < len(expected) and ending == expected[matched]:
            matched += 1
        elif ending in expected[:matched]:
            tally.duplicates += 1
        elif ending is not None and ending not in expected:
            tally.violations.append(f"{doc_id}@{ending}: a final record of a version never sent")
        else:
            what = "the tombstone" if ending is None else f"the final record of {ending}"
            tally.violations.append(f"{doc_id}: {what} is out of order")
    for ending in expected[matched:]:
        tally.lost.append(f"{doc_id} (delete)" if ending is None else f"{doc_id}@{ending}")


def _seqs(seqs: Iterable[int]) -> str:
    return "[" + ", ".join(map(str, seqs)) + "]"


def chunk_letter(headers: Mapping[str, str]) -> ChunkLetter | None:
    """The chunk a dead letter stands for, from its ``embedstream.doc.*`` headers."""
    doc_id, version, seq = headers.get(DOC_ID), headers.get(DOC_VERSION), headers.get(DOC_CHUNK_SEQ)
    if not doc_id or version is None or seq is None or not seq.isdigit():
        return None
    return ChunkLetter(doc_id, version, int(seq))
