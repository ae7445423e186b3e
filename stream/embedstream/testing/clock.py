"""Time that moves only when a test says so (passed in where the runtime takes a clock)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """Time that moves only when told to: monotonic seconds (`now`, or calling it) and a wall
    clock `epoch_ms` ahead of it (a :class:`embedstream.core.clock.Clock`)."""

    now: float = 0.0
    epoch_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return self.epoch_ms + int(self.now * 1000)

    def advance(self, seconds: float) -> None:
        self.now += seconds
