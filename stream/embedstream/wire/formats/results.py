"""The results topic's records in a registry format: the encoder that frames each record with
the id the registry gave its shape's schema (`output_schemas.py`), and the reverse step a reader
needs after decoding a framed value with its schema. Pure; registering the schemas is the
caller's I/O (``engine/schema_decoders.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from embedstream.wire.events import EmbedResult
from embedstream.wire.formats.output_schemas import AVRO, CHUNK, END, JSON_SCHEMA, RESULT
from embedstream.wire.registry_frames import write_frame
from embedstream.wire.result_records import ChunkResult, DocumentComplete, DocumentIncomplete
from embedstream.wire.vectors import Vector, base64_floats


class _RecordEncoder(Protocol):
    def encode(self, record: dict[str, Any]) -> bytes: ...


class ResultEncoder:
    """Every record of the results topic as a framed value of its registered schema:
    ``schema_ids`` maps each record name (`output_schemas.RECORD_NAMES`) to its id."""

    def __init__(self, output_format: str, schema_ids: Mapping[str, int]) -> None:
        self._ids = dict(schema_ids)
        self._avro = output_format == "avro"
        self._encoders: dict[str, _RecordEncoder]
        if self._avro:
            from embedstream.wire.formats.avro import AvroEncoder

            self._encoders = {name: AvroEncoder(schema) for name, schema in AVRO.items()}
        elif output_format == "json_schema":
            from embedstream.wire.formats.json_schema import JsonSchemaEncoder

            self._encoders = {name: JsonSchemaEncoder(s) for name, s in JSON_SCHEMA.items()}
        else:
            raise ValueError(f"no registry result format {output_format!r}; avro or json_schema")

    def encode(self, result: EmbedResult) -> bytes:
        return self._frame(RESULT, self.record(result))

    def encode_chunk(self, chunk: ChunkResult) -> bytes:
        fields = chunk.fields()
        fields["embedding"] = _floats(chunk.embedding)
        fields["span"] = list(chunk.span)
        fields["metadata"] = self._metadata(chunk.metadata)
        fields.setdefault("index_generation", None)
        return self._frame(CHUNK, fields)

    def encode_end(self, end: DocumentComplete | DocumentIncomplete) -> bytes:
        fields = end.fields()
        fields["missing"] = list(getattr(end, "missing", ()))
        fields["metadata"] = self._metadata(end.metadata)
        fields.setdefault("index_generation", None)
        if not self._avro and not fields["missing"]:
            del fields["missing"]  # the JSON value of a complete record has none
        return self._frame(END, fields)

    def record(self, result: EmbedResult) -> dict[str, Any]:
        return {
            "id": result.id,
            "model": result.model,
            "embedding": _floats(result.embedding),
            "dimensions": result.dimensions,
            "usage": {"tokens": result.tokens},
            "metadata": self._metadata(result.metadata),
            "attempts": result.attempts,
            "latency_ms": round(result.latency_ms, 3),
            "cached": result.cached,
            "index_generation": result.index_generation,
        }

    def _frame(self, name: str, fields: dict[str, Any]) -> bytes:
        return write_frame(self._ids[name], self._encoders[name].encode(fields))

    def _metadata(self, metadata: dict[str, Any] | None) -> Any:
        if self._avro and metadata is not None:
            return orjson.dumps(metadata).decode()
        return metadata


def _floats(embedding: Vector) -> list[float]:
    # The schemas say array of floats: a base64 vector (encoding_format=base64) is written as
    # its floats, the one representation a schema-aware reader expects.
    return list(base64_floats(embedding)) if isinstance(embedding, str) else embedding


def output_fields(decoded: dict[str, Any]) -> dict[str, Any]:
    """A results-topic record decoded with its registry schema, as the fields its JSON value
    would hold (`wire.documents.output_of` validates them): Avro's metadata text parsed back.
    A metadata text that is not a JSON object is left as it is, for validation to refuse."""
    metadata = decoded.get("metadata")
    if isinstance(metadata, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            decoded["metadata"] = orjson.loads(metadata)
    return decoded
