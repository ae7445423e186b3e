"""Schema Registry payload formats: a registry schema in, a decoder of payloads to dicts out.

One module per format library (``avro``: fastavro, ``json_schema``: jsonschema, ``protobuf``:
the protobuf runtime), each imported only when its format is used, so a JSON-only deployment
needs none of them (they are the ``registry`` extra). Pure: the schemas come in as text from
the caller (``engine/registry.py`` fetches them); every failure is an :class:`InvalidEvent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from embedstream.errors import InvalidEvent, Reason

# input_format / output_format setting value -> the registry's schemaType.
SCHEMA_TYPES = {"avro": "AVRO", "json_schema": "JSON", "protobuf": "PROTOBUF"}


@dataclass(frozen=True, slots=True)
class SchemaReference:
    """A schema another one imports: its name in the importer (an Avro full name, a .proto
    import path, a JSON Schema ``$ref`` URL) and its text."""

    name: str
    schema: str


@dataclass(frozen=True, slots=True)
class RegistrySchema:
    """A schema as the registry serves it for one id; ``schema_type`` is AVRO, JSON or PROTOBUF
    (the registry omits it for Avro)."""

    schema_id: int
    schema_type: str
    schema: str
    references: tuple[SchemaReference, ...] = ()


class PayloadDecoder(Protocol):
    def decode(self, payload: bytes) -> dict[str, Any]:
        """The record as a dict of plain values; raises InvalidEvent."""
        ...


def build_decoder(
    input_format: str, schema: RegistrySchema, *, reader_schema: str | None = None
) -> PayloadDecoder:
    """The decoder of payloads written with ``schema``. ``reader_schema`` (Avro only): resolve
    every writer version to this one, so the fields a consumer sees do not depend on the
    version a producer used (fields added later get their defaults)."""
    expected = SCHEMA_TYPES.get(input_format)
    if expected is None:
        raise ValueError(f"no registry format {input_format!r}; one of {sorted(SCHEMA_TYPES)}")
    if schema.schema_type != expected:
        raise InvalidEvent(
            Reason.WRONG_SCHEMA_TYPE,
            f"schema {schema.schema_id} is {schema.schema_type}, the topic's format is"
            f" {input_format} ({expected})",
        )
    if input_format == "avro":
        from embedstream.wire.formats.avro import AvroDecoder

        return AvroDecoder(schema, reader_schema=reader_schema)
    if input_format == "json_schema":
        from embedstream.wire.formats.json_schema import JsonSchemaDecoder

        return JsonSchemaDecoder(schema)
    from embedstream.wire.formats.protobuf import ProtobufDecoder

    return ProtobufDecoder(schema)


def invalid_schema(schema: RegistrySchema, problem: object) -> InvalidEvent:
    return InvalidEvent(
        Reason.INVALID_SCHEMA,
        f"{schema.schema_type} schema {schema.schema_id} from the registry does not parse: "
        f"{problem}",
    )


def undecodable(schema_id: int, problem: object) -> InvalidEvent:
    return InvalidEvent(
        Reason.UNDECODABLE_PAYLOAD,
        f"payload does not decode with schema {schema_id}: {problem}",
    )
