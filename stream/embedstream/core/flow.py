"""Backpressure through Kafka: which partitions to pause, and how much one fetch may bring. Pure.

Memory is bounded by `limit` held items (read but not finished). Low-priority input may fill
only `LOW_SHARE` of it, and the rest is high's reserve: high records are fetched while high's
own holding is under it, whatever low holds. Low can hold more than its share after it was
read (its results waiting for the broker count their bytes), and before the reserve a flood's
waiting results stopped the high lane's fetching with them. While the provider is
rate-limiting or down, low input stops first. Resuming waits until the held count falls below
half the threshold that paused (hysteresis), so partitions do not flap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

P = TypeVar("P")

LOW_SHARE = 0.8
RESUME_FRACTION = 0.5


def low_ceiling(limit: int) -> int:
    """What low-priority input may fill: one whole number for both the pause and the fetch
    budget. With 0.8 x 16,384 = 13,107.2 as the pause threshold and 13,107 as the budget's
    ceiling, a buffer held at 13,107 neither paused low nor let anything be fetched, high
    included, until low work finished (a second at a time in the kafka-flood bench)."""
    return int(LOW_SHARE * limit)


def high_reserve(limit: int) -> int:
    """What high-priority input may always hold, whatever low holds: the part of ``limit``
    low may not fill."""
    return limit - low_ceiling(limit)


def partitions_to_pause(
    *,
    held: int,
    high_held: int,
    limit: int,
    provider_blocked: bool,
    assigned: Iterable[P],
    paused: set[P],
    is_high: Callable[[P], bool],
) -> set[P]:
    """The set of partitions that should be paused now; ``high_held``: the part of ``held``
    that is high-priority input."""
    assigned = set(assigned)
    high = {p for p in assigned if is_high(p)}
    low = assigned - high
    low_threshold = low_ceiling(limit)
    if provider_blocked:
        pause_low = True
        pause_high = held >= RESUME_FRACTION * limit
    else:
        pause_low = _hysteresis(held, low_threshold, bool(paused & low))
        high_paused = bool(paused & high)
        pause_high = _hysteresis(held, limit, high_paused) and _hysteresis(
            high_held, high_reserve(limit), high_paused
        )
    return (low if pause_low else set()) | (high if pause_high else set())


def _hysteresis(held: int, threshold: float, currently_paused: bool) -> bool:
    if held >= threshold:
        return True
    return currently_paused and held >= RESUME_FRACTION * threshold


def fetch_budget(
    *, held: int, high_held: int, limit: int, low_fetching: bool, max_poll: int
) -> int:
    """Most records one fetch may return without breaking the bounds above. With low paused
    only high records come: at least what is left of high's reserve."""
    if low_fetching:
        return max(0, min(max_poll, low_ceiling(limit) - held))
    room = max(limit - held, high_reserve(limit) - high_held)
    return max(0, min(max_poll, room))
