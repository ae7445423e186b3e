"""Registry-framed values to request dicts: the frame, the schema of its id (from the
registry client), the format decoder built from it (kept per id), and the field mapping.
Also the result side: register the schema of each results-topic record shape and return the
encoder that frames records with their ids, and read framed records back (the store writer).

A decoder is built once per schema id and kept, bounded; a schema that is not of the topic's
format or does not parse is kept as that error, since an id's schema never changes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from embedstream.engine.registry import RegistryClient
from embedstream.errors import InvalidEvent, RegistryUnavailable
from embedstream.wire.field_mapping import FieldMapping, MappedEvent, map_fields
from embedstream.wire.formats import PayloadDecoder, build_decoder
from embedstream.wire.formats.changelog_schemas import (
    ChangelogEncoder,
    changelog_schema,
    changelog_subject,
)
from embedstream.wire.formats.output_schemas import RECORD_NAMES, output_schema, record_subject
from embedstream.wire.formats.results import ResultEncoder, output_fields
from embedstream.wire.registry_frames import parse_frame


class SchemaDecoders:
    def __init__(
        self,
        client: RegistryClient,
        input_format: str,
        mapping: FieldMapping,
        *,
        reader_schema: str | None = None,
        max_schemas: int = 1000,
    ) -> None:
        self._client = client
        self._input_format = input_format
        self._mapping = mapping
        self._reader_schema = reader_schema
        self._max_schemas = max_schemas
        self._decoders: OrderedDict[int, PayloadDecoder | InvalidEvent] = OrderedDict()
        # The registry's last failure to answer a schema look-up, until one succeeds:
        # what /readyz reports.
        self.outage: RegistryUnavailable | None = None

    async def decode(self, raw: bytes | None) -> MappedEvent:
        """The request fields of one framed value. Raises InvalidEvent (dead-letter the record)
        or RegistryUnavailable (an outage: pause, retry the same record later)."""
        frame = parse_frame(raw)
        decoder = await self.decoder(frame.schema_id)
        return map_fields(decoder.decode(frame.payload), self._mapping)

    async def decoder(self, schema_id: int) -> PayloadDecoder:
        found = self._decoders.get(schema_id)
        if found is None:
            try:
                schema = await self._client.schema(schema_id)
            except RegistryUnavailable as exc:
                self.outage = exc
                raise
            self.outage = None
            try:
                # protoc and schema parsing take milliseconds: off the event loop.
                found = await asyncio.to_thread(
                    build_decoder, self._input_format, schema, reader_schema=self._reader_schema
                )
            except InvalidEvent as exc:
                found = exc
            self._decoders[schema_id] = found
            while len(self._decoders) > self._max_schemas:
                self._decoders.popitem(last=False)
        else:
            self._decoders.move_to_end(schema_id)
        if isinstance(found, InvalidEvent):
            raise InvalidEvent(found.reason, found.message)
        return found


async def result_encoder(
    client: RegistryClient, output_format: str, results_topic: str
) -> ResultEncoder:
    """Register the schema of each record shape of the results topic (at start-up;
    idempotent) under TopicRecordNameStrategy, and the encoder that uses their ids."""
    ids: dict[str, int] = {}
    for name in RECORD_NAMES:
        schema_type, text = output_schema(output_format, name)
        ids[name] = await client.register(record_subject(results_topic, name), schema_type, text)
    return ResultEncoder(output_format, ids)


async def changelog_encoder(
    client: RegistryClient, output_format: str, changelog_topic: str
) -> ChangelogEncoder:
    """Register the chunk changelog's schema under ``<topic>-value`` (at start-up; idempotent),
    and the encoder that uses its id."""
    schema_type, text = changelog_schema(output_format)
    schema_id = await client.register(changelog_subject(changelog_topic), schema_type, text)
    return ChangelogEncoder(output_format, schema_id)


class FramedOutputs:
    """The store writer's reader of framed results-topic values: the schema of the frame's id
    (from the registry, decoders kept per id), then the fields as a JSON value holds them."""

    def __init__(self, decoders: SchemaDecoders) -> None:
        self._decoders = decoders

    async def decode(self, raw: bytes) -> dict[str, Any]:
        """Raises InvalidEvent (dead-letter the record) or RegistryUnavailable (an outage)."""
        frame = parse_frame(raw)
        decoder = await self._decoders.decoder(frame.schema_id)
        return output_fields(decoder.decode(frame.payload))
