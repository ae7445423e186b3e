"""The online lane's line of `embedstream top`: requests answered per second, those refused at
once (429) or failed (5xx), and the P99 a caller waited, over every target serving it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from embedstream.tools.top.histogram import merge_histograms
from embedstream.tools.top.rates import TargetView


def online_line(views: Sequence[TargetView]) -> str | None:
    """Over the last refresh (totals since start before the second); None while no target has
    answered an online request."""
    serving = [v for v in views if v.snapshot is not None and v.snapshot.online_used]
    if not serving:
        return None
    rated = [v.rates for v in serving if v.rates is not None]
    if len(rated) < len(serving):
        totals = [v.snapshot.online_requests for v in serving if v.snapshot is not None]
        ok, refused, failed = _split(totals)
        return (f"online: {ok:,.0f} answered since start, {refused:,.0f} refused (429), "
                f"{failed:,.0f} failed (5xx)")  # fmt: skip
    elapsed = rated[0].elapsed_s
    ok, refused, failed = _split([r.online_requests for r in rated])
    p99 = merge_histograms(r.online_latency for r in rated).quantile(0.99)
    tail = "-" if p99 is None else f"{p99 * 1000:.0f} ms"
    return (f"online: {ok / elapsed:,.1f} req/s, P99 {tail}, "
            f"{refused / elapsed:,.1f} refused/s (429), "
            f"{failed / elapsed:,.1f} failed/s (5xx)")  # fmt: skip


def _split(by_status: Sequence[Mapping[str, float]]) -> tuple[float, float, float]:
    """(2xx, 429, 5xx) requests."""
    ok = refused = failed = 0.0
    for counts in by_status:
        for status, value in counts.items():
            if status.startswith("2"):
                ok += value
            elif status == "429":
                refused += value
            elif status.startswith("5"):
                failed += value
    return ok, refused, failed
