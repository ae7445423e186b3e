"""Settings of documents: how they are cut into chunks, and the limits on one document."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, setting

_DOC = Group.DOCUMENTS


@dataclass(frozen=True)
class DocumentFields:
    chunk_max_tokens: int = setting(
        512,
        "Most estimated tokens in one chunk of a document, overlap included (capped at the "
        "provider's limit per input).",
        _DOC,
        gt=0,
    )
    chunk_overlap_tokens: int = setting(
        32,
        "Tokens of the previous chunk's end repeated at a chunk's start (context across cuts).",
        _DOC,
        ge=0,
    )
    chunk_min_tokens: int = setting(
        128, "Chunks smaller than this merge with a neighbour (headings, short lines).", _DOC, ge=0
    )
    include_chunk_text: bool = setting(
        False, "Put each chunk's text in its result (for stores that keep the text).", _DOC
    )
    max_document_bytes: int = setting(
        1_048_576, "Largest document event accepted; larger ones are dead-lettered.", _DOC, gt=0
    )
    max_document_chunks: int = setting(
        1_000,
        "Most chunks of one document (more is dead-lettered as too_many_chunks); a document is "
        "admitted whole, so the buffer may exceed its item bound by this much.",
        _DOC,
        gt=0,
    )
