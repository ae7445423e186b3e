"""The chunk changelog's value in registry formats (``output_format`` avro or json_schema): the
schemas of the changelog record and the encoder that frames each value with the id the
registry gave it. One record shape on the topic, so the subject is TopicNameStrategy's
``<changelog topic>-value``, the one Connect's converters look up by default.

The fields are those of the JSON envelope (``wire/changelog.py``). The vector is an array of
doubles, and the metadata JSON text; Connect's Avro converter names a schema by its
``connect.name`` property, so the Debezium JDBC sink sees the same semantic types
(``io.debezium.data.DoubleVector``, ``io.debezium.data.Json``) as in the JSON envelope.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from embedstream.wire.changelog import DOUBLE_VECTOR, JSON_TEXT, ChangelogChunk
from embedstream.wire.formats import SCHEMA_TYPES
from embedstream.wire.registry_frames import write_frame

NAME = "io.embedstream.ChangelogChunk"
_STRINGS = ("chunk_id", "doc_id", "version")
_INTS = ("chunk_seq", "span_start", "span_end")

CHANGELOG_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "ChangelogChunk",
    "namespace": "io.embedstream",
    "doc": "One chunk of a complete document version, keyed by its chunk id.",
    "fields": [
        *({"name": name, "type": "string"} for name in _STRINGS),
        *({"name": name, "type": "int"} for name in _INTS),
        {"name": "model", "type": "string"},
        {"name": "dimensions", "type": "int"},
        {"name": "index_generation", "type": "string"},
        {
            "name": "metadata",
            "type": ["null", {"type": "string", "connect.name": JSON_TEXT}],
            "default": None,
        },
        {"name": "text", "type": ["null", "string"], "default": None},
        {
            "name": "embedding",
            "type": {"type": "array", "items": "double", "connect.name": DOUBLE_VECTOR},
        },
    ],
}

CHANGELOG_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": NAME,
    "description": "One chunk of a complete document version, keyed by its chunk id.",
    "type": "object",
    "properties": {
        **{name: {"type": "string"} for name in _STRINGS},
        **{name: {"type": "integer", "connect.type": "int32"} for name in _INTS},
        "model": {"type": "string"},
        "dimensions": {"type": "integer", "connect.type": "int32"},
        "index_generation": {"type": "string"},
        "metadata": {"oneOf": [{"type": "null"}, {"type": "string", "title": JSON_TEXT}]},
        "text": {"oneOf": [{"type": "null"}, {"type": "string"}]},
        "embedding": {
            "type": "array",
            "title": DOUBLE_VECTOR,
            "items": {"type": "number", "connect.type": "float64"},
        },
    },
    "required": [*_STRINGS, *_INTS, "model", "dimensions", "index_generation", "embedding"],
}


def changelog_schema(output_format: str) -> tuple[str, str]:
    """The registry schemaType and schema text of the changelog record in ``output_format``."""
    if output_format == "avro":
        return SCHEMA_TYPES["avro"], orjson.dumps(CHANGELOG_AVRO).decode()
    if output_format == "json_schema":
        return SCHEMA_TYPES["json_schema"], orjson.dumps(CHANGELOG_JSON_SCHEMA).decode()
    raise ValueError(f"no registry changelog format {output_format!r}; avro or json_schema")


def changelog_subject(changelog_topic: str) -> str:
    return f"{changelog_topic}-value"


class _RecordEncoder(Protocol):
    def encode(self, record: dict[str, Any]) -> bytes: ...


class ChangelogEncoder:
    """Changelog values as framed records of the registered schema ``schema_id``."""

    def __init__(self, output_format: str, schema_id: int) -> None:
        self._schema_id = schema_id
        self._encoder: _RecordEncoder
        if output_format == "avro":
            from embedstream.wire.formats.avro import AvroEncoder

            self._encoder = AvroEncoder(CHANGELOG_AVRO)
        elif output_format == "json_schema":
            from embedstream.wire.formats.json_schema import JsonSchemaEncoder

            self._encoder = JsonSchemaEncoder(CHANGELOG_JSON_SCHEMA)
        else:
            raise ValueError(f"no registry changelog format {output_format!r}")

    def encode(self, chunk: ChangelogChunk) -> bytes:
        return write_frame(self._schema_id, self._encoder.encode(chunk.payload()))
