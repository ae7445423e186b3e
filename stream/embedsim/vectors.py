"""The simulator's vectors and token counts: deterministic per (model, text), so any consumer
can check that an embedding belongs to the text it was attached to. Pure."""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
import sys
from array import array
from collections.abc import Sequence
from types import ModuleType

_np: ModuleType | None
try:  # optional (the bench extra brings it): the same vectors, computed faster
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is in the dev extra
    _np = None

# --------------------------------------------------------------------------- vectors


def expected_vector(model: str, text: str, dimensions: int) -> list[float]:
    """The unit vector the simulator returns for ``text`` embedded by ``model``.

    shake_256 over the length-prefixed model name followed by the text (so no
    (model, text) pair can collide with another) yields ``dimensions`` signed 32-bit ints
    that are scaled to unit L2 norm. The hash makes it stable across processes
    (unlike ``hash()``), and because shake output is a prefix-stable stream a
    smaller ``dimensions`` is the renormalised prefix of a larger one, like
    OpenAI's shortened embeddings. Components are rounded to float32 so the
    "float" and "base64" encodings carry exactly the same numbers.
    """
    return _unit_float32(model, text, dimensions).tolist()


def expected_vector_base64(model: str, text: str, dimensions: int) -> str:
    """:func:`expected_vector` in OpenAI's base64 encoding, without a list in between."""
    vector = _unit_float32(model, text, dimensions)
    if sys.byteorder != "little":
        vector.byteswap()
    return base64.b64encode(vector.tobytes()).decode("ascii")


def _unit_float32(model: str, text: str, dimensions: int) -> array[float]:
    # The same float64 products, each rounded to float32, with or without numpy: numpy only
    # does the multiplying and the rounding in C (the simulator's CPU was the bound of the
    # backlog benchmarks on two cores: 70 us a vector in Python, a quarter of that here).
    if dimensions < 1:
        raise ValueError(f"dimensions must be >= 1, got {dimensions}")
    model_bytes = _utf8(model)
    seed = len(model_bytes).to_bytes(4, "little") + model_bytes + _utf8(text)
    digest = hashlib.shake_256(seed).digest(4 * dimensions)
    raw = array("i", digest)
    if sys.byteorder != "little":
        raw.byteswap()
    norm = math.hypot(*raw)
    if norm == 0.0:  # all-zero hash output: astronomically unlikely, but stay a unit vector
        return array("f", [1.0] + [0.0] * (dimensions - 1))
    scale = 1.0 / norm
    if _np is None:
        return array("f", [component * scale for component in raw])
    scaled = (_np.frombuffer(raw, dtype=_np.int32) * scale).astype(_np.float32)
    return array("f", scaled.tobytes())


def encode_base64(vector: Sequence[float]) -> str:
    """OpenAI's base64 encoding: little-endian float32 bytes, base64-encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def decode_base64(encoded: str) -> list[float]:
    """Inverse of :func:`encode_base64`."""
    data = base64.b64decode(encoded, validate=True)
    if len(data) % 4:
        raise ValueError(f"base64 payload of {len(data)} bytes is not a float32 array")
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def _utf8(text: str) -> bytes:
    # JSON may legally carry lone surrogates; hash them rather than crash.
    return text.encode("utf-8", "surrogatepass")


# --------------------------------------------------------------------------- tokens

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Approximate token count: runs of word characters plus single punctuation marks.

    Counts matches of ``\\w+|[^\\w\\s]``; any non-empty text counts as at least one
    token (whitespace-only text too). It is no tokenizer, only a deterministic
    stand-in of roughly the right magnitude so that token limits and token-based
    latency behave plausibly.
    """
    if not text:
        return 0
    return max(1, len(_TOKEN.findall(text)))
