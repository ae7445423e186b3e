"""Exponential backoff with jitter; randomness is injected so tests can pin it."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    base_s: float = 0.5
    cap_s: float = 30.0
    jitter: float = 0.5  # the delay is drawn from [1 - jitter, 1] x the exponential step

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Delay before attempt ``attempt + 1``; never shorter than the provider's retry-after."""
        # The exponent stops growing once the cap is reached: a batch held a thousand times
        # (a long outage) overflowed the float and failed its dispatch.
        doublings = min(max(attempt - 1, 0), 64)
        step = min(self.cap_s, self.base_s * 2.0**doublings)
        drawn: float = step * (1.0 - self.jitter * rng.random())
        return max(drawn, retry_after or 0.0)
