"""The real clock (see :mod:`embedstream.core.clock`)."""

from __future__ import annotations

import time


class SystemClock:
    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()
