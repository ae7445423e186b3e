"""Cumulative Prometheus histograms as ``embedstream top`` reads them: increases between two
scrapes, merges across targets, and quantiles.

Quantiles follow Prometheus ``histogram_quantile``: find the bucket holding the rank and
interpolate linearly inside it; a rank in the ``+Inf`` bucket answers the largest finite
bound. Computed over bucket *increases* between two snapshots, they describe the last
interval, not the whole life of the process.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are (upper bound, cumulative count), ascending."""

    buckets: tuple[tuple[float, float], ...] = ()
    sum: float = 0.0
    count: float = 0.0

    @property
    def bounds(self) -> tuple[float, ...]:
        return tuple(le for le, _ in self.buckets)

    def cumulative_at(self, le: float) -> float:
        """Cumulative count of the largest bound not above ``le`` (0 below the first)."""
        total = 0.0
        for bound, cumulative in self.buckets:
            if bound > le:
                break
            total = cumulative
        return total

    def increase_since(self, earlier: Histogram) -> Histogram:
        """Observations made after ``earlier``; all of ``self`` if the process restarted."""
        if not earlier.buckets and earlier.count == 0:
            return self
        if self.bounds != earlier.bounds or self.count < earlier.count:
            return self
        deltas = tuple(
            (le, now - then)
            for (le, now), (_, then) in zip(self.buckets, earlier.buckets, strict=True)
        )
        if any(delta < 0 for _, delta in deltas):
            return self
        return Histogram(deltas, self.sum - earlier.sum, self.count - earlier.count)

    def merge(self, other: Histogram) -> Histogram:
        """Both histograms' observations together (different layouts: union of bounds)."""
        if not other.buckets and other.count == 0:
            return self
        if not self.buckets and self.count == 0:
            return other
        bounds = sorted(set(self.bounds) | set(other.bounds))
        buckets = tuple((le, self.cumulative_at(le) + other.cumulative_at(le)) for le in bounds)
        return Histogram(buckets, self.sum + other.sum, self.count + other.count)

    def quantile(self, q: float) -> float | None:
        """Prometheus ``histogram_quantile(q)``; None without observations or a +Inf bucket."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        if len(self.buckets) < 2 or not math.isinf(self.buckets[-1][0]):
            return None
        # Scrapes are not atomic, so cumulative counts may dip; Prometheus smooths that too.
        bounds: list[float] = []
        counts: list[float] = []
        running = 0.0
        for le, cumulative in self.buckets:
            running = max(running, cumulative)
            bounds.append(le)
            counts.append(running)
        total = counts[-1]
        if total <= 0:
            return None
        rank = q * total
        b = next(i for i, cumulative in enumerate(counts) if cumulative >= rank)
        if b == len(bounds) - 1:
            return bounds[-2]
        if b == 0 and bounds[0] <= 0:
            return bounds[0]
        start = 0.0 if b == 0 else bounds[b - 1]
        end = bounds[b]
        in_bucket = counts[b] - (0.0 if b == 0 else counts[b - 1])
        rank -= 0.0 if b == 0 else counts[b - 1]
        if in_bucket <= 0:
            return end
        return start + (end - start) * (rank / in_bucket)


def merge_histograms(histograms: Iterable[Histogram]) -> Histogram:
    merged = Histogram()
    for histogram in histograms:
        merged = merged.merge(histogram)
    return merged
