"""Bounds derived from the settings rather than set: the buffer's item bound, sized to fill the
batches asked for within the byte bound.

Measured (tracemalloc, 20,000 admitted requests of ~120 characters with a small metadata
object): an admitted item costs about 885 bytes of Python objects besides its record's value,
so a buffered item is counted as its value's bytes plus ITEM_RESIDENT_BYTES against
``max_buffered_bytes``: the byte bound then bounds what the buffer costs, not only what the
requests weighed on the wire. A result waiting for the broker's ack counts its record's
bytes on top (kafka/outputs/outcomes.py): behind a slow broker nearly every held item is one.
"""

from __future__ import annotations

ITEM_RESIDENT_BYTES = 1_024

# What the buffer may hold: at least this many items (when the byte bound has room for them).
MIN_BUFFERED_ITEMS = 5_000


def buffered_items_bound(
    max_batch_size: int, max_concurrency: int, max_buffered_bytes: int, item_bytes: int
) -> int:
    """The most items the buffer holds: two full calls per slot (one round in flight, the
    next one cut and waiting), so the batches the user asked for can fill; never under
    MIN_BUFFERED_ITEMS nor one batch, and within ``max_buffered_bytes`` at ``item_bytes`` per
    buffered item (the byte bound wins, down to one batch)."""
    for name, value in (
        ("max_batch_size", max_batch_size),
        ("max_concurrency", max_concurrency),
        ("max_buffered_bytes", max_buffered_bytes),
        ("item_bytes", item_bytes),
    ):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    wanted = max(MIN_BUFFERED_ITEMS, 2 * max_batch_size * max_concurrency)
    return max(max_batch_size, min(wanted, max_buffered_bytes // item_bytes))
