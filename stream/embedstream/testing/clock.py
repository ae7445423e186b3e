"""Time that moves only when a test says so (passed in where the runtime takes a clock)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """Monotonic time that moves only when told to."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
