"""What the low lane leaves to the high lane while high traffic is recent. Pure: time comes in.

The lane scheduler already keeps one call slot from low batches (``core/scheduler.py``). Under a
low flood that is not enough for a high request to be answered within a few call latencies:

- a high item that arrives while the previous high call is still out waits for it (or for a
  low call of up to a second to end): ``reserved_slots`` call slots are kept free of low
  calls while high traffic is recent, so consecutive high calls overlap;
- the provider (and our own event loop) spends on each big low call a stretch of work that a
  high call queues behind (building and parsing a 2,048-vector answer): ``low_call_items``
  caps the inputs of a low call while high traffic is recent, so each stretch is short.

"Recent" is a high item seen within ``recent_s``. Outside that window nothing changes, so a
low backlog alone drains exactly as before. Off unless the ``high_guard`` setting is on: in
virtual time (``bench/bench_flood.py --virtual``) the scheduler's one kept slot already holds
the high P99 to 81 ms under a 60,000-item flood, and on Apache Kafka on a shared 2-core machine
(``embedstream bench --scenarios kafka-flood,kafka-mixed --high-guard``) its gain was within
the noise, where the process's share of a core, not a slot, set the high latency. The low
lane keeps at least ``ceil(min_low_share * max_concurrency)`` slots, and always one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class HighGuard:
    recent_s: float = 1.0
    reserved_slots: int = 2
    low_call_items: int | None = 512
    _last_high: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.recent_s >= 0:
            raise ValueError(f"recent_s must be >= 0, got {self.recent_s}")
        if self.reserved_slots < 1:
            raise ValueError(f"reserved_slots must be >= 1, got {self.reserved_slots}")
        if self.low_call_items is not None and self.low_call_items < 1:
            raise ValueError(f"low_call_items must be >= 1 or None, got {self.low_call_items}")

    def saw_high(self, now: float) -> None:
        """A high item arrived (or is still buffered) at ``now``."""
        if self._last_high is None or now > self._last_high:
            self._last_high = now

    def active(self, now: float) -> bool:
        return self._last_high is not None and now - self._last_high <= self.recent_s

    def low_slot_cap(self, max_concurrency: int, min_low_share: float, now: float) -> int:
        """Most low calls in flight at ``now``: all but one slot, or all but
        ``reserved_slots`` while high traffic is recent, never under low's minimum share."""
        reserved = self.reserved_slots if self.active(now) else 1
        floor = max(1, math.ceil(min_low_share * max_concurrency - 1e-9))
        return max(floor, max_concurrency - reserved)

    def low_call_cap(self, max_items: int, now: float) -> int:
        """Most inputs in one low call at ``now``."""
        if self.low_call_items is None or not self.active(now):
            return max_items
        return min(max_items, self.low_call_items)
