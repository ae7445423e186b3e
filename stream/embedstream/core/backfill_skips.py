"""Which document versions a backfill need not embed: those its generation already holds.

Pure. Before the backfill lane embeds the document versions of one poll, it asks the store,
once, what the generation being filled holds of those documents (:class:`Held`): the version
each holds complete, and which ones the live stream has written (the store drops every
backfill record of those, `stores/plan.py`). A version the generation holds complete, or a
document the live stream wrote, is skipped: its offset is done at once and no provider call is
paid for it. This is how a restarted backfill (SIGKILL, a rebalance) resumes without paying
again for what it embedded before its commit, whatever the cache.

A version a later record of its document replaces in the topic (*superseded*, read ahead:
`core/latest_records.py`) is skipped too: the later one brings the document's state.

Only a version held at that same version is skipped: an older one, or none, is embedded. A
delete is never skipped (it costs no call, and its place in the order matters). Nor is a
version of a document this backfill has already written something for since it started: an
earlier version or delete it sent may reach the store after the store answered, and would
then be the last word for a version skipped in its favour.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum


class SkipReason(StrEnum):
    """Why the backfill did not embed a document version (the metric's label)."""

    COMPLETE = "complete"  # the generation holds this very version complete
    LIVE = "live"  # the live stream wrote the document to the generation: it wins
    SUPERSEDED = "superseded"  # a later record of the document in the topic replaces it


@dataclass(frozen=True, slots=True)
class Held:
    """What a generation being filled holds of some documents (the store's one answer)."""

    complete: Mapping[str, str] = field(default_factory=dict)  # doc_id: its complete version
    live: AbstractSet[str] = frozenset()  # doc_ids the live stream wrote to it


@dataclass(frozen=True, slots=True)
class ReadVersion:
    """A document event the backfill read: a version, or a delete (``version`` None)."""

    doc_id: str
    version: str | None
    superseded: bool = False  # a later record of its key was read ahead


def skips(
    reads: Sequence[ReadVersion], held: Held, written: Container[str]
) -> list[SkipReason | None]:
    """For each read, in read order, why it is skipped, or None: it is embedded (deleted).

    ``written``: the doc_ids this backfill has written something for before this poll."""
    sent: set[str] = set()  # this poll's, in order
    decided: list[SkipReason | None] = []
    for read in reads:
        reason: SkipReason | None = None
        if read.version is not None and read.superseded:
            reason = SkipReason.SUPERSEDED  # the later record decides; sends nothing now
        elif read.version is not None and read.doc_id in held.live:
            reason = SkipReason.LIVE  # every backfill record of it is dropped: any order
        elif (
            read.version is not None
            and read.doc_id not in written
            and read.doc_id not in sent
            and held.complete.get(read.doc_id) == read.version
        ):
            reason = SkipReason.COMPLETE
        if reason is None:
            sent.add(read.doc_id)
        decided.append(reason)
    return decided


def sent(reads: Iterable[ReadVersion], decided: Iterable[SkipReason | None]) -> set[str]:
    """The doc_ids of the reads not skipped: what the backfill now has written for."""
    return {read.doc_id for read, reason in zip(reads, decided, strict=True) if reason is None}


class SentDocuments:
    """The doc_ids a backfill has sent something for since it started, at most ``limit``.

    Past the limit it forgets them and holds every document as sent: no held version is
    skipped for the rest of the pass (each is embedded, as before skips existed). Skips pay
    off right after a restart, when the set is empty; the bound keeps a pass over a corpus of
    millions from holding one string per document."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._ids: set[str] = set()
        self.full = False

    def __contains__(self, doc_id: object) -> bool:
        return self.full or doc_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add_all(self, doc_ids: Iterable[str]) -> bool:
        """Note these; True when this filled it (from now on every document counts as sent)."""
        if self.full:
            return False
        self._ids.update(doc_ids)
        if len(self._ids) > self._limit:
            self.full = True
            self._ids = set()
            return True
        return False
