"""The `top` line of the sources that spend the most provider tokens (accounting per source).

Pure: from the targets' views to one line. Over the last refresh once there are rates (tokens
per second), totals since start before that; sources are summed over every target, since
several processors of one group read the same topics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.rows import fmt_count, fmt_rate

TOP_SOURCES = 3


def _summed(per_target: Sequence[Mapping[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for tokens in per_target:
        for source, value in tokens.items():
            total[source] = total.get(source, 0.0) + value
    return total


def sources_line(views: Sequence[TargetView], top: int = TOP_SOURCES) -> str | None:
    """E.g. ``tokens by source: orders.low 61% (12.0k/s), wiki.low 39% (7700/s)``; None
    before any source has spent a token."""
    up = [v for v in views if v.snapshot is not None]
    rated = [v.rates for v in up if v.rates is not None]
    if rated and len(rated) == len(up):
        tokens = _summed([r.source_tokens for r in rated])
        unit, scale, fmt = "/s", 1.0 / rated[0].elapsed_s, fmt_rate
    else:
        tokens = _summed([v.snapshot.source_tokens for v in up if v.snapshot is not None])
        unit, scale, fmt = " since start", 1.0, fmt_count
    total = sum(tokens.values())
    if total <= 0:
        return None
    ranked = sorted(tokens.items(), key=lambda item: (-item[1], item[0]))
    shown = [f"{source} {value / total:.0%} ({fmt(value * scale)}{unit})"
             for source, value in ranked[:top] if value > 0]  # fmt: skip
    rest = len([v for _, v in ranked[top:] if v > 0])
    more = f", {rest} more" if rest else ""
    return "tokens by source: " + ", ".join(shown) + more
