"""The backfill's line of `embedstream top`: a migration's progress over every processor
filling the new generation (documents against the plan; the provider's tokens beside the plan's
estimate, two units never set against each other; records of the documents topic left, the
time left at the last minute's rate)."""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.readings import BackfillProgress


def backfill_line(views: Sequence[TargetView]) -> str | None:
    """None while no target is filling a generation. Counts are since each processor
    started; the plan is the generation's (each processor reports the same one)."""
    filling = [v.snapshot.backfill for v in views if v.snapshot is not None]
    progress = [b for b in filling if b is not None]
    if not progress:
        return None
    planned = max(b.planned_documents for b in progress)
    planned_tokens = max(b.planned_tokens for b in progress)
    ended = sum(b.ended for b in progress)
    skipped = sum(b.skipped for b in progress)
    superseded = sum(b.superseded for b in progress)
    tokens = sum(b.tokens for b in progress)
    left = sum(b.records_left for b in progress)
    passed = f", {superseded:,.0f} older versions passed over" if superseded else ""
    return (
        f"backfill: {ended + skipped:,.0f} of {planned:,.0f} documents "
        f"({skipped:,.0f} held already{passed}), {tokens:,.0f} provider tokens (planned "
        f"{planned_tokens:,.0f} estimated), {left:,.0f} records to read, "
        f"{_time_left(progress, left)}"
    )


def _time_left(progress: Sequence[BackfillProgress], left: float) -> str:
    if left <= 0:
        return "all read"
    known = [b.seconds_left for b in progress if b.records_left > 0]
    if any(s is None or s < 0 for s in known):
        return "no progress in the last minute"
    longest = max(s for s in known if s is not None)
    if longest < 90:
        return f"about {longest:.0f} s left"
    if longest < 5400:
        return f"about {longest / 60:.0f} min left"
    return f"about {longest / 3600:.1f} h left"
