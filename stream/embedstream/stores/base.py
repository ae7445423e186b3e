"""The interface every vector store implements, and the values it hands back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from embedstream.wire.result_records import OutputRecord


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record of a batch the store did not write, and why (a ``Reason`` code)."""

    record_index: int  # its position in the batch given to ``apply``
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One searchable chunk near a query vector; smaller distance is nearer."""

    doc_id: str
    version: str
    chunk_seq: int
    span: tuple[int, int]
    distance: float
    text: str | None
    metadata: dict[str, Any] | None


class VectorStore(Protocol):
    """What the store writer needs: open, apply fetched batches, close.

    ``apply`` writes a whole batch in one transaction, so the writer commits the batch's
    offsets after it returns; replaying any suffix of the records already applied (a crash
    between the transaction and the offset commit) leaves the same state. Records the store
    refuses (another model, another dimension) come back as :class:`Rejected` and the rest of
    the batch is written."""

    async def open(self) -> None: ...

    async def apply(self, records: Sequence[OutputRecord]) -> list[Rejected]: ...

    async def close(self) -> None: ...
