"""Bytes from the reference serializers (confluent-kafka's, against its mock:// registry): the
independent check of embedstream's registry wire format."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from embedstream.wire.formats import RegistrySchema
from embedstream.wire.formats.protobuf import compile_proto
from google.protobuf import descriptor_pool, message_factory

TOPIC = "embed.requests.high"
CONTEXT = SerializationContext(TOPIC, MessageField.VALUE)

AVRO_V1: dict[str, Any] = {
    "type": "record",
    "name": "Article",
    "namespace": "com.acme",
    "fields": [
        {"name": "event_id", "type": "long"},
        {
            "name": "body",
            "type": {
                "type": "record",
                "name": "Body",
                "fields": [{"name": "content", "type": ["null", "string"]}],
            },
        },
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
    ],
}
# v2 adds a defaulted field: BACKWARD compatible, the classic evolution.
AVRO_V2: dict[str, Any] = {
    **AVRO_V1,
    "fields": [*AVRO_V1["fields"], {"name": "lang", "type": "string", "default": "en"}],
}
JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "text": {"type": "string"},
        "metadata": {"type": "object"},
    },
    "required": ["id", "text"],
}
PROTO = """syntax = "proto3";
package acme.events;

message Other { int32 x = 1; }
message Article {
  string id = 1;
  Body body = 2;
  map<string, string> tags = 3;
  int32 dimensions = 4;
  message Body { string content = 1; }
}
"""


def mock_registry() -> Any:
    return SchemaRegistryClient.new_client({"url": "mock://embedstream-tests"})


def avro_bytes(client: Any, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    serializer = AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True})
    value: bytes = serializer(record, CONTEXT)
    return value


def json_schema_bytes(client: Any, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    value: bytes = JSONSerializer(json.dumps(schema), client)(record, CONTEXT)
    return value


def proto_class(name: str = "acme.events.Article") -> Any:
    pool = descriptor_pool.DescriptorPool()
    for file in compile_proto({"article.proto": PROTO}, "article.proto"):
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def protobuf_bytes(client: Any, message: Any) -> bytes:
    serializer = ProtobufSerializer(type(message), client, {"use.deprecated.format": False})
    value: bytes = serializer(message, CONTEXT)
    return value


def registry_schema(client: Any, schema_id: int) -> RegistrySchema:
    """The schema as the mock registry stores it, as embedstream's client would return it."""
    found = client.get_schema(schema_id)
    return RegistrySchema(schema_id, found.schema_type or "AVRO", found.schema_str)
