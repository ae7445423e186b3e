"""A store's index generations and which one a record belongs to. Pure.

A store keeps one table set per generation (``embedstream.core.generations``) and knows each
by a row of its registry: the generation itself, the vector size of its tables (None until the
first vector, when no dimensions were asked) and its state:

| state | what it is | searchers see it |
|---|---|---|
| ``active`` | the generation the stable names point at | yes |
| ``new`` | being filled for a cutover (`embedstream migrate start`) | no |
| ``old`` | the one before the last cutover, kept for a rollback | no |

At most one of each. A record goes to the generation its ``index_generation`` names. The same
model and chunking asked for no dimensions or for exactly the table's size give the same
vectors, so a generation also answers to the id of the other way of asking (its *alias*) when
no generation has that id itself. A record without an id (written before generations) goes to
the active generation, checked by model and size as tables were before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import CHUNKER_REVISION, IndexGeneration
from embedstream.errors import Reason

State = Literal["active", "new", "old"]
STATES: tuple[State, ...] = ("active", "new", "old")


@dataclass(frozen=True, slots=True)
class StoredGeneration:
    id: str  # as the registry has it (the generation's id when it was made)
    generation: IndexGeneration
    size: int | None  # the vector size of its tables; None: no vector yet (no tables yet)
    state: State
    plan: dict[str, Any] | None = None  # the re-embed plan's figures when it was started

    @property
    def model(self) -> str:
        return self.generation.model

    @property
    def alias(self) -> str | None:
        """The id of the same vectors asked for the other way (see the module docstring)."""
        g = self.generation
        if g.dimensions is not None:
            return IndexGeneration(g.model, None, g.chunking).id
        if self.size is not None:
            return IndexGeneration(g.model, self.size, g.chunking).id
        return None

    @property
    def said(self) -> str:
        """The generation for people, its size included once known."""
        return self.generation.describe(self.size)

    def describe(self) -> str:
        return f"{self.id} [{self.state}]: {self.said}"

    def sized(self, size: int) -> StoredGeneration:
        return replace(self, size=size)


def chunking_json(rules: ChunkingRules) -> dict[str, int]:
    return {
        "chunker": CHUNKER_REVISION,
        "max_tokens": rules.max_tokens,
        "overlap_tokens": rules.overlap_tokens,
        "min_tokens": rules.min_tokens,
    }


def chunking_from_json(doc: dict[str, int]) -> ChunkingRules:
    return ChunkingRules(doc["max_tokens"], doc["overlap_tokens"], doc["min_tokens"])


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str
    message: str


class Registry:
    """The generations of one store as read in one transaction, and the rules between them."""

    def __init__(self, generations: Sequence[StoredGeneration]) -> None:
        self.generations = list(generations)
        self._by_id = {g.id: g for g in self.generations}

    def __bool__(self) -> bool:
        return bool(self.generations)

    def in_state(self, state: State) -> StoredGeneration | None:
        return next((g for g in self.generations if g.state == state), None)

    @property
    def active(self) -> StoredGeneration | None:
        return self.in_state("active")

    def get(self, generation_id: str) -> StoredGeneration | None:
        return self._by_id.get(generation_id)

    def size(self, generation: StoredGeneration, size: int) -> StoredGeneration:
        """``generation`` with the size its first vector gives (for the rest of the batch)."""
        sized = generation.sized(size)
        self.generations = [sized if g.id == sized.id else g for g in self.generations]
        self._by_id[sized.id] = sized
        return sized

    def resolve(
        self, generation_id: str | None, model: str | None, size: int | None
    ) -> StoredGeneration | Refused:
        """The generation of a record (``model`` and ``size`` of its vector, None for a final
        record or a tombstone), or why it has none here."""
        if generation_id is None:
            found = self.active
            if found is None:
                return Refused(Reason.UNKNOWN_GENERATION, "the store has no active generation")
        else:
            found = self._by_id.get(generation_id) or self._by_alias(generation_id, model, size)
            if found is None:
                return Refused(Reason.UNKNOWN_GENERATION, self._unknown(generation_id, model))
        if model is not None and model != found.model:
            return Refused(
                Reason.MODEL_MISMATCH,
                f"model {model!r}, but generation {found.id} holds {found.model!r} vectors",
            )
        if size is not None and found.size is not None and size != found.size:
            return Refused(
                Reason.DIMENSION_MISMATCH,
                f"{size} dimensions, generation {found.id} holds {found.size}",
            )
        return found

    def _by_alias(
        self, generation_id: str, model: str | None, size: int | None
    ) -> StoredGeneration | None:
        for g in self.generations:
            if g.alias == generation_id:
                return g
            unsized = g.size is None and g.generation.dimensions is None
            # Its first vector: asked for exactly that size, it is the same generation.
            if (
                unsized
                and size is not None
                and model == g.model
                and IndexGeneration(g.model, size, g.generation.chunking).id == generation_id
            ):
                return g
        return None

    def _unknown(self, generation_id: str, model: str | None) -> str:
        known = "; ".join(g.describe() for g in self.generations) or "none"
        of = f" (model {model!r})" if model else ""
        return (
            f"index generation {generation_id}{of} is not one of this store's: {known}. "
            "A processor with other model or chunk settings than the store? "
            "(`embedstream migrate start` adds a generation)"
        )
