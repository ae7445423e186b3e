"""Registry formats end to end on Apache Kafka: Avro, JSON Schema and Protobuf requests and
documents through a real processor, schema evolution, every bad input dead-lettered with its
reason, a registry outage that pauses and resumes, Avro results read by the reference
deserializer. The registry is embedstream.testing.registry.TestRegistry (Apicurio cannot be
assembled from Maven Central here); the input bytes come from confluent-kafka's serializers
talking to it over HTTP, in a thread (they are blocking, the registry answers on this loop)."""

from __future__ import annotations

import asyncio
import io
import json
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import fastavro
import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from embedsim.model import expected_vector
from embedsim.server import SimulatorServer
from embedstream.app.processor import build_service, default_backend
from embedstream.errors import Reason
from embedstream.kafka.client.admin import topic_names
from embedstream.settings import Settings
from embedstream.testing.registry import TestRegistry
from embedstream.testing.waiting import eventually
from embedstream.tools.embedded import free_port
from embedstream.tools.produce import produce_lines
from embedstream.wire.events import EmbedResult
from embedstream.wire.formats.output_schemas import END, RECORD_NAMES, output_schema
from embedstream.wire.formats.protobuf import compile_proto
from embedstream.wire.headers import ERROR_REASON
from embedstream.wire.registry_frames import parse_frame, write_frame
from embedstream.wire.result_records import ChunkResult, DocumentComplete, decode_output
from google.protobuf import descriptor_pool, message_factory

from tests.integration.helpers import (
    create_all_topics,
    publish,
    read_topic,
    running_service,
    settings_for,
)

pytestmark = pytest.mark.integration

# One shape in every format: a request has an id, a document a doc_id (and a revision); the
# text is nested, as producers' records are (field_map=text=body.content,version=rev).
AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Article",
    "namespace": "com.acme",
    "fields": [
        {"name": "event_id", "type": "long"},  # an integer id: field_map=id=event_id
        {"name": "doc_id", "type": ["null", "string"], "default": None},
        {"name": "rev", "type": ["null", "long"], "default": None},
        {
            "name": "body",
            "type": {"type": "record", "name": "Body", "fields": [
                {"name": "content", "type": "string"}]},
        },
    ],
}  # fmt: skip
AVRO_V2: dict[str, Any] = {  # evolution: a field added with a default
    **AVRO,
    "fields": [*AVRO["fields"], {"name": "lang", "type": "string", "default": "en"}],
}
JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "doc_id": {"type": "string"},
        "rev": {"type": "integer"},
        "body": {"type": "object", "properties": {"content": {"type": "string"}}},
    },
    "required": ["body"],
}
PROTO = """syntax = "proto3";
package acme.events;

message Other { int32 x = 1; }
message Article {
  string id = 1;
  string doc_id = 2;
  int64 rev = 3;
  Body body = 4;
  message Body { string content = 1; }
}
"""
DOC_TEXT = " ".join(f"Sentence {i} of a document about vectors and streams." for i in range(60))


def _context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def _proto_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    for file in compile_proto({"article.proto": PROTO}, "article.proto"):
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.events.Article"))


def _record(fmt: str, n: int, text: str, doc_id: str | None = None) -> dict[str, Any]:
    """The record of request ``n`` (or of a document) in the shape of ``fmt``'s schema."""
    body = {"content": text}
    if fmt == "avro":
        return {"event_id": n, "doc_id": doc_id, "rev": 7 if doc_id else None, "body": body}
    record: dict[str, Any] = {"id": f"r-{n}", "body": body}
    if doc_id:
        record |= {"doc_id": doc_id, "rev": 7}
    return record


def _serializer(fmt: str, url: str, schema: dict[str, Any] | None = None) -> Callable[..., bytes]:
    """confluent-kafka's serializer of ``fmt`` against the test registry: record -> bytes."""
    client = SchemaRegistryClient({"url": url})
    if fmt == "avro":
        avro = AvroSerializer(client, json.dumps(schema or AVRO))
        return lambda record, topic: avro(record, _context(topic))
    if fmt == "json_schema":
        js = JSONSerializer(json.dumps(JSON_SCHEMA), client)
        return lambda record, topic: js(record, _context(topic))
    cls = _proto_class()
    proto = ProtobufSerializer(cls, client, {"use.deprecated.format": False})

    def serialize(record: dict[str, Any], topic: str) -> bytes:
        message = cls(
            id=record["id"], doc_id=record.get("doc_id") or "", rev=record.get("rev") or 0
        )
        message.body.content = record["body"]["content"]
        value: bytes = proto(message, _context(topic))
        return value

    return serialize


async def _serialize_all(
    fmt: str, url: str, topic: str, records: list[dict[str, Any]], schema: Any = None
) -> list[bytes]:
    def work() -> list[bytes]:
        serialize = _serializer(fmt, url, schema)
        return [serialize(record, topic) for record in records]

    return await asyncio.to_thread(work)


def _key(fmt: str, record: dict[str, Any]) -> bytes:
    if record.get("doc_id"):
        return str(record["doc_id"]).encode()
    return str(record["event_id"] if fmt == "avro" else record["id"]).encode()


def _settings(bootstrap: str, prefix: str, simulator: SimulatorServer, registry: TestRegistry,
              fmt: str, **overrides: Any) -> Settings:  # fmt: skip
    return settings_for(
        bootstrap, prefix, simulator.url,
        input_format=fmt,
        schema_registry_url=registry.url,
        field_map=f"id={'event_id' if fmt == 'avro' else 'id'},text=body.content,version=rev",
        chunk_max_tokens=64, chunk_min_tokens=16, chunk_overlap_tokens=8,
        **overrides,
    )  # fmt: skip


@pytest.fixture
async def registry() -> AsyncIterator[TestRegistry]:
    async with TestRegistry() as server:
        yield server


async def _outputs(bootstrap: str, topic: str, want: Callable[[list[Any]], bool],
                   timeout_s: float = 60) -> list[Any]:  # fmt: skip
    """The topic's records once ``want`` says they are all there."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = await read_topic(bootstrap, topic, idle_s=0.3)
        if want(records) or time.monotonic() > deadline:
            return records
        await asyncio.sleep(0.3)


def _dead_letter_reasons(records: list[Any]) -> dict[bytes | None, str]:
    return {r.key: dict(r.headers)[ERROR_REASON].decode() for r in records}


@pytest.mark.parametrize("fmt", ["avro", "json_schema", "protobuf"])
async def test_requests_and_documents_in_each_format(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry, fmt: str
) -> None:
    settings = _settings(bootstrap, unique_prefix, simulator, registry, fmt)
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    texts = {n: f"request {n} in {fmt}" for n in range(1, 21)}
    records = [_record(fmt, n, text) for n, text in texts.items()]
    records.append(_record(fmt, 999, DOC_TEXT, doc_id="doc-1"))
    values = await _serialize_all(fmt, registry.url, names.requests_low, records)
    async with running_service(settings):
        keyed = [(_key(fmt, r), v) for r, v in zip(records, values, strict=True)]
        await publish(bootstrap, names.requests_low, keyed)

        def done(out: list[Any]) -> bool:
            kinds = [decode_output(r.key, r.value) for r in out]
            return any(isinstance(k, DocumentComplete) for k in kinds) and len(kinds) > 20

        results = await _outputs(bootstrap, names.results, done)
        dead = await read_topic(bootstrap, names.dead_letters, idle_s=0.2)
    assert dead == [], _dead_letter_reasons(dead)
    decoded = [decode_output(r.key, r.value) for r in results]
    plain = {d.id: d for d in decoded if isinstance(d, EmbedResult)}
    prefix = "" if fmt == "avro" else "r-"
    assert set(plain) == {f"{prefix}{n}" for n in texts}  # integer Avro ids as decimal text
    for n, text in texts.items():
        result = plain[f"{prefix}{n}"]
        assert isinstance(result, EmbedResult) and isinstance(result.embedding, list)
        expected = expected_vector(settings.model, text, result.dimensions)
        assert math.isclose(result.embedding[0], expected[0], rel_tol=1e-5)
    chunks = [d for d in decoded if isinstance(d, ChunkResult)]
    [complete] = [d for d in decoded if isinstance(d, DocumentComplete)]
    assert complete.doc_id == "doc-1" and complete.version == "7"  # field_map version=rev
    assert complete.chunk_count == len(chunks) > 1
    assert sorted(c.chunk_seq for c in chunks) == list(range(len(chunks)))
    assert {DOC_TEXT[c.span[0] : c.span[1]][:20] for c in chunks if c.chunk_seq == 0} == {
        DOC_TEXT[:20]
    }


async def test_schema_evolution_mid_stream_needs_no_restart(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry
) -> None:
    settings = _settings(bootstrap, unique_prefix, simulator, registry, "avro")
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    topic = names.requests_low
    v1 = [_record("avro", n, f"first version {n}") for n in range(10)]
    v2 = [_record("avro", n, f"second version {n}") | {"lang": "de"} for n in range(10, 20)]
    async with running_service(settings):
        first = await _serialize_all("avro", registry.url, topic, v1)
        await publish(
            bootstrap, topic, [(_key("avro", r), v) for r, v in zip(v1, first, strict=True)]
        )
        await _outputs(bootstrap, names.results, lambda out: len(out) >= 10)
        second = await _serialize_all("avro", registry.url, topic, v2, AVRO_V2)
        await publish(
            bootstrap, topic, [(_key("avro", r), v) for r, v in zip(v2, second, strict=True)]
        )
        results = await _outputs(bootstrap, names.results, lambda out: len(out) >= 20)
    ids = {orjson.loads(r.value)["id"] for r in results}
    assert ids == {str(n) for n in range(20)}
    first_id = int.from_bytes(first[0][1:5], "big")
    second_id = int.from_bytes(second[0][1:5], "big")
    assert first_id != second_id
    # Each schema id was asked for once: the client caches by id.
    for schema_id in (first_id, second_id):
        assert registry.paths.count(f"GET /schemas/ids/{schema_id}") == 1


def _avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


async def test_every_bad_input_is_dead_lettered_with_its_reason(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry
) -> None:
    settings = _settings(bootstrap, unique_prefix, simulator, registry, "avro")
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    good_id = registry.register("x-value", json.dumps(AVRO))
    no_body = {"type": "record", "name": "NoBody", "fields": [{"name": "event_id", "type": "long"}]}
    number_text = {**AVRO, "name": "NumberText", "fields": [
        {"name": "event_id", "type": "long"},
        {"name": "body", "type": {"type": "record", "name": "B", "fields": [
            {"name": "content", "type": "long"}]}},
    ]}  # fmt: skip
    no_body_id = registry.register("x-value", json.dumps(no_body))
    number_id = registry.register("x-value", json.dumps(number_text))
    protobuf_id = registry.register("y-value", PROTO, "PROTOBUF")
    bad = {
        b"no-magic": (b'{"id": "a", "text": "json on an avro topic"}', Reason.NO_MAGIC_BYTE),
        b"truncated": (b"\x00\x00\x01", Reason.TRUNCATED_FRAME),
        b"unknown-id": (write_frame(4242, b"\x02"), Reason.UNKNOWN_SCHEMA),
        b"undecodable": (write_frame(good_id, b"\xff\xff\xff\xff\xff"), Reason.UNDECODABLE_PAYLOAD),
        b"missing": (
            write_frame(no_body_id, _avro(no_body, {"event_id": 5})),
            Reason.MISSING_FIELD,
        ),
        b"not-a-string": (
            write_frame(number_id, _avro(number_text, {"event_id": 6, "body": {"content": 7}})),
            Reason.INVALID_FIELD,
        ),
        b"wrong-type": (write_frame(protobuf_id, b"\x00"), Reason.WRONG_SCHEMA_TYPE),
        b"empty-text": (
            write_frame(good_id, _avro(AVRO, _record("avro", 8, " "))),
            Reason.EMPTY_TEXT,
        ),
    }
    good = {
        str(n).encode(): write_frame(good_id, _avro(AVRO, _record("avro", n, f"good {n}")))
        for n in range(100, 110)
    }
    mixed: list[tuple[bytes | None, bytes]] = []
    for (key, (value, _)), (good_key, good_value) in zip(bad.items(), good.items(), strict=False):
        mixed += [(key, value), (good_key, good_value)]
    mixed += [(k, v) for k, v in good.items() if (k, v) not in mixed]
    async with running_service(settings):
        await publish(bootstrap, names.requests_low, mixed)
        results = await _outputs(bootstrap, names.results, lambda out: len(out) >= len(good))
        dead = await _outputs(bootstrap, names.dead_letters, lambda out: len(out) >= len(bad))
    assert {r.key for r in results} == set(good)
    assert _dead_letter_reasons(dead) == {key: reason for key, (_, reason) in bad.items()}
    assert {r.value for r in dead} == {value for value, _ in bad.values()}  # the original bytes


def _registered_avro(
    registry: TestRegistry, topic: str, word: str, count: int
) -> tuple[int, dict[bytes, bytes]]:
    """The AVRO schema registered for ``topic``, and ``count`` records of it by key."""
    schema_id = registry.register(f"{topic}-value", json.dumps(AVRO))
    return schema_id, {
        str(n).encode(): write_frame(schema_id, _avro(AVRO, _record("avro", n, f"{word} {n}")))
        for n in range(count)
    }


async def _readyz(port: int) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/readyz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, orjson.loads(await response.read())


async def test_a_registry_outage_pauses_without_dead_letters_and_resumes(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry
) -> None:
    port = free_port()
    settings = _settings(bootstrap, unique_prefix, simulator, registry, "avro", metrics_port=port)
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    schema_id, records = _registered_avro(registry, names.requests_low, "held", 30)
    async with running_service(settings) as service:
        registry.answer_status = 503  # before the processor has seen the schema
        await publish(bootstrap, names.requests_low, list(records.items()))
        await eventually(lambda: service.processor.paused_count() > 0, timeout_s=30)
        status, body = await _readyz(port)
        assert status == 503 and body["reasons"] == ["registry_usable"]
        assert body["messages"][0].startswith("schema registry unavailable: GET ")
        await asyncio.sleep(2)  # a few holds and re-reads, all refused
        asked = registry.paths.count(f"GET /schemas/ids/{schema_id}")
        assert asked >= 2  # the record was read again after each hold
        assert await read_topic(bootstrap, names.results, idle_s=0.2) == []
        registry.answer_status = None
        results = await _outputs(bootstrap, names.results, lambda out: len(out) >= len(records))
        status, body = await _readyz(port)
        dead = await read_topic(bootstrap, names.dead_letters, idle_s=0.2)
    assert dead == []
    assert sorted(r.key for r in results) == sorted(records)
    assert status == 200 and body["checks"]["registry_usable"] is True


async def test_produce_avro_and_results_in_avro_for_the_reference_deserializer(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry
) -> None:
    settings = _settings(bootstrap, unique_prefix, simulator, registry, "avro",
                         output_format="avro")  # fmt: skip
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    # The same schema text gets the same id: the id the processor's DocumentEnd will carry.
    end_id = registry.register(f"{names.results}-{END}", output_schema("avro", END)[1])

    async def lines() -> AsyncIterator[bytes]:
        for n in range(12):
            yield orjson.dumps(_record("avro", n, f"produced {n}")) + b"\n"
        yield orjson.dumps(_record("avro", 99, DOC_TEXT, doc_id="doc-1")) + b"\n"

    def ended(out: list[Any]) -> bool:
        return any(r.value and parse_frame(r.value).schema_id == end_id for r in out)

    async with running_service(settings):
        sent = await produce_lines(settings, lines(), priority="low", plain=False,
                                   record_format="avro", schema=json.dumps(AVRO))  # fmt: skip
        assert sent == 13
        results = await _outputs(bootstrap, names.results, ended)
    assert f"POST /subjects/{names.requests_low}-value/versions" in registry.paths
    for name in RECORD_NAMES:  # TopicRecordNameStrategy: one subject per record shape
        assert f"POST /subjects/{names.results}-{name}/versions" in registry.paths
    assert all(r.value[:1] == b"\x00" for r in results)  # every record framed, none JSON

    def deserialize() -> list[dict[str, Any]]:
        reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
        return [reader(r.value, _context(names.results)) for r in results]

    everything = await asyncio.to_thread(deserialize)
    docs = [d for d in everything if "id" in d]
    chunks = [d for d in everything if d.get("type") == "chunk"]
    [end] = [d for d in everything if d.get("type") == "complete"]
    assert len(everything) == len(docs) + len(chunks) + 1
    assert end["doc_id"] == "doc-1" and end["chunk_count"] == len(chunks) > 1
    assert sorted(c["chunk_seq"] for c in chunks) == list(range(len(chunks)))
    assert {d["id"] for d in docs} == {str(n) for n in range(12)}
    for doc in docs:
        text = f"produced {doc['id']}"
        expected = expected_vector(settings.model, text, doc["dimensions"])
        assert len(doc["embedding"]) == doc["dimensions"]
        assert math.isclose(doc["embedding"][0], expected[0], rel_tol=1e-5)
        assert doc["usage"]["tokens"] > 0 and doc["attempts"] == 1


async def test_a_registry_down_at_start_is_waited_out_with_avro_results(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry
) -> None:
    """A registry that answers only after the processor started (a compose file's order): the
    start waits, not ready and saying why, and consumes nothing until the schema is in."""
    port = free_port()
    settings = _settings(bootstrap, unique_prefix, simulator, registry, "avro",
                         output_format="avro", metrics_port=port)  # fmt: skip
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    _, records = _registered_avro(registry, names.requests_low, "late", 10)
    await publish(bootstrap, names.requests_low, list(records.items()))
    register = f"POST /subjects/{names.results}-{RECORD_NAMES[0]}/versions"
    registry.answer_status = 503
    backend = default_backend(settings)
    service = build_service(settings, backend)
    task = asyncio.create_task(service.run())
    try:
        await eventually(lambda: registry.paths.count(register) >= 2 or task.done(), timeout_s=30)
        assert not task.done()  # waiting, not stopped
        status, body = await _readyz(port)
        assert status == 503 and "registry_usable" in body["reasons"]
        assert any(m.startswith("schema registry unavailable") for m in body["messages"])
        assert not service.processor.assigned.is_set()  # nothing consumed meanwhile
        registry.answer_status = None
        results = await _outputs(bootstrap, names.results, lambda out: len(out) >= len(records))
    finally:
        service.stop()
        await asyncio.wait_for(task, 60)
        await backend.close()
    assert sorted(r.key for r in results) == sorted(records)

    def deserialize() -> list[dict[str, Any]]:
        reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
        return [reader(r.value, _context(names.results)) for r in results]

    docs = await asyncio.to_thread(deserialize)
    assert {d["id"] for d in docs} == {str(n) for n in range(10)}


async def test_a_stop_while_the_registry_is_down_at_start_exits_cleanly(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, registry: TestRegistry
) -> None:
    settings = _settings(bootstrap, unique_prefix, simulator, registry, "avro",
                         output_format="avro")  # fmt: skip
    await create_all_topics(settings)
    await registry.refuse()
    backend = default_backend(settings)
    service = build_service(settings, backend)
    parts = service.processor.parts
    closed: list[str] = []
    for name, client in (("consumer", parts.consumer), ("producer", parts.producer)):
        stop = client.stop

        async def noting(stop: Any = stop, name: str = name) -> None:
            closed.append(name)
            await stop()

        client.stop = noting  # type: ignore[method-assign]
    task = asyncio.create_task(service.run())
    try:
        await eventually(
            lambda: service.health.readiness().registry_usable is False or task.done(), timeout_s=30
        )
        assert not task.done()
        service.stop()
        await asyncio.wait_for(task, 30)  # no exception: a clean stop
    finally:
        await backend.close()
    assert not service.processor.clients_started.is_set()
    assert sorted(closed) == ["consumer", "producer"]  # built, never started: closed anyway
