"""Which lane gets the next free call slot: high first, low guaranteed a minimum share.

Rules, in order:

1. No free slot (``in_flight >= max_concurrency``): nothing is dispatched.
2. Low batches hold at most ``max(1, max_concurrency - 1)`` slots, so with two or more slots one
   is always left for high: a newly arrived high item waits behind at most one low batch
   already sent, and only when ``max_concurrency`` is 1.
3. When both lanes could take the slot, low earns ``min_low_share`` credit; once the credit
   reaches 1 low takes the slot and pays 1. Otherwise high goes first whenever it is ready.

The credit grows only while both lanes compete, so a lane that was idle or capped builds no
debt it would later collect in a burst. Since it is earned before it is spent and stays below
1 after every pick, over N contended picks low gets more than ``min_low_share * N - 1``, and
with ``min_low_share <= 0.5`` two low picks in a row are never forced while high waits.
"""

from __future__ import annotations

from embedstream.core.lanes import Priority

# Summing a share such as 0.1 ten times gives 0.9999999999999999; without this slack low's
# turn would slip by one pick now and then.
_EPSILON = 1e-9


class LaneScheduler:
    def __init__(self, min_low_share: float, max_concurrency: int) -> None:
        if not 0.0 <= min_low_share < 1.0:
            raise ValueError(f"min_low_share must be in [0, 1), got {min_low_share}")
        self.min_low_share = min_low_share
        self.set_max_concurrency(max_concurrency)
        self._credit = 0.0  # low's claim on the next contended slot

    @property
    def max_concurrency(self) -> int:
        return self._max_concurrency

    @property
    def low_slot_cap(self) -> int:
        return max(1, self._max_concurrency - 1)

    def set_max_concurrency(self, n: int) -> None:
        """Follow the (possibly adaptive) in-flight limit; the credit is kept."""
        if n < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {n}")
        self._max_concurrency = n

    def pick(
        self,
        high_ready: bool,
        low_ready: bool,
        low_in_flight: int,
        in_flight: int,
        low_cap: int | None = None,
    ) -> Priority | None:
        """The lane to dispatch from now, or None. ``low_cap`` narrows rule 2 (e.g. more slots
        kept for high while high traffic is recent: ``core/highguard.py``).

        Picking commits the credit, so call it only when you will dispatch what it returns.
        """
        if not 0 <= low_in_flight <= in_flight:
            raise ValueError(f"need 0 <= low_in_flight <= in_flight: {low_in_flight}, {in_flight}")
        if in_flight >= self._max_concurrency:
            return None
        cap = self.low_slot_cap if low_cap is None else min(low_cap, self.low_slot_cap)
        low_ok = low_ready and low_in_flight < cap
        if high_ready and low_ok:
            self._credit += self.min_low_share
            if self._credit >= 1.0 - _EPSILON:
                self._credit -= 1.0
                return Priority.LOW
            return Priority.HIGH
        if high_ready:
            return Priority.HIGH
        return Priority.LOW if low_ok else None
