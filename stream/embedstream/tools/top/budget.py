"""The provider budget's line of `embedstream top`: with a shared budget (`budget_url`), the
fleet's use of it (members, calls in flight by lane, as the freshest target saw them) and the
watched targets' share; and the targets keeping to their own share while its store is out of
reach."""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.core.lanes import Priority
from embedstream.tools.top.rates import TargetView


def budget_line(views: Sequence[TargetView]) -> str | None:
    """None while no target draws on a shared budget."""
    shared = [v for v in views if v.snapshot is not None and v.snapshot.budget_shared]
    if not shared:
        return None
    fleet = max(shared, key=lambda v: sum(v.snapshot.budget_fleet.values()) if v.snapshot else 0)
    assert fleet.snapshot is not None
    in_flight = fleet.snapshot.budget_fleet
    total = sum(in_flight.values())
    ours = sum(sum(v.snapshot.budget_leases.values()) for v in shared if v.snapshot is not None)
    lanes = ", ".join(
        f"{lane.label} {in_flight.get(lane.label, 0):,.0f}"
        for lane in Priority
        if in_flight.get(lane.label, 0) > 0
    )
    share = f"{ours / total:.0%}" if total else "-"
    line = (
        f"budget: fleet of {fleet.snapshot.budget_members:,.0f} members, {total:,.0f} calls "
        f"in flight{f' ({lanes})' if lanes else ''}; these {len(shared)} hold {ours:,.0f} ({share})"
    )
    alone = [v.url for v in shared if v.snapshot is not None and v.snapshot.budget_on_own_share]
    if alone:
        line += f"; on their own share (store out of reach): {', '.join(alone)}"
    return line
