"""Every record of the results topic in a registry output_format: plain results, chunks and
final records framed with their own registered schemas, read back by the reference
deserializer and by the store writer (whose loop writes them like JSON ones, and waits out a
registry outage)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from embedstream.engine.formats import framed_outputs
from embedstream.engine.registry import RegistryClient, RegistryConfig
from embedstream.engine.schema_decoders import result_encoder
from embedstream.errors import RegistryUnavailable
from embedstream.settings import load_settings
from embedstream.testing import eventually
from embedstream.testing.registry import TestRegistry
from embedstream.wire import ChunkResult, DocumentComplete, DocumentIncomplete, EmbedResult
from embedstream.wire.formats.output_schemas import CHUNK, END, RECORD_NAMES, output_schema
from embedstream.wire.formats.results import ResultEncoder
from embedstream.wire.registry_frames import parse_frame
from embedstream.wire.result_records import OutputRecord, output_of
from embedstream.wire.vectors import encode_base64

from tests.unit import registry_kit as kit
from tests.unit.test_store_feed import running

GENERATION = "0a1b2c3d"
CHUNK_RECORD = ChunkResult(
    "doc-1", "v2", 1, 3, (10, 24), [0.25, -1.5], "m", 2, 7, True, {"lang": "en"}, 2, 3.25,
    text="second chunk", index_generation=GENERATION,
)  # fmt: skip
COMPLETE = DocumentComplete("doc-1", "v2", 3, {"lang": "en"}, GENERATION)
INCOMPLETE = DocumentIncomplete("doc-1", "v2", 3, (0, 2), None, GENERATION)
PLAIN = EmbedResult("r-1", "m", [0.5, 2.0], 2, 4, None, 1, 1.5, index_generation=GENERATION)


def framed(encoder: ResultEncoder, record: OutputRecord) -> bytes:
    if isinstance(record, ChunkResult):
        return encoder.encode_chunk(record)
    if isinstance(record, DocumentComplete | DocumentIncomplete):
        return encoder.encode_end(record)
    assert isinstance(record, EmbedResult)
    return encoder.encode(record)


def reference_schema(output_format: str, name: str) -> Schema:
    schema_type, text = output_schema(output_format, name)
    return Schema(text, schema_type)


@pytest.fixture
async def registry() -> AsyncIterator[TestRegistry]:
    async with TestRegistry() as server:
        yield server


@pytest.mark.parametrize("output_format", ["avro", "json_schema"])
@pytest.mark.parametrize("record", [CHUNK_RECORD, COMPLETE, INCOMPLETE, PLAIN])
async def test_each_record_is_framed_with_its_schema_and_reads_back_whole(
    registry: TestRegistry, output_format: str, record: OutputRecord
) -> None:
    async with RegistryClient(RegistryConfig(registry.url)) as client:
        encoder = await result_encoder(client, output_format, "embed.results")
        raw = framed(encoder, record)
        settings = load_settings(
            env={},
            overrides={"output_format": output_format, "schema_registry_url": registry.url},
        )
        doc = await framed_outputs(settings, client).decode(raw)
        schema = await client.schema(parse_frame(raw).schema_id)
    assert output_of(record.key if not isinstance(record, EmbedResult) else b"r-1", doc) == record
    name = {ChunkResult: CHUNK, DocumentComplete: END, DocumentIncomplete: END}.get(
        type(record), RECORD_NAMES[0]
    )
    assert schema.schema == output_schema(output_format, name)[1]


def test_a_base64_chunk_is_written_as_floats_for_the_reference_avro_deserializer() -> None:
    client = kit.mock_registry()
    ids = {
        name: client.register_schema(f"{kit.TOPIC}-{name}", reference_schema("avro", name))
        for name in RECORD_NAMES
    }
    chunk = ChunkResult(
        "d", "1", 0, 1, (0, 5), encode_base64([0.25, -1.5]), "m", 2, 3, False, None, 1, 2.0,
    )  # fmt: skip
    read: dict[str, Any] = AvroDeserializer(client)(
        ResultEncoder("avro", ids).encode_chunk(chunk), kit.CONTEXT
    )
    assert read["embedding"] == [0.25, -1.5] and read["type"] == "chunk"
    assert read["span"] == [0, 5] and read["metadata"] is None and read["text"] is None
    assert read["index_generation"] is None  # written before generations
    end = AvroDeserializer(client)(ResultEncoder("avro", ids).encode_end(INCOMPLETE), kit.CONTEXT)
    assert end == {"type": "incomplete", "doc_id": "doc-1", "version": "v2", "chunk_count": 3,
                   "missing": [0, 2], "metadata": None, "index_generation": GENERATION}  # fmt: skip


def test_json_schema_end_records_pass_the_reference_deserializer() -> None:
    client = kit.mock_registry()
    ids = {
        name: client.register_schema(f"{kit.TOPIC}-{name}", reference_schema("json_schema", name))
        for name in RECORD_NAMES
    }
    encoder = ResultEncoder("json_schema", ids)
    read = JSONDeserializer(None, schema_registry_client=client)(
        encoder.encode_end(COMPLETE), kit.CONTEXT
    )
    assert read == {"type": "complete", "doc_id": "doc-1", "version": "v2", "chunk_count": 3,
                    "metadata": {"lang": "en"}, "index_generation": GENERATION}  # fmt: skip


async def test_the_store_writer_writes_framed_documents_like_json_ones(
    registry: TestRegistry,
) -> None:
    async with RegistryClient(RegistryConfig(registry.url)) as client:
        encoder = await result_encoder(client, "avro", "embed.results")
        settings = load_settings(
            env={}, overrides={"output_format": "avro", "schema_registry_url": registry.url}
        )
        vector, meta = [1.0, 2.0, 3.0], {"k": 1}
        chunks = [
            ChunkResult("d", "1", seq, 2, (seq, seq + 1), vector, "m", 3, 1, False, meta, 1, 1.0)
            for seq in range(2)
        ]
        async with running(framed=framed_outputs(settings, client)) as h:
            for chunk in chunks:
                h.publish("d", encoder.encode_chunk(chunk))
            h.publish("d", encoder.encode_end(DocumentComplete("d", "1", 2, None)))
            plain = EmbedResult("r-1", "m", [0.5, 2.0, 1.0], 3, 4, None, 1, 1.5)
            last = h.publish("r-1", encoder.encode(plain))
            h.publish("bad", b"\x00\x00\x00\x00\x63garbage")  # an id the registry never gave
            await eventually(lambda: h.committed() == last + 2)
            assert h.store.rows_of("d") == [("1", 0), ("1", 1)]
            assert h.store.complete == {"d": ("1", 2)} and set(h.store.requests) == {"r-1"}
            assert [d["embedstream.error.reason"] for d in h.dead_letters()] == ["unknown_schema"]


class RegistryOutFirst:
    """A reader of framed values whose registry is out for its first `outages` look-ups."""

    def __init__(self, outages: int) -> None:
        self.outages = outages
        self.calls = 0

    async def decode(self, raw: bytes) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.outages:
            raise RegistryUnavailable("registry_unavailable", "registry: connection refused")
        return {"id": "r-1", "model": "m", "embedding": [1.0, 2.0, 3.0], "dimensions": 3,
                "usage": {"tokens": 1}, "attempts": 1, "latency_ms": 1.0}  # fmt: skip


async def test_a_registry_outage_while_reading_waits_and_commits_nothing_meanwhile() -> None:
    framed = RegistryOutFirst(outages=2)
    async with running(framed=framed) as h:
        last = h.publish("r-1", b"\x00\x00\x00\x00\x01payload")
        await eventually(lambda: h.committed() == last + 1)
        assert [problem for _, problem in h.seen_during_outage] == [
            "registry: connection refused"
        ] * 2  # the feed said why, and nothing was committed while it waited
        assert all(offsets == {} for offsets, _ in h.seen_during_outage)
        assert set(h.store.requests) == {"r-1"} and h.dead_letters() == []
