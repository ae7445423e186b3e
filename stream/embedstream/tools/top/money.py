"""The money line of ``embedstream top``: provider tokens by price tier (a sync call's, a batch
job's) and what they cost, and the batch jobs the targets follow. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.rows import fmt_count

# Batch job states shown, in their order (finished jobs are kept a week: not shown).
JOB_STATES = ("forming", "closed", "submitted", "ended")


def money_line(views: Sequence[TargetView]) -> str | None:
    """E.g. ``money: 1.2M tokens, 97% at the batch price; $0.013 (sync $0.000, batch $0.013);
    jobs 2 submitted, 1 ended, oldest 3 min`` (since each processor started); None before any
    provider token."""
    snaps = [v.snapshot for v in views if v.snapshot is not None]
    tokens = {tier: sum(s.tier_tokens.get(tier, 0.0) for s in snaps) for tier in ("sync", "batch")}
    total = sum(tokens.values())
    if total <= 0:
        return None
    cost = {tier: sum(s.tier_cost.get(tier, 0.0) for s in snaps) for tier in ("sync", "batch")}
    line = (f"money: {fmt_count(total)} tokens, {tokens['batch'] / total:.0%} at the batch price; "
            f"${sum(cost.values()):,.3f} (sync ${cost['sync']:,.3f}, "
            f"batch ${cost['batch']:,.3f})")  # fmt: skip
    jobs = {state: sum(s.batch_jobs.get(state, 0.0) for s in snaps) for state in JOB_STATES}
    if any(jobs.values()):
        said = ", ".join(f"{count:.0f} {state}" for state, count in jobs.items() if count)
        oldest = max(s.batch_oldest_s for s in snaps)
        line += f"; jobs {said}" + (f", oldest {_age(oldest)}" if oldest > 0 else "")
    return line


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
