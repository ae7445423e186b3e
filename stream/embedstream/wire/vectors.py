"""The vector codec: float lists and base64 of little-endian float32."""

from __future__ import annotations

import base64
import binascii
import math
import sys
from array import array
from collections.abc import Iterable

Vector = list[float] | str  # a float list, or base64 of little-endian float32

_LITTLE_ENDIAN = sys.byteorder == "little"


def encode_base64(vector: Iterable[float]) -> str:
    """OpenAI's base64 encoding: little-endian float32 bytes, base64-encoded."""
    floats = array("f", vector)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return base64.b64encode(floats.tobytes()).decode("ascii")


def base64_floats(encoded: str) -> array[float]:
    """The float32 values of a base64 vector, decoded in bulk. Raises ValueError if malformed."""
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"invalid base64 ({exc})") from None
    if len(data) % 4:
        raise ValueError(f"base64 payload of {len(data)} bytes is not a float32 array")
    floats = array("f")
    floats.frombytes(data)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return floats


def float32_bytes(vector: Vector) -> bytes:
    """A vector (float list or base64) as little-endian float32 bytes: how the cache stores it."""
    if isinstance(vector, str):
        return base64.b64decode(vector, validate=True)
    floats = array("f", vector)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return floats.tobytes()


def vector_from_float32(data: bytes, encoding_format: str) -> Vector:
    """Inverse of :func:`float32_bytes`, in the encoding a request asked for. Raises ValueError
    for bytes that are not a float32 array."""
    if not data or len(data) % 4:
        raise ValueError(f"{len(data)} bytes are not a float32 array")
    if encoding_format == "base64":
        return base64.b64encode(data).decode("ascii")
    floats = array("f")
    floats.frombytes(data)
    if not _LITTLE_ENDIAN:
        floats.byteswap()
    return floats.tolist()


def decode_base64(encoded: str) -> list[float]:
    """Inverse of :func:`encode_base64`."""
    return base64_floats(encoded).tolist()


def base64_dimensions(encoded: str) -> int:
    """How many float32 values a base64 vector holds, without decoding it."""
    padding = encoded[-2:].count("=")
    return (len(encoded) * 3 // 4 - padding) // 4


def base64_float_count(encoded: str) -> int:
    """Like :func:`base64_dimensions`, but checked: ValueError unless the length is that of
    a whole float32 array (the provider's answer is not trusted)."""
    padding = 2 if encoded.endswith("==") else 1 if encoded.endswith("=") else 0
    size = len(encoded) // 4 * 3 - padding
    if not encoded or len(encoded) % 4 or size % 4:
        raise ValueError(f"base64 of {len(encoded)} characters is no float32 array")
    return size // 4


def all_finite(values: Iterable[float]) -> bool:
    """True when no value is NaN or infinite: one sum instead of a check per float (NaN and
    infinity propagate through a sum; finite float32 values cannot overflow a double)."""
    return math.isfinite(sum(values))
