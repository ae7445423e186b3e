"""How fast items arrive in a lane: an exponentially weighted rate, time passed in.

The batcher feeds it every item it buffers; the fill rule (``core/policy.fill_wait``) asks it
how soon a call's worth of items will have come. Pure: time comes in as ``now``.
"""

from __future__ import annotations

import math

# About the last second counts: a change of rate is followed within a second or two, and a
# burst of a few milliseconds moves the estimate by what it adds over that second.
TIME_CONSTANT_S = 0.25


class ArrivalRate:
    """Items per second, weighted ``exp(-age / time_constant_s)``."""

    def __init__(self, time_constant_s: float = TIME_CONSTANT_S) -> None:
        if not time_constant_s > 0:
            raise ValueError("time_constant_s must be > 0")
        self.time_constant_s = time_constant_s
        self._level = 0.0  # weighted count / time constant, as of `_at`
        self._at: float | None = None

    def add(self, now: float, count: int = 1) -> None:
        self._level = self.per_s(now) + count / self.time_constant_s
        self._at = now if self._at is None else max(self._at, now)

    def per_s(self, now: float) -> float:
        if self._at is None:
            return 0.0
        return self._level * math.exp(-max(now - self._at, 0.0) / self.time_constant_s)
