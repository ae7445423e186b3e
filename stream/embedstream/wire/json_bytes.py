"""JSON records at their own size: orjson's output copied into a bytes object that fits it.

orjson (3.12 and later) returns a bytes object whose allocation is rounded up and never shrunk:
4 KiB for the smallest document, 64 KiB for a 5 KB result of 256 floats. A record is held
until the broker acknowledges it, and thousands wait at once behind a slow broker: in a soak
at 500 requests/s, 4,392 results waiting to be written held 278 MiB (63 KiB each, tracemalloc,
bench/soak_heap.py), against 22 MiB of their bytes. The copy costs a few microseconds a
record, against the dumps itself and the producer's work for it.
"""

from __future__ import annotations

from typing import Any

import orjson


def record_json(doc: Any) -> bytes:
    """``orjson.dumps(doc)``, in a bytes object allocated for its length only."""
    return memoryview(orjson.dumps(doc)).tobytes()
