"""Index generations: what a store's vectors depend on, and the short id that names one. Pure.

Vectors of two generations are not comparable: another model, another size, or other chunks
(other spans, other texts) give other vectors. So every output record the processor writes
carries the id of its :class:`IndexGeneration` (``index_generation`` in the value; a
tombstone, whose value is null, in a header), and a store keeps each generation apart.

The id is the first 8 hex digits of the SHA-256 of the generation's canonical JSON
(:meth:`IndexGeneration.canonical`): the same settings give the same id in every process and
every release, and ids of two generations of one store collide with odds of one in four
billion. "Generation" alone means the consumer group's generation in ``kafka/``; this one is
always an *index* generation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from embedstream.core.chunker import ChunkingRules
from embedstream.wire.result_fields import GENERATION_ID_CHARS

# Raise when the chunker cuts the same text differently: the chunks, so the vectors, change.
CHUNKER_REVISION = 1


@dataclass(frozen=True, slots=True)
class IndexGeneration:
    """A model, the dimensions asked of it, and the chunking of documents."""

    model: str
    dimensions: int | None  # asked of the provider; None: the model's own size
    chunking: ChunkingRules

    def canonical(self) -> str:
        """The JSON the id hashes: sorted keys, no spaces, the chunker's revision included."""
        rules = self.chunking
        doc = {
            "chunking": {
                "chunker": CHUNKER_REVISION,
                "max_tokens": rules.max_tokens,
                "min_tokens": rules.min_tokens,
                "overlap_tokens": rules.overlap_tokens,
            },
            "dimensions": self.dimensions,
            "model": self.model,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @property
    def id(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:GENERATION_ID_CHARS]

    def describe(self, size: int | None = None) -> str:
        """One line for people: ``model 'm', its own dimensions, chunks <= 512 tokens ...``;
        ``size``: the vectors' when known (said only of a model's own size)."""
        rules = self.chunking
        if self.dimensions is not None:
            size_said = f"{self.dimensions} dimensions"
        else:
            size_said = "its own dimensions" + ("" if size is None else f" ({size})")
        return (
            f"model {self.model!r}, {size_said}, chunks <= {rules.max_tokens} tokens "
            f"(overlap {rules.overlap_tokens}, min {rules.min_tokens})"
        )


class GenerationIds:
    """The ids of one processor's outputs: its chunking is fixed, model and dimensions come
    from each request or document. Remembered: an id is asked for on every record."""

    def __init__(self, chunking: ChunkingRules, default_model: str) -> None:
        self.chunking = chunking
        self.default_model = default_model
        self._ids: dict[tuple[str, int | None], str] = {}

    def id_of(self, model: str, dimensions: int | None) -> str:
        key = (model, dimensions)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = IndexGeneration(model, dimensions, self.chunking).id
        return found

    @property
    def default_id(self) -> str:
        """The generation of a tombstone: a delete names no model, so the processor's own."""
        return self.id_of(self.default_model, None)
