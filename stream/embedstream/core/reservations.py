"""Which lane gets the next call slot, and how much of the budget each lane may take. Pure:
time and the counts come in.

Lanes are served top-down (`Priority`: online, high, low, backfill). One rule, for any number
of lanes:

1. No free slot (the in-flight total at the current limit, which AIMD may lower): nothing.
2. **Reservations.** Each upper lane keeps slots free of every lane below it:
   ``reserved_slots`` while it is active (an item waiting, or one seen within ``recent_s``),
   ``idle_slots`` otherwise (high keeps one at all times: a high item then waits behind at
   most one low call). A lane may hold ``limit`` minus what the lanes above it keep, but
   never less than its floor: one slot for every lane, and for a lane with a minimum share,
   ``ceil(min_share * limit)`` slots, short of the last one. An upper lane may keep
   ``EVERY_SLOT``: while it is active the lanes below it hold their floor only (low does so
   for the backfill, which has no minimum share: one call at a time, so it always moves on).
3. **Smaller calls below an active lane.** While an upper lane is active, the calls of the
   lanes below it hold at most its ``lower_call_items`` inputs: the provider (and our event
   loop) spends on a call of thousands of inputs a stretch of work that the upper lane's
   small call would queue behind. A lane held to a latency target (``core/targets.py``)
   steers that size from its own calls' latency instead of a fixed figure.
4. **Minimum shares.** When several lanes could take the slot, each one below the top
   candidate earns its ``min_share`` as credit; once a lane's credit reaches 1 it takes the
   slot and pays 1 (the lowest such lane first). Otherwise the top candidate goes. Credit
   grows only while a lane competes, so an idle or capped lane builds no debt to burst with,
   and over N contended picks a lane gets more than ``min_share * N - 1`` of them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from embedstream.core.lanes import Priority
from embedstream.core.targets import LaneTarget

# reserved_slots of a lane that keeps every slot it can from the lanes below it while active.
EVERY_SLOT = 1 << 30
# Summing a share such as 0.1 ten times gives 0.9999999999999999; without this slack a lane's
# turn would slip by one pick now and then.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class LaneTerms:
    """What one lane keeps from the lanes below it, and what it keeps for itself."""

    reserved_slots: int = 0  # kept free of lower lanes' calls while this lane is active
    idle_slots: int = 0  # ... and while it is not
    lower_call_items: int | None = None  # most inputs in a lower lane's call while active
    min_share: float = 0.0  # of the picks it competes for with upper lanes
    recent_s: float = 1.0  # an item seen this recently makes the lane active

    def __post_init__(self) -> None:
        if self.reserved_slots < 0 or self.idle_slots < 0:
            raise ValueError("reserved_slots and idle_slots must be >= 0")
        if self.lower_call_items is not None and self.lower_call_items < 1:
            raise ValueError(f"lower_call_items must be >= 1 or None, got {self.lower_call_items}")
        if not 0.0 <= self.min_share < 1.0:
            raise ValueError(f"min_share must be in [0, 1), got {self.min_share}")
        if not self.recent_s >= 0:
            raise ValueError(f"recent_s must be >= 0, got {self.recent_s}")


class Reservations:
    """The rule above over the lanes of `terms` (a lane without terms keeps nothing)."""

    def __init__(
        self,
        terms: Mapping[Priority, LaneTerms],
        targets: Mapping[Priority, LaneTarget] | None = None,
    ) -> None:
        """``targets``: lanes held to a latency target; their lower calls' size is steered."""
        self.terms = {lane: terms.get(lane, LaneTerms()) for lane in Priority}
        self.targets = dict(targets or {})
        self._last_seen: dict[Priority, float] = {}
        self._credit: dict[Priority, float] = dict.fromkeys(Priority, 0.0)

    def observe(self, lane: Priority, latency_s: float, now: float) -> None:
        """A call of ``lane`` answered; its oldest item took ``latency_s``."""
        target = self.targets.get(lane)
        if target is not None:
            target.observe(latency_s, now)

    def saw(self, lane: Priority, now: float) -> None:
        """An item of ``lane`` arrived at ``now``."""
        if now > self._last_seen.get(lane, -math.inf):
            self._last_seen[lane] = now

    def active(self, lane: Priority, now: float) -> bool:
        """An item of ``lane`` was seen within its ``recent_s`` (the batcher reports the
        lanes with buffered items as seen at each pass, so a waiting item counts)."""
        seen = self._last_seen.get(lane)
        return seen is not None and now - seen <= self.terms[lane].recent_s

    def slot_cap(self, lane: Priority, limit: int, now: float) -> int:
        """Most calls ``lane`` may have in flight at ``now`` under the in-flight ``limit``."""
        active = {upper for upper in Priority if upper < lane and self.active(upper, now)}
        return self.slot_cap_when(lane, limit, active)

    def slot_cap_when(self, lane: Priority, limit: int, active: Collection[Priority]) -> int:
        """Most calls ``lane`` may have in flight under ``limit`` while the lanes in
        ``active`` are active (the rule of step 2, with activity given)."""
        kept = 0
        for upper in Priority:
            if upper >= lane:
                break
            terms = self.terms[upper]
            kept += terms.reserved_slots if upper in active else terms.idle_slots
        if kept == 0:
            return limit
        share = math.ceil(self.terms[lane].min_share * limit - _EPSILON)
        floor = max(1, min(share, limit - 1))
        return max(floor, limit - kept)

    def slot_table(self, limit: int) -> list[int]:
        """Every lane's slot cap under ``limit`` for every set of active lanes, as a flat
        list indexed ``lane * 2**len(Priority) + mask`` (bit i of the mask: lane i active).
        A store that decides for a fleet (a Lua script) applies the rule by looking it up,
        so the rule itself is written once, here."""
        masks = 1 << len(Priority)
        return [
            self.slot_cap_when(lane, limit, {p for p in Priority if mask >> p & 1})
            for lane in Priority
            for mask in range(masks)
        ]

    def call_cap(self, lane: Priority, max_items: int, now: float) -> int:
        """Most inputs in one call of ``lane`` at ``now``."""
        cap = max_items
        for upper in Priority:
            if upper >= lane:
                break
            target = self.targets.get(upper)
            items = target.lower_call_items if target else self.terms[upper].lower_call_items
            if items is not None and self.active(upper, now):
                cap = min(cap, items)
        return cap

    def pick(
        self,
        ready: Collection[Priority],
        in_flight: Mapping[Priority, int],
        limit: int,
        now: float,
    ) -> Priority | None:
        """The lane to dispatch from now, or None. Picking commits the credits, so call it
        only when you will dispatch what it returns."""
        if sum(in_flight.values()) >= limit:
            return None
        candidates = [
            lane
            for lane in Priority
            if lane in ready and in_flight.get(lane, 0) < self.slot_cap(lane, limit, now)
        ]
        if not candidates:
            return None
        chosen = candidates[0]
        for lane in reversed(candidates[1:]):  # each competing lane earns its share
            self._credit[lane] += self.terms[lane].min_share
        for lane in reversed(candidates[1:]):
            if self._credit[lane] >= 1.0 - _EPSILON:
                self._credit[lane] -= 1.0
                chosen = lane
                break
        return chosen
