"""The schemas of the results topic's three record shapes, in Avro and in JSON Schema: a plain
result (`EmbeddingResult`), a document's chunk (`EmbeddingChunk`) and a document version's
final record (`DocumentEnd`: complete, or incomplete naming the missing chunks). Tombstones stay
null values.

Three shapes on one topic cannot share the topic's one `<topic>-value` subject (a subject's
versions must stay compatible with each other), so each is registered under
TopicRecordNameStrategy: `<topic>-<record name>`, the name being the Avro full name and the
JSON Schema title alike (`embed.results-io.embedstream.EmbeddingChunk`). A reader needs no
subject: each value's frame names its schema id. The request's free-form metadata travels as
JSON text in Avro (Avro has no such type), as an object in JSON Schema.
"""

from __future__ import annotations

from typing import Any

import orjson

from embedstream.wire.formats import SCHEMA_TYPES

NAMESPACE = "io.embedstream"
RESULT = f"{NAMESPACE}.EmbeddingResult"
CHUNK = f"{NAMESPACE}.EmbeddingChunk"
END = f"{NAMESPACE}.DocumentEnd"
RECORD_NAMES = (RESULT, CHUNK, END)

_USAGE = {"type": "record", "name": "Usage", "fields": [{"name": "tokens", "type": "int"}]}
_METADATA = {"name": "metadata", "type": ["null", "string"], "default": None}
# The index generation (embedstream.core.generations); null only in records written before
# generations existed.
_GENERATION = {"name": "index_generation", "type": ["null", "string"], "default": None}
_VECTOR = [
    {"name": "model", "type": "string"},
    {"name": "embedding", "type": {"type": "array", "items": "float"}},
    {"name": "dimensions", "type": "int"},
    {"name": "usage", "type": _USAGE},
]
_CALL = [
    {"name": "attempts", "type": "int"},
    {"name": "latency_ms", "type": "double"},
    {"name": "cached", "type": "boolean", "default": False},
]

AVRO: dict[str, dict[str, Any]] = {
    RESULT: {
        "type": "record",
        "name": "EmbeddingResult",
        "namespace": NAMESPACE,
        "doc": "One embedding made by embedstream, keyed by the request id.",
        "fields": [{"name": "id", "type": "string"}, *_VECTOR, _METADATA, *_CALL, _GENERATION],
    },
    CHUNK: {
        "type": "record",
        "name": "EmbeddingChunk",
        "namespace": NAMESPACE,
        "doc": "The embedding of one chunk of one version of a document, keyed by doc_id.",
        "fields": [
            {"name": "type", "type": {"type": "enum", "name": "ChunkKind", "symbols": ["chunk"]}},
            {"name": "doc_id", "type": "string"},
            {"name": "version", "type": "string"},
            {"name": "chunk_seq", "type": "int"},
            {"name": "chunk_count", "type": "int"},
            {"name": "span", "type": {"type": "array", "items": "int"}, "doc": "[start, end)"},
            *_VECTOR,
            _METADATA,
            *_CALL,
            {"name": "text", "type": ["null", "string"], "default": None},
            _GENERATION,
        ],
    },
    END: {
        "type": "record",
        "name": "DocumentEnd",
        "namespace": NAMESPACE,
        "doc": "A document version ended, after its chunks: complete, or incomplete (missing).",
        "fields": [
            {
                "name": "type",
                "type": {"type": "enum", "name": "EndKind", "symbols": ["complete", "incomplete"]},
            },
            {"name": "doc_id", "type": "string"},
            {"name": "version", "type": "string"},
            {"name": "chunk_count", "type": "int"},
            {"name": "missing", "type": {"type": "array", "items": "int"}, "default": []},
            _METADATA,
            _GENERATION,
        ],
    },
}

_J_USAGE = {
    "type": "object",
    "properties": {"tokens": {"type": "integer"}},
    "required": ["tokens"],
}
_J_VECTOR = {
    "model": {"type": "string"},
    "embedding": {"type": "array", "items": {"type": "number"}},
    "dimensions": {"type": "integer"},
    "usage": _J_USAGE,
    "metadata": {"type": ["object", "null"]},
    "attempts": {"type": "integer"},
    "latency_ms": {"type": "number"},
    "cached": {"type": "boolean"},
    "index_generation": {"type": ["string", "null"]},
}
_J_VECTOR_REQUIRED = ["model", "embedding", "dimensions", "usage", "attempts", "latency_ms"]
_DRAFT = "http://json-schema.org/draft-07/schema#"

JSON_SCHEMA: dict[str, dict[str, Any]] = {
    RESULT: {
        "$schema": _DRAFT,
        "title": RESULT,
        "description": "One embedding made by embedstream, keyed by the request id.",
        "type": "object",
        "properties": {"id": {"type": "string"}, **_J_VECTOR},
        "required": ["id", *_J_VECTOR_REQUIRED],
    },
    CHUNK: {
        "$schema": _DRAFT,
        "title": CHUNK,
        "description": "The embedding of one chunk of one version of a document.",
        "type": "object",
        "properties": {
            "type": {"const": "chunk"},
            "doc_id": {"type": "string"},
            "version": {"type": "string"},
            "chunk_seq": {"type": "integer"},
            "chunk_count": {"type": "integer"},
            "span": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            **_J_VECTOR,
            "text": {"type": "string"},
        },
        "required": [
            *("type", "doc_id", "version", "chunk_seq", "chunk_count", "span"),
            *_J_VECTOR_REQUIRED,
        ],
    },
    END: {
        "$schema": _DRAFT,
        "title": END,
        "description": "A document version ended: complete, or incomplete naming missing chunks.",
        "type": "object",
        "properties": {
            "type": {"enum": ["complete", "incomplete"]},
            "doc_id": {"type": "string"},
            "version": {"type": "string"},
            "chunk_count": {"type": "integer"},
            "missing": {"type": "array", "items": {"type": "integer"}},
            "metadata": {"type": ["object", "null"]},
            "index_generation": {"type": ["string", "null"]},
        },
        "required": ["type", "doc_id", "version", "chunk_count"],
    },
}


def output_schema(output_format: str, record_name: str) -> tuple[str, str]:
    """The registry schemaType and schema text of one record shape in ``output_format``."""
    schemas = {"avro": AVRO, "json_schema": JSON_SCHEMA}.get(output_format)
    if schemas is None:
        raise ValueError(f"no registry result format {output_format!r}; avro or json_schema")
    return SCHEMA_TYPES[output_format], orjson.dumps(schemas[record_name]).decode()


def record_subject(topic: str, record_name: str) -> str:
    """TopicRecordNameStrategy: ``<topic>-<record name>``."""
    return f"{topic}-{record_name}"
