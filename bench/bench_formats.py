"""Decode cost per record of each input format: JSON (today's ``decode_request``) beside the
Schema Registry formats (Avro, JSON Schema, Protobuf) for one typical request.

    python bench/bench_formats.py [--seconds 1]

A benchmark, not a test: it asserts nothing. One request (a ~120-character text, a small
metadata object, a model), written in each format; each side runs for ``--seconds`` of wall
time in this one process and reports process CPU microseconds per record. A registry record's
cost is the whole path to a validated ``EmbedRequest``: the frame, the format decoder (built
once per schema id, as the runtime keeps it), the field mapping and the same validation JSON
events get. Schema fetching is not counted: the runtime does it once per id.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Callable
from typing import Any

import fastavro
import orjson
from embedstream.wire import EmbedRequest, decode_request, request_from_doc
from embedstream.wire.field_mapping import FieldMapping, map_fields
from embedstream.wire.formats import PayloadDecoder, RegistrySchema, build_decoder
from embedstream.wire.formats.protobuf import compile_proto
from embedstream.wire.registry_frames import parse_frame, write_frame
from google.protobuf import descriptor_pool, json_format, message_factory

TEXT = (
    "Kafka topics carry events from many producers; embedstream batches them adaptively and "
    "sends each batch to the provider."
)
REQUEST: dict[str, Any] = {
    "id": "req-000123",
    "text": TEXT,
    "model": "text-embedding-3-small",
    "metadata": {"source": "crm", "tenant": "acme", "page": 3},
}
AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Request",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "text", "type": "string"},
        {"name": "model", "type": ["null", "string"], "default": None},
        {"name": "metadata", "type": {"type": "map", "values": ["string", "long"]}},
    ],
}
JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "text": {"type": "string"},
        "model": {"type": "string"},
        "metadata": {"type": "object"},
    },
    "required": ["id", "text"],
}
PROTO = """syntax = "proto3";
import "google/protobuf/struct.proto";
message Request {
  string id = 1;
  string text = 2;
  string model = 3;
  google.protobuf.Struct metadata = 4;
}
"""


def avro_value() -> tuple[bytes, RegistrySchema]:
    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, fastavro.parse_schema(AVRO_SCHEMA), REQUEST)
    return write_frame(1, stream.getvalue()), RegistrySchema(1, "AVRO", json.dumps(AVRO_SCHEMA))


def json_schema_value() -> tuple[bytes, RegistrySchema]:
    return write_frame(2, orjson.dumps(REQUEST)), RegistrySchema(2, "JSON", json.dumps(JSON_SCHEMA))


def protobuf_value() -> tuple[bytes, RegistrySchema]:
    pool = descriptor_pool.DescriptorPool()
    for file in compile_proto({"request.proto": PROTO}, "request.proto"):
        pool.Add(file)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("Request"))
    message = json_format.ParseDict(REQUEST, cls())
    return write_frame(3, message.SerializeToString(), (0,)), RegistrySchema(3, "PROTOBUF", PROTO)


def registry_path(fmt: str, decoder: PayloadDecoder) -> Callable[[bytes], EmbedRequest]:
    mapping = FieldMapping()

    def decode(raw: bytes) -> EmbedRequest:
        frame = parse_frame(raw)
        return request_from_doc(map_fields(decoder.decode(frame.payload), mapping).fields)

    return decode


def cpu_us_per_record(decode: Callable[[bytes], object], raw: bytes, seconds: float) -> float:
    for _ in range(200):  # warm-up
        decode(raw)
    records = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < seconds:
        for _ in range(100):
            decode(raw)
        records += 100
    return (time.process_time() - cpu0) / records * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    json_raw = orjson.dumps(REQUEST)
    rows: list[tuple[str, int, float]] = [
        ("json", len(json_raw), cpu_us_per_record(decode_request, json_raw, args.seconds))
    ]
    expected = decode_request(json_raw)
    for fmt, make in (
        ("avro", avro_value),
        ("json_schema", json_schema_value),
        ("protobuf", protobuf_value),
    ):
        raw, schema = make()
        decode = registry_path(fmt, build_decoder(fmt, schema))
        # Protobuf's Struct has numbers only as doubles: page 3 comes back as 3.0.
        assert decode(raw).text == expected.text, fmt
        rows.append((fmt, len(raw), cpu_us_per_record(decode, raw, args.seconds)))
    baseline = rows[0][2]
    print(f"{'format':<12} {'bytes':>6} {'µs/record':>10} {'x json':>7}")
    for fmt, size, us in rows:
        print(f"{fmt:<12} {size:>6} {us:>10.2f} {us / baseline:>7.1f}")


if __name__ == "__main__":
    main()
