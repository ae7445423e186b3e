"""The chunk changelog's bookkeeping: which chunk ids a document has, so a new complete
version (or a delete) knows which ones to tombstone. Pure.

Per document of one input partition, :class:`ChunkCounts` keeps the chunk count of its last
complete version in each index generation: the chunk ids of a generation are those of
chunk_seq 0 .. n-1, so a version of m chunks upserts 0 .. m-1 and tombstones m .. n-1, and a
delete tombstones every generation's 0 .. n-1. An incomplete version changes nothing, so a
store never holds a half-replaced document.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Replacement:
    """What a complete version changes: the chunk_seqs to tombstone, and the document's counts
    afterwards (to write to the state topic, then to keep)."""

    gone: range
    counts: dict[str, int]


class ChunkCounts:
    """One input partition's documents: doc_id -> {index generation: chunk count}."""

    def __init__(self, documents: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self._documents = {doc: dict(counts) for doc, counts in (documents or {}).items()}

    def __len__(self) -> int:
        return len(self._documents)

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def of(self, doc_id: str) -> dict[str, int]:
        return dict(self._documents.get(doc_id, {}))

    def replacing(self, doc_id: str, generation: str, chunk_count: int) -> Replacement:
        """What a complete version of ``chunk_count`` chunks in ``generation`` changes (not
        applied: :meth:`keep` once it is written)."""
        counts = self.of(doc_id)
        previous = counts.get(generation, 0)
        counts[generation] = chunk_count
        return Replacement(range(chunk_count, max(chunk_count, previous)), counts)

    def keep(self, doc_id: str, counts: Mapping[str, int]) -> None:
        self._documents[doc_id] = dict(counts)

    def forget(self, doc_id: str) -> dict[str, int]:
        """The document is deleted: its counts, for the tombstones of all its chunks."""
        return self._documents.pop(doc_id, {})
