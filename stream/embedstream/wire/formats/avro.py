"""Avro payloads through fastavro: decode with the writer's schema, optionally resolved to a
reader schema, and encode records with a schema of ours."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from fastavro.types import NamedSchemas, Schema

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.formats import RegistrySchema, invalid_schema, undecodable


def parse_avro(text: str, named: NamedSchemas | None = None) -> Schema:
    """A parsed Avro schema; ``named`` collects named types for schemas that reference them."""
    return fastavro.parse_schema(json.loads(text), named_schemas=named)


class AvroDecoder:
    def __init__(self, schema: RegistrySchema, *, reader_schema: str | None = None) -> None:
        self._schema_id = schema.schema_id
        named: NamedSchemas = {}
        try:
            # References first, so the writer schema can name their types.
            for reference in schema.references:
                parse_avro(reference.schema, named)
            self._writer = parse_avro(schema.schema, named)
            self._reader = None if reader_schema is None else parse_avro(reader_schema)
        except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
            raise invalid_schema(schema, exc) from None

    def decode(self, payload: bytes) -> dict[str, Any]:
        stream = io.BytesIO(payload)
        try:
            record = fastavro.schemaless_reader(stream, self._writer, self._reader)
        # Bytes that are not this schema's raise whatever the reader trips on first (EOFError,
        # IndexError, UnicodeDecodeError, ValueError, SchemaResolutionError, ...).
        except Exception as exc:
            raise undecodable(self._schema_id, f"{type(exc).__name__}: {exc}") from None
        if stream.tell() != len(payload):
            # The schema did not account for every byte: not the schema it was written with.
            raise undecodable(
                self._schema_id, f"{len(payload) - stream.tell()} bytes left after the record"
            )
        if not isinstance(record, dict):
            raise InvalidEvent(
                Reason.NOT_AN_OBJECT,
                f"schema {self._schema_id} is not a record: got {type(record).__name__}",
            )
        return record


class AvroEncoder:
    """Encodes records of one schema of ours (a results-topic shape) as Avro binary."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = fastavro.parse_schema(schema)

    def encode(self, record: dict[str, Any]) -> bytes:
        stream = io.BytesIO()
        fastavro.schemaless_writer(stream, self._schema, record)
        return stream.getvalue()
