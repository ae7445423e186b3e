"""Checks of the fields of a results-topic value, each raising :class:`InvalidEvent` with
reason ``invalid_result`` and a message naming the field (:mod:`embedstream.wire.result_records`
decodes records with them)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.events import INDEX_GENERATION, MAX_ID_CHARS
from embedstream.wire.headers import INDEX_GENERATION_HEADER
from embedstream.wire.vectors import all_finite, base64_floats

MAX_VERSION_CHARS = 512
GENERATION_ID_CHARS = 8
_GENERATION_ID = re.compile(f"[0-9a-f]{{{GENERATION_ID_CHARS}}}")


def header_generation(headers: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    for name, value in headers or ():
        if name == INDEX_GENERATION_HEADER:
            text = (value or b"").decode("utf-8", "replace")
            if not _GENERATION_ID.fullmatch(text):
                invalid(f"header {name} must be {GENERATION_ID_CHARS} lower-case hex digits")
            return text
    return None


def generation(doc: dict[str, Any]) -> str | None:
    value = doc.get(INDEX_GENERATION)
    if value is None:
        return None
    if not isinstance(value, str) or not _GENERATION_ID.fullmatch(value):
        invalid(f"field '{INDEX_GENERATION}' must be {GENERATION_ID_CHARS} lower-case hex digits")
    return value


def invalid(message: str) -> NoReturn:
    raise InvalidEvent(Reason.INVALID_RESULT, message)


def string(doc: dict[str, Any], name: str, limit: int) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        invalid(f"field '{name}' must be a non-empty string")
    if len(value) > limit:
        invalid(f"field '{name}' is longer than {limit} characters")
    return value


def doc_id(doc: dict[str, Any]) -> str:
    return string(doc, "doc_id", MAX_ID_CHARS)


def version(doc: dict[str, Any]) -> str:
    return string(doc, "version", MAX_VERSION_CHARS)


def integer(doc: dict[str, Any], name: str, minimum: int) -> int:
    value = doc.get(name)
    if type(value) is not int or value < minimum:  # bool is an int subclass: not a count
        invalid(f"field '{name}' must be an integer >= {minimum}")
    return value


def count(doc: dict[str, Any]) -> int:
    return integer(doc, "chunk_count", 0)


def boolean(doc: dict[str, Any], name: str, default: bool | None = None) -> bool:
    value = doc.get(name, default)
    if not isinstance(value, bool):
        invalid(f"field '{name}' must be true or false")
    return value


def tokens(doc: dict[str, Any]) -> int:
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        invalid("field 'usage' must be an object with 'tokens'")
    return integer(usage, "tokens", 0)


def latency(doc: dict[str, Any]) -> float:
    value = doc.get("latency_ms")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        invalid("field 'latency_ms' must be a number >= 0")
    return float(value)


def metadata(doc: dict[str, Any]) -> dict[str, Any] | None:
    value = doc.get("metadata")
    if value is not None and not isinstance(value, dict):
        invalid("field 'metadata' must be an object or null")
    return value


def span(doc: dict[str, Any]) -> tuple[int, int]:
    value = doc.get("span")
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(type(end) is int for end in value)
        or not 0 <= value[0] <= value[1]
    ):
        invalid("field 'span' must be [start, end] with 0 <= start <= end")
    return value[0], value[1]


def embedding(doc: dict[str, Any]) -> tuple[list[float], int]:
    """The vector as floats (base64 decoded by the one codec) and its checked dimensions."""
    value = doc.get("embedding")
    if isinstance(value, str):
        try:
            floats = base64_floats(value).tolist()
        except ValueError as exc:
            raise InvalidEvent(Reason.INVALID_RESULT, f"field 'embedding': {exc}") from None
    elif isinstance(value, list):
        floats = value
    else:
        raise InvalidEvent(
            Reason.INVALID_RESULT, "field 'embedding' must be a float list or base64"
        )
    try:
        # The one-sum test, then per value: finite values near 1e308 can overflow a sum.
        finite = all_finite(floats) or all(math.isfinite(x) for x in floats)
    except TypeError:
        invalid("field 'embedding' must hold only numbers")
    if not floats or not finite:
        invalid("field 'embedding' must be a non-empty vector of finite numbers")
    dimensions = integer(doc, "dimensions", 1)
    if dimensions != len(floats):
        invalid(f"field 'dimensions' is {dimensions} but the embedding has {len(floats)}")
    return floats, dimensions
