"""Documents through the Kafka shell, on the in-memory cluster: chunk results keyed by doc_id,
then one final record per version; tombstones; poison chunks; retries of one chunk only;
ordering of versions; offsets committed only after the final record."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import IndexGeneration
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import PermanentItemError, Reason, TransientError
from embedstream.testing import eventually, vector_for
from embedstream.testing.backends import texts_of
from embedstream.testing.kafka import FakeRecord
from embedstream.wire import (
    DOC_CHUNK_SEQ,
    DOC_ID,
    DOC_VERSION,
    INDEX_GENERATION_HEADER,
    decode_output,
    headers_dict,
)
from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    PlainResult,
)

from tests.unit.harness import LOW, NAMES, GatedBackend, Harness, item_bound, running

# Small chunks, so a few short paragraphs make several chunks.
SMALL: dict[str, Any] = {"chunk_max_tokens": 40, "chunk_overlap_tokens": 0, "chunk_min_tokens": 0}
# The index generation of SMALL's outputs with the default model, asking no dimensions.
DEFAULT_MODEL = "text-embedding-3-small"
SMALL_GENERATION = IndexGeneration(DEFAULT_MODEL, None, ChunkingRules(40, 0, 0)).id


def paragraphs(*words: str) -> str:
    """One paragraph per word, each about 25 estimated tokens: one chunk each at SMALL."""
    return "\n\n".join(f"{w:_<5} " * 12 for w in words)


def publish(
    h: Harness, doc_id: str, text: str | None, tp: TopicPartition = LOW, **fields: Any
) -> int:
    value = None if text is None else orjson.dumps({"doc_id": doc_id, "text": text, **fields})
    return h.cluster.produce(tp.topic, value, doc_id.encode(), [], partition=tp.partition).offset


def outputs(h: Harness, doc_id: str | None = None) -> list[Any]:
    found = [decode_output(r.key, r.value, r.headers) for r in h.results()]
    return [o for o in found if doc_id is None or getattr(o, "doc_id", None) == doc_id]


def dead_letters(h: Harness) -> list[FakeRecord]:
    return h.cluster.records(NAMES.dead_letters)


@pytest.mark.parametrize(
    ("text", "chunks"),
    [(paragraphs("alpha", "beta", "gamma"), 3), ("one short line", 1), ("", 0), ("  \n\n ", 0)],
)
async def test_a_document_gives_its_chunks_then_complete_and_commits_after(
    text: str, chunks: int
) -> None:
    async with running(GatedBackend(), **SMALL) as h:
        offset = publish(h, "d1", text, version=7, metadata={"src": "wiki"})
        await eventually(lambda: h.committed(LOW) == offset + 1)
        out = outputs(h, "d1")
        assert [type(o) for o in out] == [ChunkResult] * chunks + [DocumentComplete]
        assert [o.chunk_seq for o in out[:-1]] == list(range(chunks))
        assert all(o.version == "7" and o.chunk_count == chunks for o in out[:-1])
        assert all(o.metadata == {"src": "wiki"} for o in out)
        assert all(o.text is None for o in out[:-1])  # include_chunk_text is off
        for o in out[:-1]:
            start, end = o.span
            assert o.embedding == pytest.approx(vector_for(text[start:end]))
        assert out[-1] == DocumentComplete("d1", "7", chunks, {"src": "wiki"}, SMALL_GENERATION)
        assert all(o.index_generation == SMALL_GENERATION for o in out)
        assert all(r.key == b"d1" for r in h.results())


async def test_every_output_names_the_index_generation_of_its_model_dimensions_and_chunking() -> (
    None
):
    async with running(GatedBackend(), **SMALL) as h:
        publish(h, "own", "a document of the default model")
        publish(h, "sized", "a document asking for 4 dimensions", dimensions=4)
        publish(h, "other", "a document naming its model", model="m2")
        h.request(LOW, "r1", "a plain text")
        offset = publish(h, "own", None)
        await eventually(lambda: h.committed(LOW) == offset + 1)
        by_doc = {doc: {o.index_generation for o in outputs(h, doc)} for doc in ("sized", "other")}
        assert by_doc == {
            "sized": {IndexGeneration(DEFAULT_MODEL, 4, ChunkingRules(40, 0, 0)).id},
            "other": {IndexGeneration("m2", None, ChunkingRules(40, 0, 0)).id},
        }
        assert {o.index_generation for o in outputs(h, "own")} == {SMALL_GENERATION}
        [plain] = [o for o in outputs(h) if isinstance(o, PlainResult)]
        assert plain.index_generation == SMALL_GENERATION
        # A tombstone's value is null: its generation (the processor's own) is in a header.
        assert isinstance(outputs(h, "own")[-1], DocumentDeleted)
        tombstone = h.results()[-1]
        assert headers_dict(tombstone.headers)[INDEX_GENERATION_HEADER] == SMALL_GENERATION


async def test_without_a_version_the_digest_of_the_text_names_it_and_text_is_included() -> None:
    async with running(GatedBackend(), include_chunk_text=True, **SMALL) as h:
        publish(h, "d", paragraphs("alpha", "beta"))
        publish(h, "e", paragraphs("alpha", "beta"))
        await eventually(lambda: len(outputs(h)) == 6)
        versions = {o.version for o in outputs(h)}
        assert len(versions) == 1 and len(versions.pop()) == 16  # same text: same version
        chunk = outputs(h, "d")[0]
        assert chunk.text == "alpha " * 11 + "alpha"


async def test_the_final_record_waits_for_every_chunk() -> None:
    backend = GatedBackend()
    async with running(backend, **SMALL) as h:
        offset = publish(h, "d", paragraphs("fast", "SLOW", "also"))
        await eventually(lambda: len(outputs(h, "d")) == 2)
        await h.service.processor.parts.outcomes.flush()  # every write started so far is done
        assert not any(isinstance(o, DocumentComplete) for o in outputs(h, "d"))
        assert h.committed(LOW) <= offset
        backend.gate.set()
        await eventually(lambda: h.committed(LOW) == offset + 1)
        assert isinstance(outputs(h, "d")[-1], DocumentComplete)


class PoisonBackend:
    """Rejects any batch holding 'poison' (400 naming no item); fails 'flaky' twice."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.flaky_failures = 0

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls.append(texts_of(call))
        if any("poison" in t for t in call.texts):
            raise PermanentItemError(Reason.REJECTED, "provider rejected the input (400)")
        if any("flaky" in t for t in call.texts) and self.flaky_failures < 2:
            self.flaky_failures += 1
            raise TransientError(Reason.MALFORMED_RESPONSE, "no JSON")  # costs an attempt
        return BatchOutcome([vector_for(t) for t in call.texts], 2, len(call.texts), 0.0)

    async def close(self) -> None:
        return None


async def test_a_poison_chunk_is_dead_lettered_by_name_and_the_document_ends_incomplete() -> None:
    async with running(PoisonBackend(), **SMALL) as h:
        offset = publish(h, "d", paragraphs("good", "poison", "fine"), version="v1")
        await eventually(lambda: h.committed(LOW) == offset + 1)
        out = outputs(h, "d")
        assert [o.chunk_seq for o in out if isinstance(o, ChunkResult)] == [0, 2]
        assert out[-1] == DocumentIncomplete("d", "v1", 3, (1,), None, SMALL_GENERATION)
        [letter] = dead_letters(h)
        headers = headers_dict(letter.headers)
        assert (headers[DOC_ID], headers[DOC_VERSION], headers[DOC_CHUNK_SEQ]) == ("d", "v1", "1")
        assert letter.key == b"d"
        assert "poison" in orjson.loads(letter.value or b"")["text"]


async def test_a_flaky_chunk_is_retried_alone_in_memory_never_via_the_retry_topic() -> None:
    backend = PoisonBackend()
    async with running(backend, retry_backoff_base_ms=1, max_attempts=5, **SMALL) as h:
        offset = publish(h, "d", paragraphs("steady", "flaky", "calm"))
        await eventually(lambda: h.committed(LOW) == offset + 1)
        assert isinstance(outputs(h, "d")[-1], DocumentComplete)
        assert h.cluster.records(NAMES.retry) == []
        sent = [text for call in backend.calls for text in call]
        assert sum("steady" in t for t in sent) == 1  # its sibling's retries never resend it
        assert sum("flaky" in t for t in sent) == 3
        [flaky] = [o for o in outputs(h, "d") if isinstance(o, ChunkResult) and o.chunk_seq == 1]
        assert flaky.attempts == 3


async def test_a_tombstone_gives_a_tombstone_after_the_versions_before_it() -> None:
    backend = GatedBackend()
    async with running(backend, **SMALL) as h:
        publish(h, "d", paragraphs("SLOW", "x"), version=1)
        publish(h, "d", paragraphs("y"), version=2)
        last = publish(h, "d", None)
        await eventually(lambda: any("SLOW" in t for _, texts in backend.calls for t in texts))
        await h.service.processor.parts.outcomes.flush()
        assert all(r.key != b"d" or r.value is not None for r in h.results())
        backend.gate.set()
        await eventually(lambda: h.committed(LOW) == last + 1)
        kinds = [(type(o).__name__, getattr(o, "version", None)) for o in outputs(h, "d")]
        assert kinds == [
            ("ChunkResult", "1"), ("ChunkResult", "1"), ("DocumentComplete", "1"),
            ("ChunkResult", "2"), ("DocumentComplete", "2"), ("DocumentDeleted", None),
        ]  # fmt: skip
        assert h.results()[-1].value is None


async def test_other_documents_do_not_wait_behind_a_slow_one() -> None:
    backend = GatedBackend()
    async with running(backend, **SMALL) as h:
        publish(h, "slow", paragraphs("SLOW"))
        publish(h, "quick", paragraphs("q"))
        await eventually(lambda: any(isinstance(o, DocumentComplete) for o in outputs(h, "quick")))
        assert not outputs(h, "slow")
        backend.gate.set()
        await eventually(lambda: len(outputs(h, "slow")) == 2)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"doc_id": "", "text": "x"}, "invalid_doc_id"),
        ({"doc_id": "d", "text": 5}, "invalid_text"),
        ({"doc_id": "d", "text": "x", "version": True}, "invalid_version"),
        ({"doc_id": "d", "text": paragraphs(*(f"w{i}" for i in range(8)))}, "too_many_chunks"),
    ],
)
async def test_a_bad_document_is_dead_lettered_with_its_reason(
    fields: dict[str, Any], reason: str
) -> None:
    async with running(GatedBackend(), max_document_chunks=4, **SMALL) as h:
        h.cluster.produce(LOW.topic, orjson.dumps(fields), b"d", [], partition=0)
        offset = publish(h, "ok", "fine")
        await eventually(lambda: h.committed(LOW) == offset + 1)
        [letter] = dead_letters(h)
        assert headers_dict(letter.headers)["embedstream.error.reason"] == reason
        assert isinstance(outputs(h, "ok")[-1], DocumentComplete)


async def test_plain_requests_and_documents_share_a_topic() -> None:
    async with running(GatedBackend(), **SMALL) as h:
        h.request(LOW, "r1", "a plain text")
        offset = publish(h, "d", "a document")
        await eventually(lambda: h.committed(LOW) == offset + 1)
        kinds = sorted(type(o).__name__ for o in outputs(h))
        assert kinds == ["ChunkResult", "DocumentComplete", "EmbedResult"]


async def test_backpressure_counts_a_documents_chunks() -> None:
    backend = GatedBackend()
    async with running(backend, **item_bound(10), max_batch_size=8, **SMALL) as h:
        publish(h, "big", paragraphs(*(f"SLOW{i}" for i in range(12))))
        await eventually(lambda: h.service.processor.held >= 12)
        await eventually(lambda: h.service.processor.paused_count() >= 1)
        backend.gate.set()
        await eventually(lambda: h.service.processor.held == 0)
