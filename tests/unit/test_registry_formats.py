"""The registry wire format, the format decoders and the field mapping, checked against bytes
the reference serializers wrote."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import jsonschema
import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer
from embedstream.errors import InvalidEvent, Reason
from embedstream.wire import EmbedRequest, EmbedResult, request_from_doc
from embedstream.wire.field_mapping import FieldMapping, MappedEvent, map_fields
from embedstream.wire.formats import RegistrySchema, build_decoder
from embedstream.wire.formats.output_schemas import JSON_SCHEMA, RECORD_NAMES, RESULT, output_schema
from embedstream.wire.formats.results import ResultEncoder
from embedstream.wire.registry_frames import (
    Frame,
    encode_message_indexes,
    parse_frame,
    parse_message_indexes,
    write_frame,
)
from embedstream.wire.vectors import encode_base64

from tests.unit import registry_kit as kit

ARTICLE = {"event_id": 7, "body": {"content": "a typical request text"}, "tags": {"k": "v"}}
MAPPING = FieldMapping(id_field="event_id", text_field="body.content")


def avro_decoder(client: Any, raw: bytes, reader: dict[str, Any] | None = None) -> Any:
    schema = kit.registry_schema(client, parse_frame(raw).schema_id)
    return build_decoder(
        "avro", schema, reader_schema=None if reader is None else json.dumps(reader)
    )


def test_avro_from_the_reference_serializer_maps_to_a_request() -> None:
    client = kit.mock_registry()
    raw = kit.avro_bytes(client, kit.AVRO_V1, ARTICLE)
    frame = parse_frame(raw)
    mapped = map_fields(avro_decoder(client, raw).decode(frame.payload), MAPPING)
    assert request_from_doc(mapped.fields) == EmbedRequest(id="7", text="a typical request text")


def test_json_schema_from_the_reference_serializer() -> None:
    client = kit.mock_registry()
    record = {"id": "j-1", "text": "hello", "metadata": {"doc": 3}}
    raw = kit.json_schema_bytes(client, kit.JSON_SCHEMA, record)
    frame = parse_frame(raw)
    decoder = build_decoder("json_schema", kit.registry_schema(client, frame.schema_id))
    mapped = map_fields(decoder.decode(frame.payload), FieldMapping())
    assert request_from_doc(mapped.fields) == EmbedRequest("j-1", "hello", metadata={"doc": 3})


@pytest.mark.parametrize("as_text", [False, True], ids=["base64-descriptor", "proto-text"])
def test_protobuf_nested_message_index_from_the_reference_serializer(as_text: bool) -> None:
    client = kit.mock_registry()
    article = kit.proto_class()
    message = article(id="p-1", body=article.Body(content="hi there"), dimensions=64)
    raw = kit.protobuf_bytes(client, message)
    frame = parse_frame(raw)
    # Article is the file's second message: the serializer wrote the index path [1].
    assert parse_message_indexes(frame.payload)[0] == (1,)
    schema = kit.registry_schema(client, frame.schema_id)
    if as_text:  # what Confluent's and Apicurio's registries serve
        schema = RegistrySchema(schema.schema_id, "PROTOBUF", kit.PROTO)
    mapping = FieldMapping(text_field="body.content")
    mapped = map_fields(build_decoder("protobuf", schema).decode(frame.payload), mapping)
    assert request_from_doc(mapped.fields) == EmbedRequest("p-1", "hi there", dimensions=64)


def test_avro_schema_evolution_interleaved() -> None:
    """v1 and v2 records on one topic, one decoder per id, no restart; with a reader schema
    (v2) the v1 records get the added field's default."""
    client = kit.mock_registry()
    values = [
        kit.avro_bytes(client, kit.AVRO_V1, ARTICLE),
        kit.avro_bytes(client, kit.AVRO_V2, {**ARTICLE, "event_id": 8, "lang": "de"}),
        kit.avro_bytes(client, kit.AVRO_V1, {**ARTICLE, "event_id": 9}),
    ]
    ids = [parse_frame(raw).schema_id for raw in values]
    assert ids[0] == ids[2] != ids[1]
    pairs = list(zip(ids, values, strict=True))
    decoders = {i: avro_decoder(client, raw, kit.AVRO_V2) for i, raw in pairs}
    langs = [decoders[i].decode(parse_frame(raw).payload)["lang"] for i, raw in pairs]
    assert langs == ["en", "de", "en"]
    plain = avro_decoder(client, values[0])  # no reader schema: the writer's fields
    assert "lang" not in plain.decode(parse_frame(values[0]).payload)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, Reason.EMPTY_VALUE),
        (b"", Reason.NO_MAGIC_BYTE),
        (b'{"id":"a","text":"json, not framed"}', Reason.NO_MAGIC_BYTE),
        (b"\x01\x00\x00\x00\x01abc", Reason.NO_MAGIC_BYTE),
        (b"\x00\x00\x01", Reason.TRUNCATED_FRAME),
    ],
)
def test_bad_frames(raw: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        parse_frame(raw)
    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("indexes", "encoded"), [((0,), b"\x00"), ((1,), b"\x02\x02"), ((2, 0, 3), b"\x06\x04\x00\x06")]
)
def test_message_indexes_round_trip(indexes: tuple[int, ...], encoded: bytes) -> None:
    assert encode_message_indexes(indexes) == encoded
    assert parse_message_indexes(encoded + b"rest") == (indexes, b"rest")
    assert parse_frame(write_frame(5, b"m", indexes)) == Frame(5, encoded + b"m")


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x02", b"\x01\x00", b"\xff" * 11, b"\x82\x01" + b"\x00" * 65, b"\x02\x01"],
    ids=["empty", "ends-in-array", "negative-count", "endless-varint", "65-indexes", "negative"],
)
def test_bad_message_indexes(payload: bytes) -> None:
    with pytest.raises(InvalidEvent) as caught:
        parse_message_indexes(payload)
    assert caught.value.reason == Reason.INVALID_MESSAGE_INDEXES


def _decode_error(fmt: str, schema: RegistrySchema, payload: bytes) -> str:
    with pytest.raises(InvalidEvent) as caught:
        build_decoder(fmt, schema).decode(payload)
    return caught.value.reason


AVRO = RegistrySchema(1, "AVRO", json.dumps(kit.AVRO_V1))
JSON = RegistrySchema(2, "JSON", json.dumps(kit.JSON_SCHEMA))
PROTO = RegistrySchema(3, "PROTOBUF", kit.PROTO)


@pytest.mark.parametrize(
    ("fmt", "schema", "payload", "reason"),
    [
        ("avro", AVRO, b"\x0e", Reason.UNDECODABLE_PAYLOAD),  # ends inside the record
        ("avro", AVRO, b"\x0e\x02\x06abc\x00" + b"extra", Reason.UNDECODABLE_PAYLOAD),
        ("avro", AVRO, b"\x0e\x08", Reason.UNDECODABLE_PAYLOAD),  # union branch 4 of 2
        ("avro", RegistrySchema(4, "AVRO", '"string"'), b"\x02a", Reason.NOT_AN_OBJECT),
        ("json_schema", JSON, b"{not json", Reason.UNDECODABLE_PAYLOAD),
        ("json_schema", JSON, b'{"id":"a"}', Reason.SCHEMA_VIOLATION),
        ("json_schema", JSON, b'{"id":"a","text":5}', Reason.SCHEMA_VIOLATION),
        ("protobuf", PROTO, b"\x00\x0a\x05ab", Reason.UNDECODABLE_PAYLOAD),  # truncated string
        ("protobuf", PROTO, b"\x02\x0a", Reason.INVALID_MESSAGE_INDEXES),  # no message 5
    ],
)
def test_undecodable_payloads(
    fmt: str, schema: RegistrySchema, payload: bytes, reason: str
) -> None:
    assert _decode_error(fmt, schema, payload) == reason


@pytest.mark.parametrize(
    ("fmt", "schema", "reason"),
    [
        ("avro", RegistrySchema(5, "AVRO", '{"type": "recrd"}'), Reason.INVALID_SCHEMA),
        ("avro", RegistrySchema(6, "AVRO", "not json"), Reason.INVALID_SCHEMA),
        ("json_schema", RegistrySchema(7, "JSON", '{"type": 5}'), Reason.INVALID_SCHEMA),
        ("protobuf", RegistrySchema(8, "PROTOBUF", "message {"), Reason.INVALID_SCHEMA),
        ("protobuf", AVRO, Reason.WRONG_SCHEMA_TYPE),
        ("avro", JSON, Reason.WRONG_SCHEMA_TYPE),
    ],
)
def test_bad_schemas(fmt: str, schema: RegistrySchema, reason: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        build_decoder(fmt, schema)
    assert caught.value.reason == reason


NESTED = {"e": {"id": 3, "b": {"text": "t"}}, "p": "HIGH", "d": "doc-1", "m": {"x": b"\x01"}}


@pytest.mark.parametrize(
    ("record", "mapping", "expected"),
    [
        (
            {"id": "a", "text": "t", "model": "m"},
            FieldMapping(),
            MappedEvent({"id": "a", "text": "t", "model": "m"}),
        ),
        (
            NESTED,
            FieldMapping(
                id_field="e.id",
                text_field="e.b.text",
                doc_id_field="d",
                priority_field="p",
                optional={"metadata": "m"},
            ),
            MappedEvent({"id": "3", "text": "t", "metadata": {"x": "AQ=="}}, "doc-1", True),
        ),
        (  # a document needs no request id; a record without a doc_id is a plain request
            {"doc": "d1", "text": "", "rev": 3},
            FieldMapping(doc_id_field="doc", optional={"version": "rev"}),
            MappedEvent({"text": "", "version": 3}, "d1"),
        ),
        (
            {"id": "a", "text": "t"},
            FieldMapping(doc_id_field="doc"),
            MappedEvent({"id": "a", "text": "t"}),
        ),
        (
            {"id": "a", "text": "t", "p": None},
            FieldMapping(priority_field="p"),
            MappedEvent({"id": "a", "text": "t"}),
        ),
    ],
)
def test_mapping(record: dict[str, Any], mapping: FieldMapping, expected: MappedEvent) -> None:
    assert map_fields(record, mapping) == expected


@pytest.mark.parametrize(
    ("record", "mapping", "reason"),
    [
        ({"text": "t"}, FieldMapping(), Reason.MISSING_FIELD),
        ({"id": "a"}, FieldMapping(), Reason.MISSING_FIELD),
        ({"id": "a", "body": None}, FieldMapping(text_field="body.content"), Reason.MISSING_FIELD),
        (
            {"id": "a", "body": "flat"},
            FieldMapping(text_field="body.content"),
            Reason.MISSING_FIELD,
        ),
        ({"id": "a", "text": 5}, FieldMapping(), Reason.INVALID_FIELD),
        ({"id": "a", "text": ["t"]}, FieldMapping(), Reason.INVALID_FIELD),
        ({"id": 1.5, "text": "t"}, FieldMapping(), Reason.INVALID_FIELD),
        ({"id": True, "text": "t"}, FieldMapping(), Reason.INVALID_FIELD),
        ({"id": "a", "text": "t", "p": 3}, FieldMapping(priority_field="p"), Reason.INVALID_FIELD),
        ({"text": "t"}, FieldMapping(doc_id_field="doc"), Reason.MISSING_FIELD),
        ({"doc": 1.5, "text": "t"}, FieldMapping(doc_id_field="doc"), Reason.INVALID_FIELD),
    ],
)
def test_mapping_errors(record: dict[str, Any], mapping: FieldMapping, reason: str) -> None:
    with pytest.raises(InvalidEvent) as caught:
        map_fields(record, mapping)
    assert caught.value.reason == reason


def test_mapped_values_are_validated_as_json_events_are() -> None:
    mapped = map_fields({"id": "a", "text": "t", "dimensions": -1}, FieldMapping())
    with pytest.raises(InvalidEvent) as caught:
        request_from_doc(mapped.fields)
    assert caught.value.reason == Reason.INVALID_DIMENSIONS


@pytest.mark.parametrize("bad", [{"nope": "x"}, {"model": ""}])
def test_mapping_settings_are_checked(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        FieldMapping(optional=bad)


RESULT_RECORD = EmbedResult("r-1", "m", [0.25, -1.5], 2, 4, {"doc": 1}, 1, 12.3456, cached=True)


@pytest.mark.parametrize("embedding", [[0.25, -1.5], encode_base64([0.25, -1.5])])
def test_avro_results_read_back_by_the_reference_deserializer(embedding: Any) -> None:
    client = kit.mock_registry()
    schema_type, text = output_schema("avro", RESULT)
    from confluent_kafka.schema_registry import Schema

    schema_id = client.register_schema(f"embed.results-{RESULT}", Schema(text, schema_type))
    result = EmbedResult(
        "r-1", "m", embedding, 2, 4, {"doc": 1}, 1, 12.3456, cached=True,
        index_generation="0a1b2c3d",
    )  # fmt: skip
    raw = ResultEncoder("avro", dict.fromkeys(RECORD_NAMES, schema_id)).encode(result)
    record = AvroDeserializer(client)(raw, kit.CONTEXT)
    assert record == {
        "id": "r-1",
        "model": "m",
        "embedding": [0.25, -1.5],
        "dimensions": 2,
        "usage": {"tokens": 4},
        "metadata": '{"doc":1}',
        "attempts": 1,
        "latency_ms": 12.346,
        "cached": True,
        "index_generation": "0a1b2c3d",
    }
    # And by plain fastavro with the schema text the registry holds.
    payload = io.BytesIO(parse_frame(raw).payload)
    read_back = fastavro.schemaless_reader(payload, fastavro.parse_schema(json.loads(text)))
    assert isinstance(read_back, dict) and read_back["id"] == "r-1"


def test_json_schema_results_match_their_schema() -> None:
    raw = ResultEncoder("json_schema", dict.fromkeys(RECORD_NAMES, 9)).encode(RESULT_RECORD)
    frame = parse_frame(raw)
    assert frame.schema_id == 9
    doc = json.loads(frame.payload)
    jsonschema.validate(doc, JSON_SCHEMA[RESULT])
    assert doc["metadata"] == {"doc": 1} and doc["usage"] == {"tokens": 4}
