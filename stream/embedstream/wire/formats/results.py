"""The result record in registry formats: its schemas (Avro, JSON Schema) and the encoder
that frames each result with the id the registry gave the schema. Pure; registering the
schema under the results topic's subject (TopicNameStrategy: ``<topic>-value``) is the
caller's I/O (``engine/registry.py``)."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from embedstream.wire.events import EmbedResult
from embedstream.wire.formats import SCHEMA_TYPES
from embedstream.wire.registry_frames import write_frame
from embedstream.wire.vectors import base64_floats

RESULT_AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "EmbeddingResult",
    "namespace": "io.embedstream",
    "doc": "One embedding made by embedstream, keyed by the request id.",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "model", "type": "string"},
        {"name": "embedding", "type": {"type": "array", "items": "float"}},
        {"name": "dimensions", "type": "int"},
        {
            "name": "usage",
            "type": {
                "type": "record",
                "name": "Usage",
                "fields": [{"name": "tokens", "type": "int"}],
            },
        },
        # The request's metadata is free-form JSON; Avro has no such type, so it travels as
        # JSON text (null when the request had none).
        {"name": "metadata", "type": ["null", "string"], "default": None},
        {"name": "attempts", "type": "int"},
        {"name": "latency_ms", "type": "double"},
        {"name": "cached", "type": "boolean", "default": False},
    ],
}

RESULT_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "EmbeddingResult",
    "description": "One embedding made by embedstream, keyed by the request id.",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "model": {"type": "string"},
        "embedding": {"type": "array", "items": {"type": "number"}},
        "dimensions": {"type": "integer"},
        "usage": {
            "type": "object",
            "properties": {"tokens": {"type": "integer"}},
            "required": ["tokens"],
        },
        "metadata": {"type": ["object", "null"]},
        "attempts": {"type": "integer"},
        "latency_ms": {"type": "number"},
        "cached": {"type": "boolean"},
    },
    "required": ["id", "model", "embedding", "dimensions", "usage", "attempts", "latency_ms"],
}


def result_schema(output_format: str) -> tuple[str, str]:
    """The registry schemaType and schema text of the result record in ``output_format``."""
    if output_format == "avro":
        return SCHEMA_TYPES["avro"], orjson.dumps(RESULT_AVRO_SCHEMA).decode()
    if output_format == "json_schema":
        return SCHEMA_TYPES["json_schema"], orjson.dumps(RESULT_JSON_SCHEMA).decode()
    raise ValueError(f"no registry result format {output_format!r}; avro or json_schema")


class _RecordEncoder(Protocol):
    def encode(self, record: dict[str, Any]) -> bytes: ...


class ResultEncoder:
    """Results as framed values of the registered result schema ``schema_id``."""

    def __init__(self, output_format: str, schema_id: int) -> None:
        self._schema_id = schema_id
        self._avro = output_format == "avro"
        self._encoder: _RecordEncoder
        if self._avro:
            from embedstream.wire.formats.avro import AvroEncoder

            self._encoder = AvroEncoder(RESULT_AVRO_SCHEMA)
        elif output_format == "json_schema":
            from embedstream.wire.formats.json_schema import JsonSchemaEncoder

            self._encoder = JsonSchemaEncoder(RESULT_JSON_SCHEMA)
        else:
            raise ValueError(f"no registry result format {output_format!r}; avro or json_schema")

    def encode(self, result: EmbedResult) -> bytes:
        return write_frame(self._schema_id, self._encoder.encode(self.record(result)))

    def record(self, result: EmbedResult) -> dict[str, Any]:
        embedding = result.embedding
        # The schemas say array of floats: a base64 vector (encoding_format=base64) is
        # written as its floats, the one representation a schema-aware reader expects.
        floats = list(base64_floats(embedding)) if isinstance(embedding, str) else embedding
        metadata: Any = result.metadata
        if self._avro and metadata is not None:
            metadata = orjson.dumps(metadata).decode()
        return {
            "id": result.id,
            "model": result.model,
            "embedding": floats,
            "dimensions": result.dimensions,
            "usage": {"tokens": result.tokens},
            "metadata": metadata,
            "attempts": result.attempts,
            "latency_ms": round(result.latency_ms, 3),
            "cached": result.cached,
        }
