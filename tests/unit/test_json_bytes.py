"""Records held until the broker acknowledges them cost their length, not orjson's rounding.

orjson returns its output in a bytes object allocated for 64 KiB when a 256-float result
needs 5 KB; thousands of results waiting to be written then held 13 times their bytes
(278 MiB in a soak, bench/soak_heap.py). tracemalloc counts what each record really holds.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import orjson
import pytest
from embedstream.wire import ChunkResult, DocumentComplete, DocumentIncomplete, EmbedResult
from embedstream.wire.json_bytes import record_json

VECTOR = [i / 257 for i in range(256)]  # a 256-dimensions result: about 5 KB of JSON
HELD = 200
# A bytes object's header and the allocator's rounding, beside its length.
OVERHEAD = 64


def held_per_record(encode: Callable[[], bytes]) -> tuple[float, int]:
    """(bytes allocated per record kept alive, the record's length)."""
    if tracemalloc.is_tracing():  # someone else's trace (python -X tracemalloc): leave it be
        pytest.skip("tracemalloc is already tracing")
    encode()  # anything allocated once (caches, interned names) stays out of the count
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [encode() for _ in range(HELD)]
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return allocated / HELD, len(kept[0])


ENCODERS: dict[str, Callable[[], bytes]] = {
    "result": EmbedResult("r1", "m", VECTOR, 256, 12, {"k": "v"}, 1, 41.5).encode,
    "chunk result": ChunkResult(
        "d1", "v1", 0, 3, (0, 40), VECTOR, "m", 256, 12, False, None, 1, 41.5
    ).encode,
    "document complete": DocumentComplete("d1", "v1", 3, None).encode,
    "document incomplete": DocumentIncomplete("d1", "v1", 3, (1,), None).encode,
    "record_json": lambda: record_json({"embedding": VECTOR}),
}


@pytest.mark.parametrize("name", list(ENCODERS))
def test_an_encoded_record_holds_its_length_only(name: str) -> None:
    per_record, length = held_per_record(ENCODERS[name])
    assert per_record <= length + OVERHEAD, f"{name}: {per_record:.0f} bytes held for {length}"


def test_record_json_is_orjson_output() -> None:
    doc = {"id": "a", "embedding": VECTOR, "metadata": {"x": [1, 2]}, "none": None}
    assert record_json(doc) == orjson.dumps(doc)
    assert type(record_json(doc)) is bytes
