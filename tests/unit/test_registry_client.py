"""The registry client and the per-id decoders over real HTTP, against the test registry."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import fastavro
import pytest
from embedstream.engine.registry import RegistryClient, RegistryConfig, RegistryRejected
from embedstream.engine.schema_decoders import SchemaDecoders, result_encoder
from embedstream.errors import InvalidEvent, Reason, RegistryUnavailable
from embedstream.testing.registry import TestRegistry
from embedstream.wire import EmbedResult
from embedstream.wire.field_mapping import FieldMapping
from embedstream.wire.formats.output_schemas import RECORD_NAMES, RESULT, output_schema
from embedstream.wire.registry_frames import parse_frame

from tests.unit import registry_kit as kit

AVRO_V1 = json.dumps(kit.AVRO_V1)


@pytest.fixture
async def registry() -> AsyncIterator[TestRegistry]:
    async with TestRegistry(prefix="/apis/ccompat/v7") as server:
        yield server


def client_for(registry: TestRegistry, **options: object) -> RegistryClient:
    return RegistryClient(RegistryConfig(registry.url, **options))  # type: ignore[arg-type]


async def test_schema_by_id_is_fetched_once(registry: TestRegistry) -> None:
    schema_id = registry.register("t-value", AVRO_V1)
    async with client_for(registry) as client:
        first = await client.schema(schema_id)
        again = await client.schema(schema_id)
    assert first is again and first.schema_type == "AVRO" and first.schema == AVRO_V1
    assert registry.paths == [f"GET /apis/ccompat/v7/schemas/ids/{schema_id}"]


async def test_concurrent_misses_are_one_request(registry: TestRegistry) -> None:
    schema_id = registry.register("t-value", kit.PROTO, "PROTOBUF")
    registry.delay_s = 0.05
    async with client_for(registry) as client:
        found = await asyncio.gather(*(client.schema(schema_id) for _ in range(20)))
    assert {item.schema_type for item in found} == {"PROTOBUF"}
    assert client.requests == 1 and len(registry.paths) == 1


async def test_references_are_resolved(registry: TestRegistry) -> None:
    body = json.dumps(
        {
            "type": "record",
            "name": "Body",
            "namespace": "x",
            "fields": [{"name": "content", "type": "string"}],
        }
    )
    registry.register("body-value", body)
    outer = json.dumps(
        {
            "type": "record",
            "name": "Outer",
            "namespace": "x",
            "fields": [{"name": "id", "type": "string"}, {"name": "b", "type": "x.Body"}],
        }
    )
    reference = {"name": "x.Body", "subject": "body-value", "version": 1}
    outer_id = registry.register("t-value", outer, references=(reference,))
    async with client_for(registry) as client:
        schema = await client.schema(outer_id)
        decoders = SchemaDecoders(client, "avro", FieldMapping(text_field="b.content"))
        import io

        import fastavro

        stream = io.BytesIO()
        fastavro.schemaless_writer(
            stream,
            fastavro.parse_schema(json.loads(outer), named_schemas=_named(body)),
            {"id": "a", "b": {"content": "t"}},
        )
        raw = b"\x00" + outer_id.to_bytes(4, "big") + stream.getvalue()
        mapped = await decoders.decode(raw)
    assert [ref.name for ref in schema.references] == ["x.Body"]
    assert mapped.fields == {"id": "a", "text": "t"}


def _named(text: str) -> dict[str, dict[str, Any]]:
    named: dict[str, dict[str, Any]] = {}
    fastavro.parse_schema(json.loads(text), named_schemas=named)
    return named


async def test_unknown_id_is_the_records_fault_and_believed_for_a_while(
    registry: TestRegistry,
) -> None:
    async with client_for(registry) as client:
        for _ in range(3):
            with pytest.raises(InvalidEvent) as caught:
                await client.schema(404)
            assert caught.value.reason == Reason.UNKNOWN_SCHEMA
    assert len(registry.paths) == 1  # a flood of bad ids does not flood the registry


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (503, Reason.REGISTRY_ERROR),
        (500, Reason.REGISTRY_ERROR),
        (429, Reason.REGISTRY_ERROR),
        (401, Reason.REGISTRY_AUTH),
        (403, Reason.REGISTRY_AUTH),
    ],
)
async def test_failing_registry_is_an_outage(
    registry: TestRegistry, status: int, reason: str
) -> None:
    schema_id = registry.register("t-value", AVRO_V1)
    registry.answer_status = status
    async with client_for(registry) as client:
        with pytest.raises(RegistryUnavailable) as caught:
            await client.schema(schema_id)
        assert caught.value.reason == reason and caught.value.retriable
        registry.answer_status = None  # recovered: the same id works, nothing was cached
        assert (await client.schema(schema_id)).schema == AVRO_V1


async def test_refused_connection_and_timeout_are_outages(registry: TestRegistry) -> None:
    schema_id = registry.register("t-value", AVRO_V1)
    async with client_for(registry, timeout_s=0.2) as client:
        await registry.refuse()
        with pytest.raises(RegistryUnavailable) as refused:
            await client.schema(schema_id)
        assert refused.value.reason == Reason.REGISTRY_UNREACHABLE
        await registry.listen()
        registry.delay_s = 1.0
        with pytest.raises(RegistryUnavailable) as slow:
            await client.schema(schema_id)
        assert slow.value.reason == Reason.REGISTRY_TIMEOUT
        registry.delay_s = 0
        assert (await client.schema(schema_id)).schema == AVRO_V1


async def test_basic_auth_from_the_url_and_never_shown(registry: TestRegistry) -> None:
    registry.authorization = "Basic " + base64.b64encode(b"svc:s3cret").decode()
    schema_id = registry.register("t-value", AVRO_V1)
    url = registry.url.replace("http://", "http://svc:s3cret@")
    async with RegistryClient(RegistryConfig(url)) as client:
        assert (await client.schema(schema_id)).schema == AVRO_V1
        registry.authorization = "Basic other"
        with pytest.raises(RegistryUnavailable) as caught:
            await client.schema(schema_id + 1)
    assert "s3cret" not in str(caught.value) and "s3cret" not in client.base_url
    assert "s3cret" not in repr(RegistryConfig(url, password="s3cret"))
    assert "tok-9" not in repr(RegistryConfig(registry.url, bearer_token="tok-9"))


async def test_bearer_token_is_sent(registry: TestRegistry) -> None:
    registry.authorization = "Bearer tok-1"
    schema_id = registry.register("t-value", AVRO_V1)
    async with client_for(registry, bearer_token="tok-1") as client:
        await client.schema(schema_id)
    assert registry.authorizations == ["Bearer tok-1"]


async def test_each_record_shape_is_registered_under_its_topic_record_name_subject(
    registry: TestRegistry,
) -> None:
    async with client_for(registry) as client:
        encoder = await result_encoder(client, "avro", "embed.results")
        again = await result_encoder(client, "avro", "embed.results")
        fetched = await client.schema(parse_frame(encoder.encode(kit_result())).schema_id)
    assert fetched.schema == output_schema("avro", RESULT)[1]
    assert parse_frame(again.encode(kit_result())).schema_id == fetched.schema_id
    assert registry.paths[:3] == [
        f"POST /apis/ccompat/v7/subjects/embed.results-{name}/versions" for name in RECORD_NAMES
    ]
    assert RECORD_NAMES == (
        "io.embedstream.EmbeddingResult",
        "io.embedstream.EmbeddingChunk",
        "io.embedstream.DocumentEnd",
    )


async def test_a_refused_registration_is_not_an_outage(registry: TestRegistry) -> None:
    registry.answer_status = 409
    async with client_for(registry) as client:
        with pytest.raises(RegistryRejected):
            await client.register("embed.results-value", "JSON", "{}")


async def test_evolution_and_bad_ids_through_the_decoders(registry: TestRegistry) -> None:
    """v1 and v2 interleaved through one SchemaDecoders, bytes from the reference serializer,
    schemas served over HTTP; a schema of another format and an unknown id are per record."""
    mock = kit.mock_registry()
    v1 = kit.avro_bytes(mock, kit.AVRO_V1, {**kit_article(), "event_id": 1})
    v2 = kit.avro_bytes(mock, kit.AVRO_V2, {**kit_article(), "event_id": 2, "lang": "de"})
    for raw in (v1, v2):  # the same ids in the test registry as in the mock one
        schema = kit.registry_schema(mock, parse_frame(raw).schema_id)
        assert registry.register("t-value", schema.schema) == schema.schema_id
    json_id = registry.register("other-value", json.dumps(kit.JSON_SCHEMA), "JSON")
    mapping = FieldMapping(id_field="event_id", text_field="body.content")
    async with client_for(registry) as client:
        decoders = SchemaDecoders(client, "avro", mapping, reader_schema=json.dumps(kit.AVRO_V2))
        ids = [(await decoders.decode(raw)).fields["id"] for raw in (v1, v2, v1, v2)]
        for raw, reason in [
            (b"\x00" + (99).to_bytes(4, "big") + b"x", Reason.UNKNOWN_SCHEMA),
            (b"\x00" + json_id.to_bytes(4, "big") + b"{}", Reason.WRONG_SCHEMA_TYPE),
            (b"\x00" + json_id.to_bytes(4, "big") + b"{}", Reason.WRONG_SCHEMA_TYPE),
        ]:
            with pytest.raises(InvalidEvent) as caught:
                await decoders.decode(raw)
            assert caught.value.reason == reason
    assert ids == ["1", "2", "1", "2"]
    assert client.requests == 4  # v1, v2, the unknown id, the JSON schema: each once


def kit_article() -> dict[str, object]:
    return {"event_id": 0, "body": {"content": "text"}, "tags": {}}


def kit_result() -> EmbedResult:
    return EmbedResult("r", "m", [0.5], 1, 1, None, 1, 1.0)
