"""Per-minute request and token budgets the simulator enforces and announces, as OpenAI does.

Every answer carries ``x-ratelimit-limit-*`` (the budget per minute), ``-remaining-*`` (what
may be sent now) and ``-reset-*`` (a Go-style duration until the budget is whole again) for
``requests`` and ``tokens``; a call over budget gets a 429 with ``retry-after``.

A budget is a bucket refilled continuously at ``per_minute / 60`` per second that holds
``burst_s`` seconds of refill. At 60 s it is the minute's whole allowance, as announced;
providers also enforce over shorter periods (OpenAI: "your rate limit may be quantized"), and
a shorter ``burst_s`` makes a test of a few seconds meet the limit instead of living on a
minute's burst. Pure: time comes in as ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


class Quota:
    def __init__(self, kind: str, per_minute: float, burst_s: float, now: float) -> None:
        if not per_minute > 0 or not burst_s > 0:
            raise ValueError("per_minute and burst_s must be > 0")
        self.kind = kind  # "requests" or "tokens", as in the header names
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.capacity = self.rate * burst_s
        self._level = self.capacity
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._level = min(self.capacity, self._level + (now - self._at) * self.rate)
            self._at = now

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` fits (0: it fits now). Takes nothing."""
        self._refill(now)
        # More than the bucket holds never fits: ask for the time to fill it, as OpenAI
        # answers a request over the token limit with the time to a full budget.
        missing = min(amount, self.capacity) - self._level
        return max(0.0, missing / self.rate)

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self._level = max(0.0, self._level - amount)

    def headers(self, now: float) -> dict[str, str]:
        self._refill(now)
        return {
            f"x-ratelimit-limit-{self.kind}": str(math.floor(self.per_minute)),
            f"x-ratelimit-remaining-{self.kind}": str(math.floor(self._level)),
            f"x-ratelimit-reset-{self.kind}": go_duration(
                (self.capacity - self._level) / self.rate
            ),
        }


def go_duration(seconds: float) -> str:
    """A duration as OpenAI writes it: ``"20ms"``, ``"1.5s"``, ``"6m0s"``."""
    if seconds < 1.0:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60.0)
    rest = round(rest, 3)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class Quotas:
    """The requests and tokens budgets of one simulator; either may be off (0 per minute)."""

    def __init__(self, rpm: float, tpm: float, burst_s: float, now: float) -> None:
        self.budgets = [
            Quota(kind, per_minute, burst_s, now)
            for kind, per_minute in (("requests", rpm), ("tokens", tpm))
            if per_minute > 0
        ]

    def admit(self, tokens: int, now: float) -> float:
        """Take one request of ``tokens`` if both budgets allow it now (0.0); else take
        nothing and return the seconds until they would."""
        amounts = {"requests": 1.0, "tokens": float(tokens)}
        wait = max((q.wait(amounts[q.kind], now) for q in self.budgets), default=0.0)
        if wait == 0.0:
            for quota in self.budgets:
                quota.take(amounts[quota.kind], now)
        return wait

    def headers(self, now: float) -> Mapping[str, str]:
        out: dict[str, str] = {}
        for quota in self.budgets:
            out.update(quota.headers(now))
        return out
