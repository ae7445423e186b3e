"""Which of a store's generations a record goes to (stores/generations.py): by its id, by the
other way of asking for the same vectors, the active one for a record without an id, and a
reason for every record that goes nowhere."""

from __future__ import annotations

import pytest
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import IndexGeneration
from embedstream.errors import Reason
from embedstream.stores.generations import Refused, Registry, StoredGeneration

RULES = ChunkingRules(512, 32, 128)
OWN = IndexGeneration("small", None, RULES)  # asks for the model's own size (1536)
ASKED = IndexGeneration("large", 1024, RULES)  # asks for 1024
LAZY = IndexGeneration("lazy", None, RULES)  # no vector yet

REGISTRY = Registry(
    [
        StoredGeneration(OWN.id, OWN, 1536, "active"),
        StoredGeneration(ASKED.id, ASKED, 1024, "new"),
        StoredGeneration(LAZY.id, LAZY, None, "old"),
    ]
)


def resolved(generation_id: str | None, model: str | None, size: int | None) -> str:
    found = REGISTRY.resolve(generation_id, model, size)
    return found.reason if isinstance(found, Refused) else found.id


@pytest.mark.parametrize(
    ("generation_id", "model", "size", "expected"),
    [
        (OWN.id, "small", 1536, OWN.id),
        (OWN.id, None, None, OWN.id),  # a final record or a tombstone
        (ASKED.id, "large", 1024, ASKED.id),
        # The same vectors asked for the other way: the model's own size asked by number...
        (IndexGeneration("small", 1536, RULES).id, "small", 1536, OWN.id),
        # ... and a model whose own size is 1024 asked for nothing.
        (IndexGeneration("large", None, RULES).id, "large", 1024, ASKED.id),
        # Asked for nothing, the model's own size is not the generation's: refused by size.
        (IndexGeneration("large", None, RULES).id, "large", 3072, Reason.DIMENSION_MISMATCH),
        # No vector yet: its first one, asked for its size by number, is the same generation.
        (IndexGeneration("lazy", 8, RULES).id, "lazy", 8, LAZY.id),
        (IndexGeneration("lazy", 8, RULES).id, "lazy", 9, Reason.UNKNOWN_GENERATION),
        # Written before generations: the active one, checked as tables were.
        (None, "small", 1536, OWN.id),
        (None, None, None, OWN.id),
        (None, "other", 1536, Reason.MODEL_MISMATCH),
        (None, "small", 8, Reason.DIMENSION_MISMATCH),
        # Another chunking is another generation.
        (IndexGeneration("small", None, ChunkingRules(256, 32, 128)).id, "small", 1536,
         Reason.UNKNOWN_GENERATION),
        ("0badc0de", None, None, Reason.UNKNOWN_GENERATION),
        (OWN.id, "forged", 1536, Reason.MODEL_MISMATCH),
    ],
)  # fmt: skip
def test_a_record_goes_to_its_generation_or_gets_a_reason(
    generation_id: str | None, model: str | None, size: int | None, expected: str
) -> None:
    assert resolved(generation_id, model, size) == expected


def test_an_unknown_generation_is_refused_naming_the_stores() -> None:
    found = REGISTRY.resolve("0badc0de", "x", 3)
    assert isinstance(found, Refused)
    assert "index generation 0badc0de (model 'x') is not one of this store's" in found.message
    assert f"{OWN.id} [active]: model 'small', its own dimensions (1536)" in found.message
    assert "migrate start" in found.message


def test_a_store_without_an_active_generation_refuses_records_without_an_id() -> None:
    found = Registry([]).resolve(None, "small", 3)
    assert isinstance(found, Refused) and found.reason == Reason.UNKNOWN_GENERATION


def test_a_generation_sized_by_its_first_vector_holds_that_size_for_the_batch() -> None:
    registry = Registry([StoredGeneration(LAZY.id, LAZY, None, "active")])
    first = registry.resolve(LAZY.id, "lazy", 8)
    assert isinstance(first, StoredGeneration)
    registry.size(first, 8)
    later = registry.resolve(LAZY.id, "lazy", 9)
    assert isinstance(later, Refused) and later.reason == Reason.DIMENSION_MISMATCH
