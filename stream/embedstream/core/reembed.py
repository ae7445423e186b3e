"""What re-embedding a store's documents for another index generation will cost, before
anything is spent: documents, chunks, tokens, calls, and time at the rate limits. Pure.

The figures come from what the store holds: each document's latest version as its chunk rows
(:class:`StoredChunk`). With the same chunking, the chunks are those rows, and their tokens
are estimated as the processor counts them (``core.tokens``: a little above what providers
report). With other chunking, the texts are cut again when the store keeps them
(``include_chunk_text``; the whitespace between chunks is not kept, a line break stands in);
without them, a document's length (its last span's end) gives a lower bound of its chunks.
Calls are the fewest the batch limits allow, time the least the rate limits allow: a backfill
sharing the provider with live traffic takes longer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from embedstream.core.chunker import ChunkingRules, chunk_document
from embedstream.core.tokens import TokenCounter, estimate_tokens, tokens_of_bytes

Basis = Literal["chunks", "texts", "spans"]
BASIS_SAID = {
    "chunks": "the stored chunks (same chunking)",
    "texts": "the stored texts, cut again",
    "spans": "the chunk spans (no text kept): a lower bound",
}


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk row of a document's latest version."""

    chunk_count: int
    span: tuple[int, int]
    text_bytes: int | None  # the UTF-8 length of its text, if kept
    text: str | None = None  # the text, when it is needed (other chunking) and kept


@dataclass(frozen=True, slots=True)
class CallLimits:
    inputs_per_call: int
    tokens_per_call: int
    rpm: float  # 0: unlimited
    tpm: float


@dataclass(frozen=True, slots=True)
class ReembedPlan:
    documents: int
    chunks: int
    tokens: int
    calls: int
    minutes: float | None  # at the rate limits; None: no rate limit is set
    basis: Basis
    requests: int  # plain results: not re-embedded, their text is not kept

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class PlanTally:
    """Documents one at a time (their latest version's chunk rows), then :meth:`plan`."""

    def __init__(
        self,
        target: ChunkingRules,
        *,
        same_chunking: bool,
        texts: bool,
        count: TokenCounter = estimate_tokens,
    ) -> None:
        self._target = target
        self._count = count
        self.basis: Basis = "chunks" if same_chunking else "texts" if texts else "spans"
        self.documents = self.chunks = self.tokens = 0

    def add(self, rows: Sequence[StoredChunk]) -> None:
        self.documents += 1
        if not rows:
            return  # an empty version: complete with no chunk, nothing to embed
        chunks, tokens = (
            _same(rows) if self.basis == "chunks"
            else self._cut(rows) if self.basis == "texts"
            else _from_length(max(r.span[1] for r in rows), self._target)
        )  # fmt: skip
        self.chunks += chunks
        self.tokens += tokens

    def _cut(self, rows: Sequence[StoredChunk]) -> tuple[int, int]:
        text = reconstruct([(r.span, r.text or "") for r in rows])
        cut = chunk_document(text, self._target, self._count)
        return len(cut), sum(c.tokens for c in cut)

    def plan(self, limits: CallLimits, requests: int) -> ReembedPlan:
        calls = 0
        if self.chunks:
            calls = max(-(-self.chunks // limits.inputs_per_call),
                        -(-self.tokens // limits.tokens_per_call))  # fmt: skip
        minutes = None
        if limits.rpm or limits.tpm:
            minutes = max(calls / limits.rpm if limits.rpm else 0.0,
                          self.tokens / limits.tpm if limits.tpm else 0.0)  # fmt: skip
        return ReembedPlan(self.documents, self.chunks, self.tokens, calls, minutes, self.basis,
                           requests)  # fmt: skip


def _same(rows: Sequence[StoredChunk]) -> tuple[int, int]:
    """The version's chunks as they are; a chunk missing from the store (dead-lettered, or
    not written yet) is counted at the mean of the others."""
    count = max(r.chunk_count for r in rows)
    each = [tokens_of_bytes(r.text_bytes if r.text_bytes is not None else r.span[1] - r.span[0])
            for r in rows]  # fmt: skip
    missing = max(0, count - len(rows))
    return count, sum(each) + missing * -(-sum(each) // len(each))


def _from_length(length: int, rules: ChunkingRules) -> tuple[int, int]:
    """At least this many chunks: each holds at most max_tokens - overlap of its own text."""
    tokens = tokens_of_bytes(length)  # characters: a lower bound of the UTF-8 bytes
    chunks = max(1, -(-tokens // (rules.max_tokens - rules.overlap_tokens)))
    return chunks, tokens + (chunks - 1) * rules.overlap_tokens


def reconstruct(pieces: Sequence[tuple[tuple[int, int], str]]) -> str:
    """A document's text from its chunks' spans and texts (overlaps agree); the whitespace
    between chunks is not kept: a line break stands in for each character of it."""
    end = max(span[1] for span, _ in pieces)
    chars = ["\n"] * end
    for (start, stop), text in pieces:
        chars[start:stop] = text
    return "".join(chars)
