"""Prometheus metrics of the provider budget a process draws on, on its registry.

With a shared budget (`budget_url`), each member reports the fleet as its last store answer
showed it (members, calls in flight per lane) beside its own leases, so a dashboard reads the
fleet's use from any member and each member's share from its own series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from embedstream.core.lanes import Priority

BUDGET_METRIC_NAMES: frozenset[str] = frozenset(
    {
        "embedstream_budget_members",
        "embedstream_budget_fleet_in_flight",
        "embedstream_budget_leases",
        "embedstream_budget_on_own_share",
        "embedstream_budget_waits_total",
        "embedstream_budget_store_seconds",
        "embedstream_budget_token_ratio",
    }
)
WAIT_REASONS = ("slots", "gate", "rates")
# A store decision: a round trip on a LAN, milliseconds; the fallback cuts in well before a second.
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class BudgetMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._members = Gauge(
            "embedstream_budget_members",
            "Members drawing on the provider budget, as last seen (1: a process alone).",
            registry=registry,
        )
        self._members.set(1)
        self._fleet = Gauge(
            "embedstream_budget_fleet_in_flight",
            "Provider calls in flight across the fleet, by lane, as last seen.",
            ["lane"],
            registry=registry,
        )
        self._leases = Gauge(
            "embedstream_budget_leases",
            "This member's leases of the shared budget (its calls in flight), by lane.",
            ["lane"],
            registry=registry,
        )
        self._on_own = Gauge(
            "embedstream_budget_on_own_share",
            "1 while the budget's store is out of reach and this member keeps to its share "
            "(the limits over the members last seen) alone.",
            registry=registry,
        )
        self._waits = Counter(
            "embedstream_budget_waits",
            "Calls the shared budget told to wait, by lane and reason (slots, gate, rates).",
            ["lane", "reason"],
            registry=registry,
        )
        self._round_trips = Histogram(
            "embedstream_budget_store_seconds",
            "Seconds a decision of the shared budget's store took, by outcome.",
            ["outcome"],
            buckets=STORE_BUCKETS,
            registry=registry,
        )
        self._token_ratio = Gauge(
            "embedstream_budget_token_ratio",
            "The share of our token estimates the provider counts, from its reported usage, "
            "smoothed over calls: the RPM/TPM pace counts estimates at this share (plus 5%); "
            "1 until a call reported usage.",
            registry=registry,
        )
        self._token_ratio.set(1)
        for lane in Priority:
            self._fleet.labels(lane.label)
            self._leases.labels(lane.label)
            for reason in WAIT_REASONS:  # rate() reads 0, not "no data", before a first wait
                self._waits.labels(lane.label, reason)

    def set_budget_fleet(
        self, members: int, in_flight: Mapping[str, int], leases: Mapping[str, int]
    ) -> None:
        self._members.set(members)
        for lane, calls in in_flight.items():
            self._fleet.labels(lane).set(calls)
        for lane, calls in leases.items():
            self._leases.labels(lane).set(calls)

    def set_budget_on_own_share(self, on_own: bool) -> None:
        self._on_own.set(1 if on_own else 0)

    def count_budget_wait(self, lane: str, reason: str) -> None:
        self._waits.labels(lane, reason).inc()

    def observe_budget_round_trip(self, seconds: float, *, ok: bool) -> None:
        self._round_trips.labels("ok" if ok else "failed").observe(seconds)

    def watch_token_ratio(self, read: Callable[[], float | None]) -> None:
        self._token_ratio.set_function(lambda: read() or 1.0)
