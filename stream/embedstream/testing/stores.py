"""An in-memory vector store for unit tests of the store writer (``kafka.store_feed``).

It folds records as :mod:`embedstream.stores.plan` does (the same plan the PostgreSQL store
applies), so a test can compare its rows with what the records imply; ``fail_next`` applies
raise a retriable :class:`StoreError` (an outage) and leave the rows as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from embedstream.errors import Reason, StoreError
from embedstream.stores.base import Rejected
from embedstream.stores.plan import plan_batch
from embedstream.wire.result_records import ChunkResult, OutputRecord, PlainResult


@dataclass
class MemoryStore:
    model: str | None = None
    dimensions: int | None = None
    fail_next: int = 0
    refuse_doc_ids: frozenset[str] = frozenset()  # a database that refuses these (not an outage)
    chunks: dict[tuple[str, str, int], ChunkResult] = field(default_factory=dict)
    complete: dict[str, tuple[str, int]] = field(default_factory=dict)  # doc -> version, count
    incomplete: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    requests: dict[str, PlainResult] = field(default_factory=dict)
    applied: list[list[OutputRecord]] = field(default_factory=list)  # every committed batch
    attempts: int = 0
    opened: bool = False
    closed: bool = False

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.closed = True

    async def apply(self, records: Sequence[OutputRecord]) -> list[Rejected]:
        self.attempts += 1
        if self.fail_next:
            self.fail_next -= 1
            raise StoreError(Reason.STORE_UNAVAILABLE, "connection refused (fake)", retriable=True)
        if any(getattr(r, "doc_id", None) in self.refuse_doc_ids for r in records):
            raise StoreError(Reason.STORE_FAILED, "check constraint violated (fake)")
        accepted: list[OutputRecord] = []
        rejected: list[Rejected] = []
        for index, record in enumerate(records):
            if isinstance(record, PlainResult | ChunkResult):
                self.model = self.model or record.model
                self.dimensions = self.dimensions or len(record.embedding)
                if record.model != self.model:
                    rejected.append(Rejected(index, Reason.MODEL_MISMATCH, "another model"))
                    continue
                if len(record.embedding) != self.dimensions:
                    rejected.append(Rejected(index, Reason.DIMENSION_MISMATCH, "another size"))
                    continue
            accepted.append(record)
        self._fold(accepted)
        self.applied.append(list(records))
        return rejected

    def _fold(self, records: Sequence[OutputRecord]) -> None:
        plan = plan_batch(records)
        for doc in plan.resets:
            self._forget(doc)
        for c in plan.completes:
            for key in [k for k in self.chunks if k[0] == c.doc_id]:
                if key[1] != c.version or key[2] >= c.chunk_count:
                    del self.chunks[key]
            self.complete[c.doc_id] = (c.version, c.chunk_count)
            self.incomplete.pop(c.doc_id, None)
        for m in plan.incompletes:
            self.incomplete[m.doc_id] = (m.version, m.missing)
        for chunk in plan.chunks:
            self.chunks[chunk.doc_id, chunk.version, chunk.chunk_seq] = chunk
        for request in plan.requests:
            self.requests[request.id] = request

    def _forget(self, doc_id: str) -> None:
        for key in [k for k in self.chunks if k[0] == doc_id]:
            del self.chunks[key]
        self.complete.pop(doc_id, None)
        self.incomplete.pop(doc_id, None)

    def rows_of(self, doc_id: str) -> list[tuple[str, int]]:
        """(version, chunk_seq) of a document's rows, sorted."""
        return sorted((k[1], k[2]) for k in self.chunks if k[0] == doc_id)
