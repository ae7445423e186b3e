"""Partitions held back while an input dependency is out (the Schema Registry): which ones, and
until when. Pure: the clock reading is passed in.

A record whose schema cannot be fetched is not admitted: its partition is paused and sought back
to it, and read again once its hold ends. Holds in a row double the wait, from FIRST_HOLD_S up to
MAX_HOLD_S (a registry's Retry-After is honoured within that cap); a quiet spell of MAX_HOLD_S
after the last hold ended starts again from the short wait, so the next blip is retried quickly.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")

FIRST_HOLD_S = 0.5
MAX_HOLD_S = 10.0


class HoldBacks(Generic[K]):
    def __init__(self, first_s: float = FIRST_HOLD_S, max_s: float = MAX_HOLD_S) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self._next_s = first_s
        self._until: dict[K, float] = {}
        self._last_until = float("-inf")

    def hold(self, key: K, now: float, retry_after_s: float | None = None) -> float:
        """Hold ``key`` back from ``now``; how long, in seconds."""
        if now > self._last_until + self._max_s:
            self._next_s = self._first_s  # a new outage, not the same one going on
        wait = min(self._max_s, max(self._next_s, retry_after_s or 0.0))
        self._next_s = min(self._max_s, wait * 2)
        self._until[key] = max(self._until.get(key, now), now + wait)
        self._last_until = max(self._last_until, now + wait)
        return wait

    def held(self, now: float) -> set[K]:
        """The keys still held back at ``now`` (ended holds are forgotten)."""
        for key in [key for key, until in self._until.items() if until <= now]:
            del self._until[key]
        return set(self._until)
