"""`embedstream produce --format avro|json_schema|protobuf --schema FILE`: JSON lines as records
of that schema, in the Schema Registry wire format.

The schema is registered under ``<topic>-value`` (TopicNameStrategy, as the serializers do)
before the first line is sent; each line must fit it, or produce stops naming the line (a
record that does not fit a schema cannot be written in its format at all). Protobuf lines are
messages of the file's first message type (message index 0). Keys are the record's doc_id if
it has one, else its id, at the paths ``field_map`` names, as the processor reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from embedstream.engine.formats import field_mapping, registry_client
from embedstream.errors import EmbedStreamError, InvalidEvent
from embedstream.settings import Settings
from embedstream.wire.field_mapping import lookup
from embedstream.wire.formats import SCHEMA_TYPES, RegistrySchema
from embedstream.wire.registry_frames import write_frame

FORMATS = tuple(SCHEMA_TYPES)


class LineFraming:
    """JSON objects to framed values of one registered schema, and their keys."""

    def __init__(
        self,
        settings: Settings,
        schema_id: int,
        encode: Callable[[dict[str, Any]], bytes],
        message_indexes: tuple[int, ...] | None = None,
    ) -> None:
        self._schema_id = schema_id
        self._encode = encode
        self._indexes = message_indexes
        mapping = field_mapping(settings)
        self._key_paths = tuple(p for p in (mapping.doc_id_field, mapping.id_field) if p)

    def value(self, doc: dict[str, Any]) -> bytes:
        return write_frame(self._schema_id, self._encode(doc), self._indexes)

    def key(self, doc: dict[str, Any]) -> bytes | None:
        for path in self._key_paths:
            found = lookup(doc, path)
            if isinstance(found, str | int) and not isinstance(found, bool):
                return str(found).encode()
        return None


async def line_framing(settings: Settings, fmt: str, schema: str, topic: str) -> LineFraming:
    """Register ``schema`` (its text) under ``<topic>-value``; the framing of its lines."""
    encode, indexes = record_encoder(fmt, schema)
    async with registry_client(settings) as client:
        schema_id = await client.register(f"{topic}-value", SCHEMA_TYPES[fmt], schema)
    return LineFraming(settings, schema_id, encode, indexes)


def record_encoder(
    fmt: str, schema: str
) -> tuple[Callable[[dict[str, Any]], bytes], tuple[int, ...] | None]:
    """The encoder of records of ``schema`` and its message indexes (Protobuf); an
    EmbedStreamError (one line) if the schema is not one of ``fmt``."""
    try:
        if fmt == "avro":
            from embedstream.wire.formats.avro import AvroEncoder

            return AvroEncoder(orjson.loads(schema)).encode, None
        if fmt == "json_schema":
            return _json_schema_encoder(schema), None
        return _protobuf_encoder(schema), (0,)
    except (ValueError, TypeError, KeyError, InvalidEvent) as exc:
        raise EmbedStreamError(f"--schema: not a {fmt} schema: {exc}") from None


def _json_schema_encoder(schema: str) -> Callable[[dict[str, Any]], bytes]:
    from embedstream.wire.formats.json_schema import JsonSchemaDecoder

    validator = JsonSchemaDecoder(RegistrySchema(0, "JSON", schema))

    def encode(doc: dict[str, Any]) -> bytes:
        payload = orjson.dumps(doc)
        validator.decode(payload)  # a line that breaks the schema is refused here
        return payload

    return encode


def _protobuf_encoder(schema: str) -> Callable[[dict[str, Any]], bytes]:
    from google.protobuf import descriptor_pool, json_format, message_factory

    from embedstream.wire.formats.protobuf import compile_proto

    files = compile_proto({"schema.proto": schema}, "schema.proto")
    pool = descriptor_pool.DescriptorPool()
    for file in files:
        pool.Add(file)
    main = files[-1]
    if not main.message_type:
        raise ValueError("the file defines no message")
    name = ".".join(part for part in (main.package, main.message_type[0].name) if part)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    def encode(doc: dict[str, Any]) -> bytes:
        try:
            message = json_format.ParseDict(doc, cls())
        except json_format.ParseError as exc:
            raise ValueError(str(exc)) from None
        data: bytes = message.SerializeToString()
        return data

    return encode
