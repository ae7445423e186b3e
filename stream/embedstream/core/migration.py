"""What the processors follow of a store's migration: the index generations the store writes,
the one being filled, and every document version written for each of them. Pure.

While a store keeps two generations (a new one being filled, or the old one kept after a
cutover for a rollback), every document version and delete the live stream brings is written
for both (*dual-write*): the processor cuts and embeds the version once per generation, in the
lane the version came in, so neither falls behind. A version of a generation the store does
not keep (another model asked by name) is written for its own generation only, as before.

The new generation is also filled from the documents topic in the backfill lane
(`kafka/backfill/feed.py`). Which write wins when both reach the store is the store's rule: a
backfill record never overwrites a document the live stream wrote to that generation since it
was started, nor brings back one it deleted (the store keeps a mark per such document until
the cutover; `stores/plan.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from embedstream.core.generations import IndexGeneration
from embedstream.core.intake import AdmittedDocument, Intake, Rejected
from embedstream.wire.document_events import DocumentEvent


@dataclass(frozen=True, slots=True)
class KeptGeneration:
    """A generation the store writes, and every id it answers to (its own and its alias)."""

    generation: IndexGeneration
    ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class StoreGenerations:
    """The store's generations as its registry says now (empty: no store, or no registry)."""

    kept: tuple[KeptGeneration, ...] = ()
    filling: IndexGeneration | None = None  # the `new` one: the backfill fills it
    # The plan's figures of the one being filled, when `migrate start` made it.
    planned: dict[str, int] = field(default_factory=dict, compare=False)
    # How its backfill embeds (`migrate start --via`): "sync" calls or "batch" jobs.
    via: str = "sync"

    def others(self, generation_id: str) -> tuple[IndexGeneration, ...]:
        """The generations a version of ``generation_id`` is written for besides its own:
        the store's other ones, if it keeps ``generation_id`` (else none)."""
        if not any(generation_id in k.ids for k in self.kept):
            return ()
        return tuple(k.generation for k in self.kept if generation_id not in k.ids)


class DualWrites:
    """A document version (or a delete) for every generation the store keeps: the versions
    of the others admitted as a processor of each would admit them."""

    def __init__(self, intake_for: Callable[[IndexGeneration], Intake]) -> None:
        self._intake_for = intake_for
        self._intakes: dict[str, Intake] = {}
        self.generations = StoreGenerations()

    def follow(self, generations: StoreGenerations) -> None:
        """The store's generations changed (started, cut over, dropped...): from the next
        version admitted on."""
        self.generations = generations
        wanted = {k.generation.id for k in generations.kept}
        self._intakes = {g: i for g, i in self._intakes.items() if g in wanted}

    def intake(self, generation: IndexGeneration) -> Intake:
        found = self._intakes.get(generation.id)
        if found is None:
            found = self._intakes[generation.id] = self._intake_for(generation)
        return found

    def versions(
        self, generation_id: str, event: DocumentEvent
    ) -> list[tuple[str, AdmittedDocument]]:
        """``event`` (a version admitted for ``generation_id``) as each other generation's
        version: the generation's id and its admitted document. A generation that refuses it
        (more chunks than max_document_chunks with smaller chunks, a model not allowed) goes
        without it: its status then lacks the document."""
        found = []
        for generation in self.generations.others(generation_id):
            asked = dataclasses.replace(
                event, model=generation.model, dimensions=generation.dimensions
            )
            admitted = self.intake(generation).admit_document(asked)
            if not isinstance(admitted, Rejected):
                found.append((generation.id, admitted))
        return found

    def deletes(self, generation_id: str) -> tuple[str, ...]:
        """The generations a delete of ``generation_id`` (the processor's own) also goes to."""
        return tuple(g.id for g in self.generations.others(generation_id))
