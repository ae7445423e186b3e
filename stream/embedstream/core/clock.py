"""Time as an object passed in: the composition root hands one clock to every part.

Two readings, because they answer different questions: wall time (epoch milliseconds) for
what is written or compared across processes (timestamps, deadlines, a retry's not-before
time), and monotonic seconds for how long something took or may still take here. The real
clock is :class:`embedstream.engine.clock.SystemClock`; tests pass a fake one.
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
