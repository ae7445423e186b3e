"""The asyncio shell around the pure policy: buffers items, asks the policy, launches calls.

It owns no I/O of its own: ``dispatch`` (the embedder plus sink) is injected, and so are the
clock and the backlog source (consumer lag), which keeps the timing rules testable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from stream.lanes import Bucket, BucketKey, Pending, Priority
from stream.policy import BatchLimits, Flush, FlushReason, Wait, batch_length, decide

T = TypeVar("T")
Dispatch = Callable[[BucketKey, list[Pending[T]], FlushReason], Awaitable[None]]

log = logging.getLogger(__name__)


class Batcher(Generic[T]):
    def __init__(
        self,
        limits: BatchLimits,
        dispatch: Dispatch[T],
        *,
        max_concurrency: int,
        clock: Callable[[], float] = time.monotonic,
        backlog: Callable[[], int] = lambda: 0,
    ) -> None:
        self._limits = limits
        self._dispatch = dispatch
        self._max_concurrency = max_concurrency
        self._clock = clock
        self._backlog = backlog
        self._buckets: dict[BucketKey, Bucket[T]] = {}
        self._buffered = 0
        self._in_flight: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._draining = False
        self._buffered_by_priority: dict[Priority, int] = dict.fromkeys(Priority, 0)
        # Observes every cut batch (metrics): key, items, reason, and the clock reading.
        self.on_flush: Callable[[BucketKey, list[Pending[T]], FlushReason, float], None] | None = (
            None
        )

    @property
    def buffered(self) -> int:
        return self._buffered

    def buffered_in(self, priority: Priority) -> int:
        return self._buffered_by_priority[priority]

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def add(self, key: BucketKey, tokens: int, payload: T) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(key)
        bucket.add(Pending(tokens, self._clock(), payload))
        self._buffered += 1
        self._buffered_by_priority[key.priority] += 1
        self._wake.set()

    def drop_where(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove buffered (not yet sent) items, e.g. those of revoked partitions."""
        dropped: list[T] = []
        for bucket in self._buckets.values():
            gone = bucket.drop_where(predicate)
            self._buffered_by_priority[bucket.key.priority] -= len(gone)
            dropped.extend(p.payload for p in gone)
        self._buffered -= len(dropped)
        return dropped

    def drain(self) -> None:
        """Flush everything now, ignoring wait budgets; `run` returns once all calls finish."""
        self._draining = True
        self._wake.set()

    async def run(self) -> None:
        try:
            while not (self._draining and self._buffered == 0 and not self._in_flight):
                timeout = self._launch_ready()
                # Safe: nothing can add items between deciding and clearing (no await).
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
        finally:
            if self._in_flight:
                await asyncio.gather(*self._in_flight, return_exceptions=True)

    def _launch_ready(self) -> float | None:
        """Launch every batch that is due while call slots are free; return the next wake-up."""
        while len(self._in_flight) < self._max_concurrency:
            now = self._clock()
            depth = self._buffered + self._backlog()
            ready = self._next_ready(now, depth)
            if isinstance(ready, tuple):
                self._launch(*ready)
                continue
            return ready
        return None  # no free slot: a finishing call wakes us

    def _next_ready(self, now: float, depth: int) -> tuple[Bucket[T], FlushReason] | float | None:
        soonest: float | None = None
        for bucket in sorted(self._buckets.values(), key=_bucket_order):
            if not bucket:
                continue
            counts = bucket.token_counts(self._limits.max_items + 1)
            decision = decide(self._limits, counts, bucket.oldest_arrival, now, depth)
            if isinstance(decision, Flush):
                return bucket, decision.reason
            if self._draining:
                return bucket, "drain"
            if isinstance(decision, Wait):
                soonest = decision.seconds if soonest is None else min(soonest, decision.seconds)
        if soonest is not None:
            return max(soonest, 0.0005)
        return None

    def _launch(self, bucket: Bucket[T], reason: FlushReason) -> None:
        counts = bucket.token_counts(self._limits.max_items + 1)
        items = bucket.take(batch_length(counts, self._limits))
        self._buffered -= len(items)
        self._buffered_by_priority[bucket.key.priority] -= len(items)
        if self.on_flush is not None:
            self.on_flush(bucket.key, items, reason, self._clock())
        task = asyncio.create_task(self._call(bucket.key, items, reason))
        self._in_flight.add(task)

    async def _call(self, key: BucketKey, items: list[Pending[T]], reason: FlushReason) -> None:
        try:
            await self._dispatch(key, items, reason)
        except Exception:
            log.exception("dispatch of a batch of %d failed", len(items))
        finally:
            self._in_flight.discard(asyncio.current_task())
            self._wake.set()


def _bucket_order(bucket: Bucket[T]) -> tuple[int, float]:
    return (int(bucket.key.priority), bucket.oldest_arrival if bucket else math.inf)
