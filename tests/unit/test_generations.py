"""Index generations: the id names exactly what the vectors depend on, and stays the same."""

from __future__ import annotations

import pytest
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import GenerationIds, IndexGeneration

BASE = IndexGeneration("text-embedding-3-small", None, ChunkingRules(512, 32, 128))


def test_the_id_is_eight_hex_digits_of_the_canonical_json_and_never_changes() -> None:
    assert BASE.canonical() == (
        '{"chunking":{"chunker":1,"max_tokens":512,"min_tokens":128,"overlap_tokens":32},'
        '"dimensions":null,"model":"text-embedding-3-small"}'
    )
    # Pinned: a change here re-names every store's generations (a migration for everyone).
    assert BASE.id == "503918f8"


@pytest.mark.parametrize(
    "other",
    [
        IndexGeneration("text-embedding-3-large", None, ChunkingRules(512, 32, 128)),
        IndexGeneration("text-embedding-3-small", 512, ChunkingRules(512, 32, 128)),
        IndexGeneration("text-embedding-3-small", None, ChunkingRules(256, 32, 128)),
        IndexGeneration("text-embedding-3-small", None, ChunkingRules(512, 0, 128)),
        IndexGeneration("text-embedding-3-small", None, ChunkingRules(512, 32, 64)),
    ],
    ids=["model", "dimensions", "max-tokens", "overlap", "min-tokens"],
)
def test_each_part_changes_the_id(other: IndexGeneration) -> None:
    assert other.id != BASE.id


def test_ids_of_a_processor_follow_the_model_and_dimensions_of_each_record() -> None:
    ids = GenerationIds(ChunkingRules(512, 32, 128), "text-embedding-3-small")
    assert ids.default_id == BASE.id
    assert ids.id_of("text-embedding-3-small", None) == BASE.id
    assert ids.id_of("m2", 64) == IndexGeneration("m2", 64, ChunkingRules(512, 32, 128)).id


def test_described_for_people() -> None:
    assert BASE.describe() == (
        "model 'text-embedding-3-small', its own dimensions, chunks <= 512 tokens "
        "(overlap 32, min 128)"
    )
