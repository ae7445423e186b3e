"""Document bookkeeping: when a document's final record is due, what it says, and in what order
the versions of one document may run.

A document event becomes N chunk work items; each ends with one outcome (its result written, or
dead-lettered for good). `DocumentProgress` turns those outcomes into the final record. Within one
input partition, `DocumentOrder` keeps the versions (and tombstones) of a doc_id one at a time in
arrival order, so version 2's chunks never start before version 1's final record is written and a
tombstone never overtakes the version it deletes.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


def default_version(text: str) -> str:
    """The version of an event that names none: the first 16 hex digits of the text's sha256.

    64 bits: two different texts of one doc_id collide with odds near 2^-64 per pair, far below
    any other failure; 16 characters keep the version short in keys and headers. Equal texts get
    equal versions, so a replayed event is recognised as the same version.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Complete:
    doc_id: str
    version: str
    chunk_count: int


@dataclass(frozen=True, slots=True)
class Incomplete:
    doc_id: str
    version: str
    chunk_count: int
    missing: tuple[int, ...]  # the dead-lettered chunks' seqs, ascending


Final = Complete | Incomplete


class DocumentProgress:
    """The outcomes of one document version's chunks, until every chunk has one."""

    def __init__(self, doc_id: str, version: str, chunk_count: int) -> None:
        if chunk_count < 0:
            raise ValueError(f"chunk_count must be at least 0, got {chunk_count}")
        self.doc_id = doc_id
        self.version = version
        self.chunk_count = chunk_count
        self._done: set[int] = set()
        self._failed: set[int] = set()

    def chunk_done(self, seq: int) -> None:
        """The chunk's result is written. Wins over an earlier failure: the result is out there,
        so the final record must not call it missing."""
        self._check(seq)
        self._failed.discard(seq)
        self._done.add(seq)

    def chunk_failed(self, seq: int) -> None:
        """The chunk is dead-lettered for good; ignored once its result is written."""
        self._check(seq)
        if seq not in self._done:
            self._failed.add(seq)

    @property
    def finished(self) -> bool:
        return len(self._done) + len(self._failed) == self.chunk_count

    def final(self) -> Final:
        if not self.finished:
            raise ValueError(
                f"document {self.doc_id!r} version {self.version!r}: "
                f"{self.chunk_count - len(self._done) - len(self._failed)} chunks have no outcome"
            )
        if self._failed:
            return Incomplete(
                self.doc_id, self.version, self.chunk_count, tuple(sorted(self._failed))
            )
        return Complete(self.doc_id, self.version, self.chunk_count)

    def _check(self, seq: int) -> None:
        if not 0 <= seq < self.chunk_count:
            raise ValueError(
                f"chunk seq {seq} is out of range for document {self.doc_id!r} "
                f"with {self.chunk_count} chunks"
            )


class DocumentOrder(Generic[T]):
    """One partition's documents: at most one running per doc_id, the rest wait in arrival order.

    A token is whatever the caller uses to name one event (e.g. its input offset); tokens of one
    doc_id must differ. Tombstones queue like versions. At most `max_waiting` tokens wait in all;
    the caller checks `full` and stops fetching instead of admitting more.
    """

    def __init__(self, max_waiting: int) -> None:
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be at least 0, got {max_waiting}")
        self._max_waiting = max_waiting
        self._running: dict[Hashable, T] = {}
        self._waiting: dict[Hashable, deque[T]] = {}
        self._waiting_count = 0

    @property
    def waiting(self) -> int:
        return self._waiting_count

    @property
    def full(self) -> bool:
        return self._waiting_count >= self._max_waiting

    def running(self, doc_id: Hashable) -> T | None:
        return self._running.get(doc_id)

    def admit(self, doc_id: Hashable, token: T) -> bool:
        """True: start it now. False: it waits behind an earlier event of its doc_id."""
        if doc_id not in self._running:
            self._running[doc_id] = token
            return True
        if self.full:  # only waiting takes room: a doc_id with nothing running always starts
            raise OverflowError(f"{self._waiting_count} documents already wait (the maximum)")
        self._waiting.setdefault(doc_id, deque()).append(token)
        self._waiting_count += 1
        return False

    def finished(self, doc_id: Hashable, token: T) -> T | None:
        """The running event of doc_id is done (its final record or tombstone is written):
        the next one to start, if any waits."""
        if doc_id not in self._running or self._running[doc_id] != token:
            raise ValueError(f"{token!r} is not the running event of document {doc_id!r}")
        queue = self._waiting.get(doc_id)
        if not queue:
            del self._running[doc_id]
            return None
        following = self._running[doc_id] = queue.popleft()
        self._waiting_count -= 1
        if not queue:
            del self._waiting[doc_id]
        return following
