"""Per-key limits of the online lane's callers: requests and inputs per second, as token
buckets of one second's burst, so an indexing job holding a key cannot jump the queue through
the top lane. Pure: time comes in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from embedstream.core.ratelimit import TokenBucket


class KeyLimits:
    """`limits`: {key name: {"requests_per_s" / "inputs_per_s": rate}}; a name without
    limits is never limited."""

    def __init__(self, limits: Mapping[str, Mapping[str, float]]) -> None:
        self._buckets: dict[str, list[tuple[TokenBucket, bool]]] = {}
        for name, rates in limits.items():
            buckets = []
            for field, rate in rates.items():
                per_input = field == "inputs_per_s"
                buckets.append((TokenBucket(rate, max(rate, 1.0)), per_input))
            self._buckets[name] = buckets

    def admit(self, name: str, inputs: int, now: float) -> float:
        """0 (and the request is counted) if ``name`` may send a request of ``inputs`` now;
        else the seconds until it could, nothing counted. A request larger than a second's
        allowance goes once its bucket is full, and pays it back before the next."""
        buckets = self._buckets.get(name)
        if not buckets:
            return 0.0
        wait = 0.0
        for bucket, per_input in buckets:
            amount = inputs if per_input else 1
            wait = max(wait, bucket.wait(min(amount, bucket.burst), now))
        if wait > 0:
            return wait
        for bucket, per_input in buckets:
            bucket.reserve(inputs if per_input else 1, now)
        return 0.0


def retry_after(wait_s: float) -> int:
    """Whole seconds for a Retry-After header: at least 1."""
    return max(1, math.ceil(wait_s))
