"""The chunk changelog's values in registry formats: registered at start under
``<changelog>-value`` beside the results' schemas, framed with that id, and readable with the
schema alone (Avro through fastavro, JSON Schema validated)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import fastavro
import jsonschema
import orjson
import pytest
from embedstream.core.holdback import HoldBacks
from embedstream.engine.registry import RegistryClient, RegistryConfig
from embedstream.engine.result_schema import ResultSchemaRegistration
from embedstream.settings import load_settings
from embedstream.testing.registry import TestRegistry
from embedstream.wire.changelog import ChangelogChunk
from embedstream.wire.formats.changelog_schemas import CHANGELOG_AVRO, CHANGELOG_JSON_SCHEMA
from embedstream.wire.registry_frames import parse_frame
from embedstream.wire.vectors import encode_base64

CHUNK = ChangelogChunk(
    "handbook/leave.md", "12", 2, (100, 180), encode_base64([0.5, -0.25, 0.125]), "m", 3,
    "0a1b2c3d", {"lang": "en"}, text="Every employee ...",
)  # fmt: skip


@pytest.mark.parametrize("output_format", ["avro", "json_schema"])
async def test_changelog_values_in_a_registry_format(output_format: str) -> None:
    async with TestRegistry() as registry:
        settings = load_settings(env={}, overrides={
            "output_format": output_format, "schema_registry_url": registry.url,
        })  # fmt: skip
        async with RegistryClient(RegistryConfig(registry.url)) as client:
            start = ResultSchemaRegistration(
                settings, client, "embed.results", holds=HoldBacks(0.01, 0.04),
                changelog_topic="ix.chunks",
            )  # fmt: skip
            assert await asyncio.wait_for(start.encoder(asyncio.Event()), 10) is not None
        assert "POST /subjects/ix.chunks-value/versions" in registry.paths
        encoder = start.changelog_values
        assert encoder is not None
        frame = parse_frame(encoder.encode(CHUNK))
    assert frame.schema_id == registry.register(
        "ix.chunks-value", orjson.dumps(_schema(output_format)).decode(),
        "AVRO" if output_format == "avro" else "JSON",
    )  # fmt: skip
    decoded: Any
    if output_format == "avro":
        decoded = fastavro.schemaless_reader(io.BytesIO(frame.payload), CHANGELOG_AVRO, None)
    else:
        decoded = orjson.loads(frame.payload)
        jsonschema.validate(decoded, CHANGELOG_JSON_SCHEMA)
    assert decoded == CHUNK.payload()
    assert decoded["embedding"] == [0.5, -0.25, 0.125]  # base64 in, floats out


def _schema(output_format: str) -> dict[str, Any]:
    return CHANGELOG_AVRO if output_format == "avro" else CHANGELOG_JSON_SCHEMA
