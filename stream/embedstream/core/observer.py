"""What the engine reports as it works: the one seam between batching and metrics.

The engine (its cache included) calls these methods; `embedstream.ops.metrics.Metrics`
implements them on a Prometheus registry, and :class:`NullObserver` ignores them (the
in-process client without metrics, unit tests). Pure: a Protocol and a no-op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol


class CacheObserver(Protocol):
    def count_cache_lookups(
        self, hits_by_tier: Mapping[str, int], misses: int, tokens_saved: int
    ) -> None:
        """One batched look-up: hits per tier (memory, redis), misses, and the estimated
        tokens the hits kept from the provider."""

    def count_cache_error(self, operation: str) -> None:
        """A look-up or write of the shared tier failed (Redis down, slow or refusing)."""

    def count_cache_evictions(self, tier: str, entries: int) -> None:
        """Entries the in-process tier dropped to stay within its bounds."""


class EngineObserver(CacheObserver, Protocol):
    def observe_flush(
        self, lane: str, reason: str, items: int, tokens: int, waits_s: Sequence[float]
    ) -> None:
        """A batch was cut: its lane, why, its size and each item's wait in the batcher."""

    def observe_call(self, latency_s: float, *, ok: bool) -> None:
        """One provider call finished."""

    def observe_error(self, error_class: str, reason: str) -> None:
        """A provider call failed."""

    def count_retry(self, reason: str) -> None:
        """An item is to be tried again later."""

    def count_dead_letter(self, reason: str) -> None:
        """An item was given up on."""


class NullObserver:
    def observe_flush(
        self, lane: str, reason: str, items: int, tokens: int, waits_s: Sequence[float]
    ) -> None:
        return None

    def observe_call(self, latency_s: float, *, ok: bool) -> None:
        return None

    def observe_error(self, error_class: str, reason: str) -> None:
        return None

    def count_retry(self, reason: str) -> None:
        return None

    def count_dead_letter(self, reason: str) -> None:
        return None

    def count_cache_lookups(
        self, hits_by_tier: Mapping[str, int], misses: int, tokens_saved: int
    ) -> None:
        return None

    def count_cache_error(self, operation: str) -> None:
        return None

    def count_cache_evictions(self, tier: str, entries: int) -> None:
        return None


class BudgetObserver(Protocol):
    """What a shared provider budget reports (`engine/budget_shared.py`)."""

    def set_budget_fleet(
        self, members: int, in_flight: Mapping[str, int], leases: Mapping[str, int]
    ) -> None:
        """The fleet as the last answer showed it: its members, its calls in flight per lane,
        and this member's leases per lane."""

    def set_budget_on_own_share(self, on_own: bool) -> None:
        """Whether the store is out of reach (this member keeps to its share alone)."""

    def count_budget_wait(self, lane: str, reason: str) -> None:
        """A call was told to wait (no slot, the gate, the pace)."""

    def observe_budget_round_trip(self, seconds: float, *, ok: bool) -> None:
        """One decision asked of the store."""

    def watch_token_ratio(self, read: Callable[[], float | None]) -> None:
        """The pace's calibration (`core/calibration.py`): ``read`` gives the share of our
        token estimates the provider counts (None before any call reported it)."""


class NullBudgetObserver:
    def set_budget_fleet(
        self, members: int, in_flight: Mapping[str, int], leases: Mapping[str, int]
    ) -> None:
        return None

    def set_budget_on_own_share(self, on_own: bool) -> None:
        return None

    def count_budget_wait(self, lane: str, reason: str) -> None:
        return None

    def observe_budget_round_trip(self, seconds: float, *, ok: bool) -> None:
        return None

    def watch_token_ratio(self, read: Callable[[], float | None]) -> None:
        return None
