"""Whether another provider call may start now, and from which lane.

Combines the lanes' reservations (`core/reservations.py`: upper lanes first, slots kept for
them, the lower lanes' minimum shares and call caps), the in-flight
limit (fixed or AIMD), the provider gate (retry-after and exhausted rate-limit headers), the
optional RPM/TPM buckets of the settings and the budgets the provider announces in its
headers. A call may start only when every one of them allows it, and until then the batcher
keeps buffering, so under a tight budget calls get fewer and bigger by themselves. Pure: the
clock is injected, outcomes are reported to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping

from embedstream.core.budget import FleetView
from embedstream.core.calibration import TokenCalibration
from embedstream.core.concurrency import ConcurrencyLimit, ProviderGate
from embedstream.core.lanes import Priority
from embedstream.core.outage import OutageDetector
from embedstream.core.ratelimit import AnnouncedBudget, RateLimits
from embedstream.core.reservations import EVERY_SLOT, LaneTerms, Reservations
from embedstream.core.targets import LaneTarget
from embedstream.errors import EmbedStreamError, ProviderWideError, Reason, http_reason

# A 429 that names no retry-after still closes the gate this long: calling again at once
# would only earn another 429.
DEFAULT_RATE_LIMIT_PAUSE_S = 1.0
OVERLOAD_REASONS = frozenset({Reason.RATE_LIMITED, http_reason(503)})
# Failures that, repeated across calls with no success between, mean the provider is down
# rather than these items being bad: hold work instead of burning attempts on an outage.
OUTAGE_REASONS = frozenset(
    {Reason.CONNECTION, Reason.TIMEOUT, *(http_reason(s) for s in (500, 502, 503, 504))}
)


def default_lanes(
    min_share: float, *, online: LaneTerms | None = None
) -> dict[Priority, LaneTerms]:
    """The lanes' terms: high keeps one slot from the lanes below at all times; high and low
    keep ``min_share`` of the picks they compete for; ``online`` (the HTTP lane, when served).
    The backfill takes what the others leave: while low is active it keeps every slot from
    the backfill but the one call of its floor; the backfill has no share of its own."""
    high = LaneTerms(idle_slots=1, reserved_slots=1, min_share=min_share)
    return {
        Priority.ONLINE: online or LaneTerms(),
        Priority.HIGH: high,
        Priority.LOW: LaneTerms(reserved_slots=EVERY_SLOT, min_share=min_share),
        Priority.BACKFILL: LaneTerms(),
    }


class Governor:
    def __init__(
        self,
        *,
        max_concurrency: int,
        clock: Callable[[], float],
        adaptive: bool = False,
        target_latency_s: float | None = None,
        min_low_share: float = 0.1,
        rpm: float | None = None,
        tpm: float | None = None,
        lanes: Mapping[Priority, LaneTerms] | None = None,
        targets: Mapping[Priority, LaneTarget] | None = None,
    ) -> None:
        """`lanes`: what each lane keeps from those below it (`core/reservations.py`); by
        default high keeps one slot from low, and low and high keep `min_low_share`.
        `targets`: lanes held to a latency target (`core/targets.py`)."""
        self._clock = clock
        self.reservations = Reservations(lanes or default_lanes(min_low_share), targets)
        self.limit = ConcurrencyLimit(
            max_concurrency, adaptive=adaptive, target_latency_s=target_latency_s
        )
        self.gate = ProviderGate()
        self.rates = RateLimits(rpm or None, tpm or None)
        self.announced = AnnouncedBudget()
        self.calibration = TokenCalibration()  # the pace counts tokens as the provider does
        self.in_flight = 0
        self._lane_in_flight: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self._outage = OutageDetector()  # when the provider counts as down (see core/outage)
        self._refused = False  # the last answer refused everyone (bad key, unknown model)
        self._held_until = -math.inf  # hold(): until then, or until the provider serves again
        # The rest of the fleet as last seen, when the budget is shared (`core/budget.py`).
        self.fleet: FleetView | None = None
        self.seen_here: dict[Priority, float] = {}  # lanes' items seen in this process

    def active_here(self) -> list[Priority]:
        """The lanes with items seen in this process within their ``recent_s`` (what a
        member tells the fleet is active here)."""
        now = self._clock()
        terms = self.reservations.terms
        return [lane for lane, at in self.seen_here.items() if now - at <= terms[lane].recent_s]

    def see_fleet(self, view: FleetView) -> None:
        """The fleet's use of the budget, as a store answer gave it: other members' calls
        count against the limit and the lanes' slots, a lane active anywhere keeps its
        reservations here, and the shared gate and pace hold this member's calls."""
        self.fleet = view
        for lane, at in view.active_at.items():
            self.reservations.saw(lane, at)

    @property
    def capacity(self) -> int:
        """Calls in flight allowed now: the limit, or this member's share of it while a
        shared budget's store is out of reach."""
        fleet = self.fleet
        if fleet is not None and not fleet.shared:
            return fleet.share(self.limit.limit)
        return self.limit.limit

    def _others(self, lane: Priority) -> int:
        fleet = self.fleet
        return fleet.others_in_flight.get(lane, 0) if fleet is not None and fleet.shared else 0

    def _in_flight_everywhere(self) -> dict[Priority, int]:
        return {lane: count + self._others(lane) for lane, count in self._lane_in_flight.items()}

    @property
    def provider_usable(self) -> bool:
        """False while the provider refuses everyone or looks down: readiness and pausing."""
        return not self._refused and not self.provider_down

    @property
    def provider_down(self) -> bool:
        """Calls have failed like an outage, with no success between, for a while."""
        return self._outage.down(self._clock())

    def blocked_for(self) -> float:
        """Seconds until a call may start: the gate, then the request budgets' pace."""
        now = self._clock()
        held = self.fleet.blocked_until - now if self.fleet is not None else 0.0
        return max(
            self.gate.blocked_for(now), self.rates.wait(now), self.announced.wait(now), held,
            self._held_until - now,
        )  # fmt: skip

    def pick(self, ready: Collection[Priority]) -> Priority | None:
        """The lane that may start a call now, of those with a batch ``ready``, or None;
        commits the lanes' share credit."""
        if self.blocked_for() > 0:
            return None
        now = self._clock()
        return self.reservations.pick(ready, self._in_flight_everywhere(), self.capacity, now)

    def saw(self, lane: Priority) -> None:
        """An item of ``lane`` arrived (or is still buffered): the lane counts as active."""
        now = self._clock()
        self.reservations.saw(lane, now)
        self.seen_here[lane] = now

    def call_cap(self, lane: Priority, max_items: int) -> int:
        """Most inputs in the next call of ``lane`` (fewer while an upper lane is active)."""
        now = self._clock()
        cap = self.reservations.call_cap(lane, max_items, now)
        if self.fleet is not None:  # what the members steering an upper lane allow
            for upper, items in self.fleet.lower_call_items.items():
                if upper < lane and self.reservations.active(upper, now):
                    cap = min(cap, items)
        return cap

    def lane_in_flight(self, lane: Priority) -> int:
        return self._lane_in_flight[lane]

    def lane_slots(self, lane: Priority) -> int:
        """Calls this lane may have in flight at once here (in a fleet: less the other
        members' calls of the lane)."""
        cap = self.reservations.slot_cap(lane, self.capacity, self._clock())
        return max(0, cap - self._others(lane))

    def idle_slots(self, lane: Priority) -> int:
        """Calls this lane could start now, the one being started included: the slots a
        backlog is spread over."""
        return max(1, self.free_slots(lane))

    def free_slots(self, lane: Priority) -> int:
        """Calls this lane could start now (0 when none): within the in-flight limit, the
        lane's reservations and the call budgets."""
        others = sum(self._others(other) for other in Priority)
        free = self.capacity - self.in_flight - others
        free = min(free, self.lane_slots(lane) - self._lane_in_flight[lane])
        now = self._clock()
        budget = min(self.rates.calls_now(now), self.announced.calls_now(now))
        return max(0, min(free, math.floor(budget) if math.isfinite(budget) else free))

    def started(self, lane: Priority) -> None:
        self.in_flight += 1
        self._lane_in_flight[lane] += 1

    def finished(self, lane: Priority, oldest_s: float | None = None) -> None:
        """A call of ``lane`` ended; ``oldest_s``: how long its oldest item took, from
        arrival to the answer (steers a lane held to a target)."""
        self.in_flight -= 1
        self._lane_in_flight[lane] -= 1
        if oldest_s is not None:
            self.reservations.observe(lane, oldest_s, self._clock())

    def room_wait(self, lane: Priority, tokens: int) -> float:
        """Seconds a call of ``lane`` waits, reserving nothing, for the RPM/TPM buckets to hold
        it whole while a lane above it is active (0: it may reserve now). The buckets' debt is
        a queue in the order of reserving: a bulk call's would hold the high lane behind it."""
        now = self._clock()
        if not any(self.reservations.active(upper, now) for upper in Priority if upper < lane):
            return 0.0
        counted = self.calibration.scale(tokens)
        return max(
            self.rates.room_wait(counted, now), self.announced.limits.room_wait(counted, now)
        )

    def reserve(self, tokens: int) -> float:
        """Seconds to hold a call so RPM/TPM limits are kept (0 when unlimited)."""
        now = self._clock()
        counted = self.calibration.scale(tokens)
        return max(self.rates.reserve(counted, now), self.announced.reserve(counted, now))

    def on_success(self, latency_s: float, headers: Mapping[str, str]) -> None:
        now = self._clock()
        self._outage.success(now)
        self._refused = False
        if not self._outage.down(now):  # serving again: an outage's or refusal's hold ends
            self._held_until = -math.inf
        self.limit.on_success(latency_s, now)
        self.gate.from_headers(headers, now)
        self.announced.observe(headers, now, unanswered=max(0, self.in_flight - 1))

    def on_failure(self, error: EmbedStreamError) -> None:
        now = self._clock()
        if isinstance(error, ProviderWideError):
            self._refused = True
        elif error.reason not in OUTAGE_REASONS and error.reason != Reason.RATE_LIMITED:
            self._refused = False  # an answer about these items: the provider is there
        if error.reason in OUTAGE_REASONS:
            self._outage.failure(now)
        if error.reason in OVERLOAD_REASONS:
            self.limit.on_overload(now)
            pause = error.retry_after
            if pause is None and error.reason == Reason.RATE_LIMITED:
                pause = DEFAULT_RATE_LIMIT_PAUSE_S
            if pause:
                self.gate.block_until(now + pause)
        elif isinstance(error, ProviderWideError) and error.retry_after:
            self.gate.block_until(now + error.retry_after)

    def hold(self, seconds: float) -> None:
        """Hold every call (while the provider is down or refuses the key), until ``seconds``
        pass or a call succeeds with the provider no longer down (`engine/probe.py`)."""
        self._held_until = max(self._held_until, self._clock() + seconds)
