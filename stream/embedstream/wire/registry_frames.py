"""The Confluent Schema Registry wire format: read and write the frame around a payload. Pure.

A framed value is the magic byte 0, the schema id as 4 bytes big-endian, then the payload.
Protobuf payloads start with the message-index array that names the message type within the
schema's file: zig-zag varints, the count and then each index; the common case ``[0]`` (the
file's first message) is written as a single 0 byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.errors import InvalidEvent, Reason

MAGIC_BYTE = 0
HEADER_BYTES = 5
MAX_SCHEMA_ID = 0xFFFF_FFFF
# A real nesting path is a handful of indexes deep; a count far above that is garbage.
MAX_MESSAGE_INDEXES = 64
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True, slots=True)
class Frame:
    schema_id: int
    payload: bytes


def parse_frame(raw: bytes | None) -> Frame:
    """Split a framed value into its schema id and payload."""
    if raw is None:
        raise InvalidEvent(Reason.EMPTY_VALUE, "record has no value")
    if not raw or raw[0] != MAGIC_BYTE:
        first = f"0x{raw[0]:02x}" if raw else "nothing"
        raise InvalidEvent(
            Reason.NO_MAGIC_BYTE,
            f"value does not start with the Schema Registry magic byte 0 (got {first});"
            " was it written by a registry serializer?",
        )
    if len(raw) < HEADER_BYTES:
        raise InvalidEvent(
            Reason.TRUNCATED_FRAME,
            f"value is {len(raw)} bytes, shorter than the {HEADER_BYTES}-byte frame header",
        )
    return Frame(int.from_bytes(raw[1:HEADER_BYTES], "big"), raw[HEADER_BYTES:])


def write_frame(
    schema_id: int, payload: bytes, message_indexes: tuple[int, ...] | None = None
) -> bytes:
    """Frame a payload; ``message_indexes`` only for Protobuf (``(0,)``: the first message)."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} does not fit in 4 bytes")
    header = bytes((MAGIC_BYTE,)) + schema_id.to_bytes(4, "big")
    if message_indexes is None:
        return header + payload
    return header + encode_message_indexes(message_indexes) + payload


def encode_message_indexes(indexes: tuple[int, ...]) -> bytes:
    if indexes == (0,):
        return b"\x00"  # the serializers' shorthand for the first message
    return b"".join(_zigzag_varint(value) for value in (len(indexes), *indexes))


def parse_message_indexes(payload: bytes) -> tuple[tuple[int, ...], bytes]:
    """The Protobuf message-index path at the start of a payload, and the message bytes."""
    count, offset = _read_zigzag(payload, 0)
    if count == 0:
        return (0,), payload[offset:]
    if not 0 < count <= MAX_MESSAGE_INDEXES:
        raise InvalidEvent(
            Reason.INVALID_MESSAGE_INDEXES, f"message-index count {count} is out of range"
        )
    indexes = []
    for _ in range(count):
        index, offset = _read_zigzag(payload, offset)
        if index < 0:
            raise InvalidEvent(Reason.INVALID_MESSAGE_INDEXES, f"message index {index} is negative")
        indexes.append(index)
    return tuple(indexes), payload[offset:]


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_zigzag(data: bytes, offset: int) -> tuple[int, int]:
    result = 0
    for shift_count in range(_MAX_VARINT_BYTES):
        if offset >= len(data):
            raise InvalidEvent(
                Reason.INVALID_MESSAGE_INDEXES, "payload ends inside the message-index array"
            )
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << (7 * shift_count)
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), offset
    raise InvalidEvent(Reason.INVALID_MESSAGE_INDEXES, "message-index varint is too long")
