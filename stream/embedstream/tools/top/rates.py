"""Pure rates of ``embedstream top``: what changed on one target between two snapshots.

:func:`compute_rates` compares two snapshots of the same target (parsed by
:mod:`embedstream.tools.top.readings`) taken ``elapsed_s`` apart; :class:`TargetView` is one
target at one refresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from embedstream.tools.top.histogram import Histogram, merge_histograms
from embedstream.tools.top.readings import PROVIDER_WIDE, Snapshot, frozen_mapping, increase


@dataclass(frozen=True, slots=True)
class Rates:
    """What changed on one target between two snapshots taken ``elapsed_s`` apart."""

    elapsed_s: float
    results: Mapping[str, float]  # increase by lane
    flushes: Mapping[str, float]  # increase by reason
    batch_size: Histogram  # increase
    item_wait: Mapping[str, Histogram]  # increase by lane
    api_errors: float
    dead_letters: float
    retries: float
    calls_ok: float = 0.0
    calls_failed: float = 0.0
    provider_wide_errors: float = 0.0
    cache_hits: float = 0.0
    cache_misses: float = 0.0
    cache_errors: float = 0.0
    cache_tokens_saved: float = 0.0
    documents: Mapping[str, float] = field(default_factory=frozen_mapping)  # increase by outcome
    chunks: float = 0.0
    source_tokens: Mapping[str, float] = field(default_factory=frozen_mapping)  # increase by source
    online_requests: Mapping[str, float] = field(default_factory=frozen_mapping)  # by status
    online_latency: Histogram = field(default_factory=Histogram)  # increase

    def items_per_s(self, lane: str | None = None) -> float:
        items = sum(self.results.values()) if lane is None else self.results.get(lane, 0.0)
        return items / self.elapsed_s

    @property
    def errors_per_s(self) -> float:
        return self.api_errors / self.elapsed_s

    @property
    def dead_letters_per_s(self) -> float:
        return self.dead_letters / self.elapsed_s

    @property
    def retries_per_s(self) -> float:
        return self.retries / self.elapsed_s

    @property
    def provider_failing(self) -> bool:
        """The provider refused everyone (bad key, unknown model), or every call failed."""
        all_failed = self.calls_failed > 0 and self.calls_ok == 0
        return self.provider_wide_errors > 0 or all_failed

    @property
    def batch_mean(self) -> float | None:
        """Mean inputs per call over the interval; None when no batch was flushed."""
        if self.batch_size.count <= 0:
            return None
        return self.batch_size.sum / self.batch_size.count

    def item_wait_histogram(self, lane: str | None = None) -> Histogram:
        if lane is not None:
            return self.item_wait.get(lane, Histogram())
        return merge_histograms(self.item_wait.values())

    def item_wait_quantile(self, q: float, lane: str | None = None) -> float | None:
        """Seconds; None when no item was flushed in the interval."""
        return self.item_wait_histogram(lane).quantile(q)


def _increases(current: Mapping[str, float], earlier: Mapping[str, float]) -> Mapping[str, float]:
    return frozen_mapping({k: increase(v, earlier.get(k, 0.0)) for k, v in current.items()})


def compute_rates(earlier: Snapshot, current: Snapshot, elapsed_s: float) -> Rates:
    """Rates of ``current`` relative to ``earlier``; ``elapsed_s`` must be positive."""
    if not elapsed_s > 0:
        raise ValueError(f"elapsed_s must be positive, got {elapsed_s}")
    empty = Histogram()
    calls = _increases(current.api_calls, earlier.api_calls)
    return Rates(
        elapsed_s=elapsed_s,
        results=_increases(current.results, earlier.results),
        flushes=_increases(current.flushes, earlier.flushes),
        batch_size=current.batch_size.increase_since(earlier.batch_size),
        item_wait=MappingProxyType(
            {
                lane: hist.increase_since(earlier.item_wait.get(lane, empty))
                for lane, hist in current.item_wait.items()
            }
        ),
        api_errors=increase(current.api_errors, earlier.api_errors),
        dead_letters=increase(current.dead_letters, earlier.dead_letters),
        retries=increase(current.retries, earlier.retries),
        calls_ok=calls.get("ok", 0.0),
        calls_failed=calls.get("error", 0.0),
        provider_wide_errors=increase(
            current.api_errors_by_class.get(PROVIDER_WIDE, 0.0),
            earlier.api_errors_by_class.get(PROVIDER_WIDE, 0.0),
        ),
        cache_hits=increase(current.cache_hits, earlier.cache_hits),
        cache_misses=increase(current.cache_misses, earlier.cache_misses),
        cache_errors=increase(current.cache_errors, earlier.cache_errors),
        cache_tokens_saved=increase(current.cache_tokens_saved, earlier.cache_tokens_saved),
        documents=_increases(current.documents, earlier.documents),
        chunks=increase(current.chunks, earlier.chunks),
        source_tokens=_increases(current.source_tokens, earlier.source_tokens),
        online_requests=_increases(current.online_requests, earlier.online_requests),
        online_latency=current.online_latency.increase_since(earlier.online_latency),
    )


@dataclass(frozen=True, slots=True)
class TargetView:
    """One target at one refresh: a snapshot (and rates once there are two), or why it is down."""

    url: str
    snapshot: Snapshot | None = None
    rates: Rates | None = None
    error: str | None = None

    @property
    def up(self) -> bool:
        return self.snapshot is not None
