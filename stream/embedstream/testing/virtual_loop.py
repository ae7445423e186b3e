"""An event loop in virtual time: when nothing is ready to run, its clock jumps to the next
timer. The real asyncio shell (sleeps, timers, tasks) runs unchanged and at once, and every
time it reads (`loop.time`, passed in as the clock) is exact: for benchmarks of policy in
virtual time and for tests of the batcher's own loop."""

from __future__ import annotations

import asyncio


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        if not self._ready:  # type: ignore[attr-defined]
            timers = [h.when() for h in self._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
            if timers and min(timers) > self._now:
                self._now = min(timers)
        super()._run_once()  # type: ignore[misc]


class LoopClock:
    """A :class:`embedstream.core.clock.Clock` that reads the loop's time: on a
    :class:`VirtualLoop`, the runtime's clock moves with its sleeps and timers."""

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_ms: int = 1_767_225_600_000) -> None:
        self._loop = loop
        self._epoch_ms = epoch_ms

    def monotonic(self) -> float:
        return self._loop.time()

    def wall_ms(self) -> int:
        return self._epoch_ms + int(self._loop.time() * 1000)
