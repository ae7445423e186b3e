"""A migration's writes: which generations a version goes to, a version admitted again for
another generation's model and chunking, and the store's rule between the live stream's writes
and the backfill's (pure)."""

from __future__ import annotations

import dataclasses

import pytest
from embedstream.core import configured
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import IndexGeneration
from embedstream.core.intake import AdmittedDocument, Intake, settings_of
from embedstream.core.migration import DualWrites, KeptGeneration, StoreGenerations
from embedstream.core.tokens import estimate_tokens
from embedstream.settings import load_settings
from embedstream.stores.plan import live_first
from embedstream.wire import (
    BACKFILL_HEADER,
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    OutputRecord,
    PlainResult,
    decode_output,
)
from embedstream.wire.document_events import DocumentEvent

SETTINGS = load_settings(env={})
OLD = IndexGeneration("text-embedding-3-small", None, ChunkingRules(512, 32, 128))
NEW = IndexGeneration("text-embedding-3-large", 256, ChunkingRules(64, 0, 16))
OTHER = IndexGeneration("someone-else", None, ChunkingRules(512, 32, 128))


def kept(*generations: IndexGeneration) -> StoreGenerations:
    return StoreGenerations(tuple(KeptGeneration(g, frozenset({g.id})) for g in generations))


def test_a_version_goes_to_every_other_generation_the_store_keeps() -> None:
    store = kept(OLD, NEW)
    assert store.others(OLD.id) == (NEW,)
    assert store.others(NEW.id) == (OLD,)  # after a cutover, the old one stays current
    assert store.others(OTHER.id) == ()  # a model the store does not keep: its own only
    assert kept(OLD).others(OLD.id) == ()  # no migration


def test_the_other_generation_cuts_and_asks_as_its_own_processor_would() -> None:
    limits = configured.provider_limits(SETTINGS)
    writes = DualWrites(lambda g: Intake(settings_of(SETTINGS, g), limits, estimate_tokens))
    writes.follow(kept(OLD, NEW))
    text = " ".join(f"Sentence number {i} of a longer document." for i in range(60))
    event = DocumentEvent(doc_id="d", text=text, model=OLD.model)
    [(generation, admitted)] = writes.versions(OLD.id, event)
    own = Intake(SETTINGS, limits, estimate_tokens).admit_document(event)
    assert isinstance(own, AdmittedDocument)
    assert generation == NEW.id
    assert (admitted.model, admitted.event.dimensions) == (NEW.model, 256)
    assert admitted.version == own.version  # the same version, in both generations
    assert len(admitted.chunks) > len(own.chunks)  # cut by the new generation's rules
    assert writes.deletes(OLD.id) == (NEW.id,)
    writes.follow(kept(NEW))  # the old one dropped: nothing more for it
    assert writes.versions(NEW.id, event) == [] and writes.deletes(NEW.id) == ()


def chunk(doc: str, version: str, *, backfill: bool) -> ChunkResult:
    return ChunkResult(doc, version, 0, 1, (0, 1), [0.5], "m", 1, 1, False, None, 1, 1.0,
                       None, NEW.id, backfill)  # fmt: skip


@pytest.mark.parametrize(
    ("records", "marked_before", "kept_versions", "marks"),
    [
        # The backfill alone writes what it reads.
        ([chunk("a", "v1", backfill=True)], set(), ["v1"], set()),
        # A live version first: the older version the backfill reads later is dropped.
        ([chunk("a", "v2", backfill=False), chunk("a", "v1", backfill=True)], set(),
         ["v2"], {"a"}),
        # Marked in an earlier batch: still dropped.
        ([chunk("a", "v1", backfill=True)], {"a"}, [], set()),
        # The backfill first, then the live stream: both kept (the live one comes after).
        ([chunk("a", "v1", backfill=True), chunk("a", "v2", backfill=False)], set(),
         ["v1", "v2"], {"a"}),
        # Other documents are not affected.
        ([chunk("a", "v2", backfill=False), chunk("b", "v1", backfill=True)], set(),
         ["v2", "v1"], {"a"}),
    ],
)  # fmt: skip
def test_the_live_stream_wins_over_the_backfill(
    records: list[ChunkResult], marked_before: set[str], kept_versions: list[str], marks: set[str]
) -> None:
    kept_records, new_marks = live_first(records, marked_before)
    assert [r.version for r in kept_records if isinstance(r, ChunkResult)] == kept_versions
    assert new_marks == marks


def test_a_live_delete_keeps_its_mark_so_the_backfill_brings_nothing_back() -> None:
    deleted = DocumentDeleted("a", NEW.id)
    late: list[OutputRecord] = [
        chunk("a", "v1", backfill=True),
        DocumentComplete("a", "v1", 1, None, NEW.id, backfill=True),
    ]
    kept_records, marks = live_first([deleted, *late], set())
    assert kept_records == [deleted] and marks == {"a"}
    # A backfill tombstone of a document the live stream wrote since is dropped too.
    backfill_delete = dataclasses.replace(deleted, backfill=True)
    assert live_first([backfill_delete], {"a"}) == ([], set())
    plain = PlainResult("r", "m", [0.5], 1, 1, None, 1, 1.0, False, NEW.id)
    assert live_first([plain], {"r"}) == ([plain], set())


def test_the_backfill_header_reaches_the_store_on_every_document_record() -> None:
    flagged = [(BACKFILL_HEADER, b"1")]
    record = chunk("a", "v1", backfill=False)
    assert decode_output(record.key, record.encode(), flagged) == dataclasses.replace(
        record, backfill=True
    )
    assert decode_output(record.key, record.encode(), []) == record
    tombstone = decode_output(b"a", None, [*DocumentDeleted("a", NEW.id).headers(), *flagged])
    assert tombstone == DocumentDeleted("a", NEW.id, backfill=True)
