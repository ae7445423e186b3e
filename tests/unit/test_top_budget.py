"""The provider budget's line of ``embedstream top``: the fleet's use of a shared budget and
the watched targets' share, from the members' own metrics (ops/budget_metrics.py)."""

from __future__ import annotations

from collections.abc import Callable

from embedstream.ops.metrics import Metrics
from embedstream.tools.top.budget import budget_line
from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.readings import Snapshot, parse_exposition
from prometheus_client import CollectorRegistry, generate_latest


def scrape(setup: Callable[[Metrics], None]) -> Snapshot:
    metrics = Metrics(CollectorRegistry())
    setup(metrics)
    return parse_exposition(generate_latest(metrics.registry).decode())


def member(
    members: int, fleet: dict[str, int], own: dict[str, int], *, alone: bool = False
) -> Callable[[Metrics], None]:
    def setup(m: Metrics) -> None:
        m.budget.set_budget_fleet(members, fleet, own)
        m.budget.set_budget_on_own_share(alone)

    return setup


def test_no_budget_line_for_processes_on_their_own_budget() -> None:
    snapshot = scrape(lambda m: None)
    assert not snapshot.budget_shared
    assert budget_line([TargetView("http://a/metrics", snapshot)]) is None


def test_the_fleets_calls_by_lane_and_the_watched_targets_share() -> None:
    fleet = {"online": 2, "high": 1, "low": 5, "backfill": 0}
    views = [
        TargetView("http://p1/metrics", scrape(member(4, fleet, {"low": 3}))),
        TargetView("http://p2/metrics", scrape(member(4, fleet, {"low": 2, "high": 1}))),
        TargetView("http://p3/metrics", error="unreachable"),
    ]
    assert budget_line(views) == (
        "budget: fleet of 4 members, 8 calls in flight (online 2, high 1, low 5); "
        "these 2 hold 6 (75%)"
    )


def test_targets_on_their_own_share_are_named() -> None:
    views = [
        TargetView("http://p1/metrics", scrape(member(3, {"low": 2}, {"low": 1}, alone=True))),
        TargetView("http://p2/metrics", scrape(member(3, {"low": 2}, {"low": 1}))),
    ]
    line = budget_line(views)
    assert line is not None and line.endswith(
        "; on their own share (store out of reach): http://p1/metrics"
    )
